// farpassctl (lender-agent/cli.cpp) against a real agent core on fakes, through the protocol: its text
// and --json output for every command, compared with golden files under tests/golden/farpassctl/
// (FARPASS_UPDATE_GOLDEN=1 rewrites them), and its exit codes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"

#include <algorithm>
#include "cli.hpp"
#include "client.hpp"

#include <cstdlib>
#include <sstream>

using namespace farpass::agent;
using namespace farpass::agent::testing;
using nlohmann::json;

namespace {

const fs::path golden_dir = source_root() / "tests/golden/farpassctl";

// Host lender-a (the CLI's agent) lends an NVMe and a NIC, the NIC borrowed by borrower-b; peer lender-b
// lends its own NVMe (its reset after a lease failed), reached over an authenticated peer session; peer
// lender-c is down.
struct Cluster {
	Cluster() : lender_b(10'000, "lender-b")
	{
		lender_a.clock.now += 120'000;
		lender_a.lender->lend(nvme_address);
		lender_a.lender->lend(nic_address);
		lender_a.lender->acquire(nic_address, "borrower-b");
		lender_b.lender->lend(nvme_address);
		// Not reset after a lease: listed, and no new lease until a reset works.
		lender_b.vfio.records.at(nvme_address)->fail_resets = 1;
		lender_b.lender->release(nvme_address, "borrower-b", lender_b.lender->acquire(nvme_address, "borrower-b").id);
		lender_a.clock.now += 2'500;
		lender_a.context->peers = {{"lender-b", "10.0.0.2:7450"}, {"lender-c", "10.0.0.3:7450"}};
		lender_a.context->call_peer = [this](const PeerAddress &peer, std::string_view method, const json &params) {
			if (peer.host != "lender-b")
				throw AgentError(ErrorCode::peer_unreachable, ECONNREFUSED,
						 "connecting to " + peer.address + ": Connection refused");
			Session session(*lender_b.dispatcher, {Principal::peer, "lender-b", peer.address, nullptr, "lender-a"},
					[](LogLevel, const std::string &) {});
			LoopbackTransport pipe(session);
			RpcClient client(pipe, "lender-a");
			client.hello();
			return client.call(method, params);
		};
	}

	// Runs farpassctl; returns what a terminal would show, stdout then stderr and the exit code.
	std::string run(std::vector<std::string> args)
	{
		const AgentCaller call = [this](const std::string &socket_path, std::string_view method, const json &params) {
			CHECK(socket_path == default_socket);
			Session session(*lender_a.dispatcher, {Principal::local_admin, "lender-a", "cli", nullptr},
					[](LogLevel, const std::string &) {});
			LoopbackTransport pipe(session);
			RpcClient client(pipe, "farpassctl");
			client.hello();
			return client.call(method, params);
		};
		std::ostringstream out, err;
		exit_code = run_farpassctl(args, call, out, err);
		return out.str() + (err.str().empty() ? "" : "--- stderr\n" + err.str()) + "--- exit " +
		       std::to_string(exit_code) + "\n";
	}

	AgentFixture lender_a;
	AgentFixture lender_b;
	int exit_code = -1;
};

void check_golden(const std::string &name, const std::string &actual)
{
	const fs::path file = golden_dir / name;
	if (std::getenv("FARPASS_UPDATE_GOLDEN")) {
		write_file(file, actual);
		return;
	}
	REQUIRE_MESSAGE(fs::exists(file), "missing golden file " << file << " (FARPASS_UPDATE_GOLDEN=1 writes it)");
	CHECK(read_file(file) == actual);
}

} // namespace

TEST_CASE("golden output of every command, as text and as --json")
{
	const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
		{"list", {"list"}},
		{"borrows", {"borrows"}},
		{"status", {"status"}},
		{"lend", {"lend", "03:00.0"}},
		{"lend-already", {"lend", "02:00.0"}},
		{"unlend", {"unlend", "01:00.0"}},
		{"unlend-busy", {"unlend", "02:00.0"}},
		{"unlend-force", {"unlend", "--force", "02:00.0"}},
		{"unlend-not-lent", {"unlend", "0000:04:00.0"}},
		{"mdev-uuid", {"mdev-uuid", "ntb_hw_epf-farpass-lender-123456"}},
		{"mdev-uuid-not-farpass", {"mdev-uuid", "mtty-2"}},
	};
	for (const auto &[name, args] : cases) {
		CAPTURE(name);
		for (const bool as_json : {false, true}) {
			Cluster cluster;
			cluster.lender_a.tree.add_device("0000:03:00.0", 0x10de, 0x1eb8, {0x1000000, 0, 0x10000000, 0, 0x2000000, 0},
							 9, "");
			std::vector<std::string> command = args;
			if (as_json)
				command.insert(command.begin(), "--json");
			check_golden(name + (as_json ? ".json" : ".txt"), cluster.run(command));
		}
	}
}

