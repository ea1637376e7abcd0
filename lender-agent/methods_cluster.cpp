// Handlers for the cluster view and this agent's status. cluster.devices asks the peers off the poll
// loop (its off-loop part): an unreachable peer costs call_timeout_ms, which the loop must not wait.
#include "borrower.hpp"
#include "methods.hpp"

namespace farpass::agent::handlers {

json cluster_devices(AgentContext &agent, const json &, const CallContext &context)
{
	return device_list(agent, json::object(), context);
}

json cluster_devices_of_peers(AgentContext &agent, json local)
{
	json devices = std::move(local.at("devices"));
	json unreachable = json::array();
	// One unreachable peer must not hide the rest of the cluster.
	for (const PeerAddress &peer : agent.peers) {
		try {
			const json reply = agent.call_peer(peer, "device.list", json::object());
			for (const json &device : reply.at("devices"))
				devices.push_back(device);
		} catch (const std::exception &e) { // unreachable, refused, or a malformed reply
			unreachable.push_back({{"host", peer.host}, {"error", e.what()}});
		}
	}
	return {{"devices", devices}, {"unreachable", unreachable}};
}

json cluster_status(AgentContext &agent, const json &, const CallContext &)
{
	json peers = json::array();
	for (const PeerAddress &peer : agent.peers)
		peers.push_back({{"host", peer.host}, {"address", peer.address}, {"ntb", peer.ntb.empty() ? json() : json(peer.ntb)}});
	std::size_t borrowed = 0;
	for (const auto &[address, device] : agent.lender.devices())
		borrowed += device.lease.has_value();
	return {{"host", agent.host},
		{"protocol", protocol_version},
		{"uptime_s", (agent.lender.now_ms() - agent.started_at_ms) / 1000},
		{"lease_ms", agent.lender.lease_ms()},
		{"devices_lent", agent.lender.devices().size()},
		{"devices_borrowed", borrowed},
		{"peers", peers},
		{"remote_devices", agent.borrower ? agent.borrower->view() : json::array()}};
}

} // namespace farpass::agent::handlers
