#include "cli.hpp"

#include "errors.hpp"
#include "kernel_port.hpp"
#include "pci_address.hpp"

#include <openssl/evp.h>

#include <array>
#include <cstdio>
#include <iomanip>
#include <sstream>

namespace farpass::agent {

using nlohmann::json;

namespace {

struct Command {
	std::string_view name;
	std::string_view method;   // empty: computed here, no agent
	std::string_view operand;  // "PCI", "TYPE" or none
	std::string_view summary;
};

const Command commands[] = {
	{"list", "cluster.devices", "", "devices lent in the cluster, where they are and who borrows them"},
	{"lend", "device.lend", "PCI", "lend PCI: bind it to vfio-pci and offer it to the cluster"},
	{"unlend", "device.unlend", "PCI", "give PCI back to this host (refused while borrowed unless --force)"},
	{"borrows", "lease.list", "", "this host's devices that are borrowed, by whom, for how long"},
	{"status", "cluster.status", "", "this agent: host, protocol, uptime, lease time, peers"},
	{"mdev-uuid", "", "TYPE", "the mdev UUID of farpass mdev type TYPE, the same on every host"},
};

// UUIDv5 namespace of farpass mdev UUIDs (random, fixed forever: changing it changes every UUID).
constexpr std::array<unsigned char, 16> mdev_uuid_namespace = {0x3f, 0x71, 0x68, 0x37, 0x70, 0x04, 0x44, 0x91,
							       0x9d, 0x30, 0x2d, 0x73, 0xf9, 0x31, 0xa5, 0xb8};
constexpr std::string_view type_marker = "-farpass-";

std::string hex4(std::uint64_t value)
{
	char text[8];
	std::snprintf(text, sizeof(text), "%04llx", static_cast<unsigned long long>(value));
	return text;
}

std::string size_text(std::uint64_t bytes)
{
	static constexpr const char *units[] = {"", "K", "M", "G", "T"};
	int unit = 0;
	while (bytes >= 1024 && bytes % 1024 == 0 && unit < 4) {
		bytes /= 1024;
		unit++;
	}
	return std::to_string(bytes) + units[unit];
}

std::string bars_text(const json &bar_sizes)
{
	std::string text;
	for (std::size_t bar = 0; bar < bar_sizes.size(); bar++) {
		if (bar_sizes[bar] == 0)
			continue;
		text += (text.empty() ? "" : ",") + std::to_string(bar) + ":" + size_text(bar_sizes[bar]);
	}
	return text.empty() ? "-" : text;
}

// Columns padded to their widest cell, two spaces apart.
void print_table(std::ostream &out, const std::vector<std::vector<std::string>> &rows)
{
	std::vector<std::size_t> widths;
	for (const auto &row : rows)
		for (std::size_t column = 0; column < row.size(); column++) {
			widths.resize(std::max(widths.size(), row.size()));
			widths[column] = std::max(widths[column], row[column].size());
		}
	for (const auto &row : rows) {
		std::string line;
		for (std::size_t column = 0; column < row.size(); column++)
			line += column + 1 < row.size() ? row[column] + std::string(widths[column] - row[column].size() + 2, ' ')
							: row[column];
		out << line << "\n";
	}
}

// A free device whose reset failed takes no lease (docs/agent-protocol.md, "Leases"); a lender older
// than that field sends none.
std::string holder_text(const json &device)
{
	if (!device.at("borrower").is_null())
		return device.at("borrower");
	return device.value("reset_failed", false) ? "- (reset failed)" : "-";
}

void print_text(std::ostream &out, std::string_view command, const json &result)
{
	if (command == "list") {
		std::vector<std::vector<std::string>> rows = {{"HOST", "PCI", "ID", "BARS", "BORROWER"}};
		for (const json &device : result.at("devices"))
			rows.push_back({device.at("host"), device.at("pci"),
					hex4(device.at("vendor")) + ":" + hex4(device.at("device")),
					bars_text(device.at("bar_sizes")),
					holder_text(device)});
		if (rows.size() == 1)
			out << "no devices lent in the cluster\n";
		else
			print_table(out, rows);
		for (const json &peer : result.at("unreachable"))
			out << "unreachable: " << peer.at("host").get<std::string>() << " ("
			    << peer.at("error").get<std::string>() << ")\n";
	} else if (command == "lend") {
		out << "lent " << result.at("pci").get<std::string>() << " (" << hex4(result.at("vendor")) << ":"
		    << hex4(result.at("device")) << ") from " << result.at("host").get<std::string>() << ", slot "
		    << result.at("irq_slot") << "\n";
		// A memory BAR left out of the BAR window is unreachable for borrowers: say so at once.
		std::string unmapped;
		const json &sizes = result.at("bar_sizes"), &flags = result.at("bar_flags"), &mapped = result.at("bar_mapped");
		for (std::size_t bar = 0; bar < sizes.size() && bar < mapped.size(); bar++)
			if (sizes[bar] != 0 && !(flags[bar].get<std::uint32_t>() & bar_io) && !mapped[bar].get<bool>())
				unmapped += (unmapped.empty() ? "" : ", ") + std::to_string(bar) + " (" + size_text(sizes[bar]) + ")";
		if (!unmapped.empty())
			out << "not in the BAR window (does not fit the slot): BAR " << unmapped << "\n";
	} else if (command == "borrows") {
		std::vector<std::vector<std::string>> rows = {{"PCI", "BORROWER", "EXPIRES IN"}};
		for (const json &lease : result.at("leases")) {
			std::ostringstream expires;
			expires << std::fixed << std::setprecision(1) << lease.at("expires_in_ms").get<double>() / 1000 << " s";
			rows.push_back({lease.at("pci"), lease.at("borrower"), expires.str()});
		}
		if (rows.size() == 1)
			out << "no borrows\n";
		else
			print_table(out, rows);
	} else if (command == "status") {
		std::string peers;
		for (const json &peer : result.at("peers"))
			peers += (peers.empty() ? "" : ", ") + peer.at("host").get<std::string>() + " (" +
				 peer.at("address").get<std::string>() + ")";
		out << "host:     " << result.at("host").get<std::string>() << "\n"
		    << "protocol: " << result.at("protocol") << "\n"
		    << "uptime:   " << result.at("uptime_s") << " s\n"
		    << "lease:    " << result.at("lease_ms") << " ms\n"
		    << "lent:     " << result.at("devices_lent") << " device(s), " << result.at("devices_borrowed")
		    << " borrowed\n"
		    << "peers:    " << (peers.empty() ? "none" : peers) << "\n";
		const json remote = result.value("remote_devices", json::array());
		out << "remote:   " << remote.size() << " device(s) announced to this host's kernel\n";
		for (const json &device : remote)
			out << "  " << device.at("lender").get<std::string>() << " " << device.at("pci").get<std::string>()
			    << " id " << device.at("id") << ", slot " << device.at("slot") << " (its mdev type) on NTB "
			    << device.at("ntb").get<std::string>()
			    << (device.at("announced").get<bool>() ? "" : " (not announced)")
			    << (device.at("borrowed").get<bool>() ? ", borrowed by this host" : "") << "\n";
	}
}

int exit_code_for(const AgentError &error)
{
	switch (error.code()) {
	case ErrorCode::peer_unreachable:
	case ErrorCode::timed_out: return error.error_number() == EACCES ? exit_denied : exit_unreachable;
	case ErrorCode::device_busy: return exit_busy;
	case ErrorCode::no_such_device:
	case ErrorCode::no_such_lease: return exit_not_found;
	case ErrorCode::permission_denied: return exit_denied;
	case ErrorCode::already_lent: return exit_already;
	default: return exit_failed;
	}
}

} // namespace

std::string farpass_mdev_uuid(std::string_view type_name)
{
	const std::size_t marker = type_name.find(type_marker);
	if (marker == std::string_view::npos || marker == 0 || marker + type_marker.size() == type_name.size())
		throw AgentError(ErrorCode::invalid_params, EINVAL,
				 "not a farpass mdev type (<ntb driver>-farpass-<lender>-<slot>): " + std::string(type_name));
	// Named by lender and slot only: the NTB driver may differ between borrowers.
	const std::string_view name = type_name.substr(marker + type_marker.size());
	std::string input(mdev_uuid_namespace.begin(), mdev_uuid_namespace.end());
	input += name;
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int length = 0;
	if (!EVP_Digest(input.data(), input.size(), digest, &length, EVP_sha1(), nullptr) || length < 16)
		throw AgentError(ErrorCode::internal_error, EIO, "SHA-1 failed");
	digest[6] = (digest[6] & 0x0f) | 0x50; // version 5 (RFC 4122 4.3)
	digest[8] = (digest[8] & 0x3f) | 0x80; // RFC 4122 variant
	std::string uuid;
	for (int i = 0; i < 16; i++) {
		char byte[3];
		std::snprintf(byte, sizeof(byte), "%02x", digest[i]);
		uuid += (i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "") + std::string(byte);
	}
	return uuid;
}

std::string farpassctl_usage()
{
	std::ostringstream usage;
	usage << "usage: farpassctl [--json] [--socket PATH] COMMAND [--force] [PCI|TYPE]\n\ncommands:\n";
	for (const Command &command : commands)
		usage << "  " << std::left << std::setw(10) << command.name << std::setw(6) << command.operand
		      << command.summary << "\n";
	usage << "\noptions:\n"
		 "  --json         print the agent's result as JSON (errors too, on stdout)\n"
		 "  --socket PATH  the agent's socket (default "
	      << default_socket
	      << ")\n"
		 "  --force        unlend even while borrowed: the lease ends, the device is reset\n"
		 "  --help         this text\n"
		 "\nexit codes: 0 ok, 1 failed, 2 usage, 3 agent unreachable, 4 busy, 5 not found,\n"
		 "            6 permission denied, 7 already lent\n";
	return usage.str();
}

int run_farpassctl(const std::vector<std::string> &args, const AgentCaller &call, std::ostream &out, std::ostream &err)
{
	bool as_json = false, force = false;
	std::string socket_path = default_socket;
	std::vector<std::string> operands;
	for (std::size_t i = 0; i < args.size(); i++) {
		if (args[i] == "--help" || args[i] == "-h") {
			out << farpassctl_usage();
			return exit_ok;
		} else if (args[i] == "--json") {
			as_json = true;
		} else if (args[i] == "--force") {
			force = true;
		} else if (args[i] == "--socket" && i + 1 < args.size()) {
			socket_path = args[++i];
		} else if (args[i].rfind("-", 0) == 0) {
			err << "farpassctl: unknown option " << args[i] << "\n" << farpassctl_usage();
			return exit_usage;
		} else {
			operands.push_back(args[i]);
		}
	}
	const Command *command = nullptr;
	for (const Command &candidate : commands)
		if (!operands.empty() && candidate.name == operands[0])
			command = &candidate;
	if (!command || operands.size() != (command->operand.empty() ? 1u : 2u) ||
	    (force && command->name != "unlend")) {
		err << farpassctl_usage();
		return exit_usage;
	}
	const auto report = [&](const AgentError &e) {
		if (as_json)
			out << json{{"error", {{"code", static_cast<int>(e.code())}, {"errno", e.error_number()}, {"message", e.what()}}}}
					.dump(2)
			    << "\n";
		else
			err << "farpassctl: " << e.what() << "\n";
	};
	if (command->name == "mdev-uuid") {
		try {
			const std::string uuid = farpass_mdev_uuid(operands[1]);
			out << (as_json ? json{{"type", operands[1]}, {"uuid", uuid}}.dump(2) : uuid) << "\n";
			return exit_ok;
		} catch (const AgentError &e) {
			report(e);
			return exit_usage;
		}
	}
	json params = json::object();
	if (command->operand == "PCI") {
		try {
			params["pci"] = canonical_pci_address(operands[1]);
		} catch (const AgentError &e) {
			err << "farpassctl: " << e.what() << "\n";
			return exit_usage;
		}
	}
	if (force)
		params["force"] = true;
	try {
		const json result = call(socket_path, command->method, params);
		if (as_json)
			out << result.dump(2) << "\n";
		else if (command->name == "unlend")
			out << "unlent " << params["pci"].get<std::string>() << "\n";
		else
			print_text(out, command->name, result);
		return exit_ok;
	} catch (const AgentError &e) {
		report(e);
		return exit_code_for(e);
	} catch (const std::exception &e) { // an answer without the fields the output needs
		report(AgentError(ErrorCode::internal_error, std::string("malformed answer from the agent: ") + e.what()));
		return exit_failed;
	}
}

} // namespace farpass::agent