TEST_CASE("exit codes: usage 2, busy 4, not found 5, already lent 7, unreachable 3")
{
	Cluster cluster;
	cluster.run({"unlend", nic_address});
	CHECK(cluster.exit_code == exit_busy);
	cluster.run({"unlend", "0000:04:00.0"});
	CHECK(cluster.exit_code == exit_not_found);
	cluster.run({"lend", nic_address});
	CHECK(cluster.exit_code == exit_already);
	for (const std::vector<std::string> &bad :
	     std::vector<std::vector<std::string>>{{}, {"frobnicate"}, {"lend"}, {"lend", "nvme0"}, {"list", "extra"}, {"list", "--force"}, {"--bogus", "list"}}) {
		CAPTURE(bad.size());
		cluster.run(bad);
		CHECK(cluster.exit_code == exit_usage);
	}
	std::ostringstream out, err;
	const AgentCaller down = [](const std::string &, std::string_view, const json &) -> json {
		throw AgentError(ErrorCode::peer_unreachable, ENOENT, "connecting to /run/farpass/agent.sock: No such file or directory");
	};
	CHECK(run_farpassctl({"status"}, down, out, err) == exit_unreachable);
	CHECK(err.str() == "farpassctl: connecting to /run/farpass/agent.sock: No such file or directory\n");
}

TEST_CASE("an answer the output cannot use is one clear error line and exit 1, not std::terminate")
{
	std::ostringstream out, err;
	const AgentCaller malformed = [](const std::string &, std::string_view, const json &) -> json {
		return {{"devices", {{{"host", "lender-a"}}}}}; // no pci, vendor, ...
	};
	CHECK(run_farpassctl({"list"}, malformed, out, err) == exit_failed);
	const std::string message = err.str();
	CHECK(message.rfind("farpassctl: malformed answer from the agent: ", 0) == 0);
	CHECK(std::count(message.begin(), message.end(), '\n') == 1);
}

TEST_CASE("mdev-uuid: RFC 4122 UUIDv5 of <lender>-<slot>, whatever the NTB driver; other names are usage errors")
{
	// Expected values from Python's uuid.uuid5(UUID("3f716837-7004-4491-9d30-2d73f931a5b8"), name).
	CHECK(farpass_mdev_uuid("ntb_hw_epf-farpass-lender-123456") == "0439d978-62dc-5e3c-b3d5-29444fb403e6");
	CHECK(farpass_mdev_uuid("ntb_hw_switchtec-farpass-lender-123456") == "0439d978-62dc-5e3c-b3d5-29444fb403e6");
	CHECK(farpass_mdev_uuid("ntb_hw_intel-farpass-lender-a-7") == "b42f6f3c-0489-5d3b-804c-ac291240dc7d");
	for (const char *bad : {"mtty-2", "farpass-lender-1", "-farpass-lender-1", "ntb_hw_epf-farpass-"}) {
		CAPTURE(bad);
		CHECK_THROWS_AS(farpass_mdev_uuid(bad), AgentError);
	}
	Cluster cluster;
	cluster.run({"mdev-uuid"});
	CHECK(cluster.exit_code == exit_usage);
	cluster.run({"mdev-uuid", "ntb_hw_epf-farpass-lender-1", "extra"});
	CHECK(cluster.exit_code == exit_usage);
}

TEST_CASE("--help prints the usage, which docs/agent-protocol.md quotes verbatim")
{
	Cluster cluster;
	check_golden("help.txt", cluster.run({"--help"}));
	CHECK(cluster.exit_code == exit_ok);
	const std::string docs = read_file(source_root() / "docs/agent-protocol.md");
	CHECK_MESSAGE(docs.find(farpassctl_usage()) != std::string::npos,
		      "docs/agent-protocol.md must contain farpassctl --help verbatim");
}

namespace {

// The entries of one section of a roff page: the first word of each line after ".TP", with roff's "\-"
// read as "-", in page order and separated by spaces.
std::string roff_entries(const std::string &page, const std::string &from_section, const std::string &to_section)
{
	const std::size_t begin = page.find(".SH " + from_section + "\n"), end = page.find(".SH " + to_section + "\n");
	REQUIRE_MESSAGE(begin < end, "sections " << from_section << " and " << to_section << " in that order");
	std::string names;
	std::istringstream lines(page.substr(begin, end - begin));
	for (std::string line; std::getline(lines, line);) {
		if (line != ".TP" || !std::getline(lines, line))
			continue;
		std::istringstream words(line);
		std::string macro, name;
		words >> macro >> name;
		for (std::size_t dash; (dash = name.find("\\-")) != std::string::npos;)
			name.erase(dash, 1);
		names += (names.empty() ? "" : " ") + name;
	}
	return names;
}

// The first word of each "  NAME ..." line of the block of --help under `heading`, up to its blank line.
std::string usage_entries(const std::string &heading)
{
	const std::string usage = farpassctl_usage();
	std::istringstream lines(usage.substr(usage.find(heading + "\n")));
	std::string line, names;
	std::getline(lines, line);
	while (std::getline(lines, line) && !line.empty())
		names += (names.empty() ? "" : " ") + line.substr(2, line.find(' ', 2) - 2);
	return names;
}

} // namespace

TEST_CASE("the man page docs/man/farpassctl.1 has exactly the commands and options of --help")
{
	CHECK(usage_entries("commands:") == "list lend unlend borrows status mdev-uuid");
	CHECK(usage_entries("options:") == "--json --socket --force --help");
	const std::string page = read_file(source_root() / "docs/man/farpassctl.1");
	CHECK(roff_entries(page, "COMMANDS", "OPTIONS") == usage_entries("commands:"));
	CHECK(roff_entries(page, "OPTIONS", "EXIT STATUS") == usage_entries("options:"));
}
