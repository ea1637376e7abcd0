// The agent's methods: one table (methods.cpp), handlers grouped by resource
// (methods_devices.cpp, methods_leases.cpp, methods_cluster.cpp).
#pragma once

#include "dispatcher.hpp"
#include "lender.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace farpass::agent {

struct PeerAddress {
	std::string host;
	std::string address; // "host:port"
	std::string ntb = {}; // this host's NTB to that peer ("0000:00:0a.0"): borrow its devices, and map its
			      // outbound window for the peer's dma.map; "" = neither
};

class Borrower;

// Calls a method on another agent; throws AgentError (peer_unreachable, timed_out, or the peer's error).
using PeerCaller =
	std::function<nlohmann::json(const PeerAddress &peer, std::string_view method, const nlohmann::json &params)>;

// What the handlers act on.
struct AgentContext {
	std::string host;
	Lender &lender;
	std::int64_t started_at_ms;
	std::vector<PeerAddress> peers;
	PeerCaller call_peer;
	const Borrower *borrower = nullptr; // this host's borrower side, for cluster.status
};

std::vector<Method> method_table(AgentContext &agent);

namespace handlers {

using nlohmann::json;

// devices
json device_list(AgentContext &agent, const json &params, const CallContext &context);
json device_lend(AgentContext &agent, const json &params, const CallContext &context);
json device_unlend(AgentContext &agent, const json &params, const CallContext &context);
json device_read_config(AgentContext &agent, const json &params, const CallContext &context);
json device_write_config(AgentContext &agent, const json &params, const CallContext &context);
json device_reset(AgentContext &agent, const json &params, const CallContext &context);
json dma_map(AgentContext &agent, const json &params, const CallContext &context);
json dma_unmap(AgentContext &agent, const json &params, const CallContext &context);
json dma_map_peer(AgentContext &agent, const json &params, const CallContext &context);
json irq_set(AgentContext &agent, const json &params, const CallContext &context);

// borrows and leases
json lease_acquire(AgentContext &agent, const json &params, const CallContext &context);
json lease_renew(AgentContext &agent, const json &params, const CallContext &context);
json lease_release(AgentContext &agent, const json &params, const CallContext &context);
json lease_list(AgentContext &agent, const json &params, const CallContext &context);

// cluster and status
json cluster_devices(AgentContext &agent, const json &params, const CallContext &context); // this host's
json cluster_devices_of_peers(AgentContext &agent, json local); // off the loop: with every peer's
json cluster_status(AgentContext &agent, const json &params, const CallContext &context);

// Shared by the groups: the public view of one lent device.
json device_view(const AgentContext &agent, const LentDevice &device);

} // namespace handlers

} // namespace farpass::agent
