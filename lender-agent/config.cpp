#include "config.hpp"

#include "errors.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <type_traits>

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
	// get<unsigned>() would take -4096 as 2^64 - 4096.
	if constexpr (std::is_unsigned_v<T> && !std::is_same_v<T, bool>)
		if (!value->is_number_unsigned())
			throw AgentError(ErrorCode::invalid_params, std::string("config: \"") + key + "\" has the wrong type");
	try {
		return value->get<T>();
	} catch (const json::exception &) {
		throw AgentError(ErrorCode::invalid_params, std::string("config: \"") + key + "\" has the wrong type");
	}
}

} // namespace

AgentConfig parse_config(std::string_view text)
{
	const json config = json::parse(text, nullptr, false, true);
	if (config.is_discarded() || !config.is_object())
		throw AgentError(ErrorCode::invalid_params, "config: not a JSON object");
	for (const auto &[key, value] : config.items())
		if (key != "host" && key != "listen" && key != "socket" && key != "state_dir" &&
		    key != "cluster_key" && key != "lease_ms" && key != "peers" && key != "poll_ms" && key != "device" &&
		    key != "call_timeout_ms" && key != "bar_slot_bytes" && key != "bar_window_bytes")
			throw AgentError(ErrorCode::invalid_params, "config: unknown key \"" + key + "\"");
	AgentConfig result;
	result.host = field<std::string>(config, "host", "");
	if (result.host.empty())
		result.host = machine_host_name();
	result.listen = field(config, "listen", result.listen);
	result.socket = field(config, "socket", result.socket);
	result.state_dir = field<std::string>(config, "state_dir", result.state_dir);
	result.cluster_key = field<std::string>(config, "cluster_key", result.cluster_key);
	result.lease_ms = field(config, "lease_ms", result.lease_ms);
	if (result.lease_ms < 1000)
		throw AgentError(ErrorCode::invalid_params, "config: \"lease_ms\" must be at least 1000");
	result.poll_ms = field(config, "poll_ms", result.poll_ms);
	if (result.poll_ms < 100)
		throw AgentError(ErrorCode::invalid_params, "config: \"poll_ms\" must be at least 100");
	result.call_timeout_ms = field(config, "call_timeout_ms", result.call_timeout_ms);
	if (result.call_timeout_ms < 100 || result.call_timeout_ms > 60'000)
		throw AgentError(ErrorCode::invalid_params, "config: \"call_timeout_ms\" must be 100 to 60000");
	result.device = field(config, "device", result.device);
	result.bar_slot_bytes = field(config, "bar_slot_bytes", result.bar_slot_bytes);
	if (result.bar_slot_bytes < 4096 || result.bar_slot_bytes % 4096)
		throw AgentError(ErrorCode::invalid_params, "config: \"bar_slot_bytes\" must be a multiple of 4096");
	result.bar_window_bytes = field(config, "bar_window_bytes", result.bar_window_bytes);
	if (result.bar_window_bytes < 2 * 4096 || result.bar_window_bytes % 4096 || result.bar_window_bytes > (1ull << 40))
		throw AgentError(ErrorCode::invalid_params,
				 "config: \"bar_window_bytes\" must be a multiple of 4096, 8192 to 2^40");
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
