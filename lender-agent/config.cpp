#include "config.hpp"

#include "errors.hpp"
#include "protocol.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace farpass::agent {

using nlohmann::json;

namespace {

std::string machine_host_name()
{
	char name[256] = {};
	if (::gethostname(name, sizeof(name) - 1) != 0)
		throw_system_error("gethostname");
	return name;
}

template <typename T> T field(const json &config, const char *key, T fallback)
{
	const auto value = config.find(key);
	if (value == config.end())
		return fallback;
	try {
		return value->get<T>();
	} catch (const json::exception &) {
		throw AgentError(ErrorCode::invalid_params, std::string("config: \"") + key + "\" has the wrong type");
	}
}

// A number of the config, decoded with its range (decode_uint).
template <typename T> T number(const json &config, const char *key, T fallback, std::uint64_t min, std::uint64_t max)
{
	const auto value = config.find(key);
	if (value == config.end())
		return fallback;
	try {
		return decode_uint<T>(*value, key, min, max);
	} catch (const AgentError &e) {
		throw AgentError(ErrorCode::invalid_params, std::string("config: ") + e.what());
	}
}

} // namespace

AgentConfig parse_config(std::string_view text)
{
	json config;
	try {
		config = parse_json(text, true);
	} catch (const AgentError &e) {
		throw AgentError(ErrorCode::invalid_params, std::string("config: ") + e.what());
	}
	if (!config.is_object())
		throw AgentError(ErrorCode::invalid_params, "config: not a JSON object");
	for (const auto &[key, value] : config.items())
		if (key != "host" && key != "listen" && key != "socket" && key != "state_dir" &&
		    key != "pki" && key != "lease_ms" && key != "peers" && key != "poll_ms" && key != "device" &&
		    key != "call_timeout_ms" && key != "bar_slot_bytes" && key != "bar_window_bytes")
			throw AgentError(ErrorCode::invalid_params, "config: unknown key \"" + key + "\"");
	AgentConfig result;
	result.host = field<std::string>(config, "host", "");
	if (result.host.empty())
		result.host = machine_host_name();
	result.listen = field(config, "listen", result.listen);
	result.socket = field(config, "socket", result.socket);
	result.state_dir = field<std::string>(config, "state_dir", result.state_dir);
	result.pki = field<std::string>(config, "pki", result.pki);
	result.lease_ms = number(config, "lease_ms", result.lease_ms, min_lease_ms, max_lease_ms);
	result.poll_ms = number(config, "poll_ms", result.poll_ms, 100, 3'600'000);
	result.call_timeout_ms = number(config, "call_timeout_ms", result.call_timeout_ms, 100, 60'000);
	result.device = field(config, "device", result.device);
	result.bar_slot_bytes = number(config, "bar_slot_bytes", result.bar_slot_bytes, 4096, 1ull << 40);
	if (result.bar_slot_bytes % 4096)
		throw AgentError(ErrorCode::invalid_params, "config: \"bar_slot_bytes\" must be a multiple of 4096");
	result.bar_window_bytes = number(config, "bar_window_bytes", result.bar_window_bytes, 2 * 4096, 1ull << 40);
	if (result.bar_window_bytes % 4096)
		throw AgentError(ErrorCode::invalid_params, "config: \"bar_window_bytes\" must be a multiple of 4096");
	if (result.bar_slot_bytes > result.bar_window_bytes) // also keeps slot offsets far from overflowing
		throw AgentError(ErrorCode::invalid_params, "config: \"bar_slot_bytes\" exceeds \"bar_window_bytes\"");
	for (const json &peer : field(config, "peers", json::array())) {
		if (!peer.is_object())
			throw AgentError(ErrorCode::invalid_params, "config: each peer is an object");
		for (const auto &[key, value] : peer.items())
			if (key != "host" && key != "address" && key != "ntb")
				throw AgentError(ErrorCode::invalid_params, "config: unknown peer key \"" + key + "\"");
		const std::string host = field<std::string>(peer, "host", ""), address = field<std::string>(peer, "address", "");
		if (host.empty() || address.empty())
			throw AgentError(ErrorCode::invalid_params, "config: each peer needs \"host\" and \"address\"");
		result.peers.push_back({host, address, field<std::string>(peer, "ntb", "")});
	}
	return result;
}

AgentConfig load_config(const std::filesystem::path &path)
{
	std::ifstream in(path);
	if (!in)
		throw AgentError(ErrorCode::system_error, ENOENT, "cannot read config " + path.string());
	std::ostringstream text;
	text << in.rdbuf();
	return parse_config(text.str());
}

} // namespace farpass::agent
