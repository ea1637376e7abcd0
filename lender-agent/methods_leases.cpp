// Handlers for borrows: the lender's leases.
#include "methods.hpp"
#include "pci_address.hpp"

namespace farpass::agent::handlers {

namespace {

json lease_view(const AgentContext &agent, const Lease &lease)
{
	return {{"lease", lease.id}, {"expires_in_ms", lease.expires_at_ms - agent.lender.now_ms()}};
}

} // namespace

json lease_acquire(AgentContext &agent, const json &params, const CallContext &context)
{
	const std::string address = canonical_pci_address(params.at("pci").get<std::string>());
	json result = lease_view(agent, agent.lender.acquire(address, context.peer_host));
	const LentDevice &device = agent.lender.devices().at(address);
	result["lease_ms"] = agent.lender.lease_ms();
	result["data_path"] = !device.data_path_ntb.empty();
	result["device"] = device_view(agent, device);
	return result;
}

json lease_renew(AgentContext &agent, const json &params, const CallContext &context)
{
	const std::string address = canonical_pci_address(params.at("pci").get<std::string>());
	return lease_view(agent, agent.lender.renew(address, context.peer_host, params.at("lease")));
}

json lease_release(AgentContext &agent, const json &params, const CallContext &context)
{
	const std::string address = canonical_pci_address(params.at("pci").get<std::string>());
	agent.lender.release(address, context.peer_host, params.at("lease"));
	return json::object();
}

json lease_list(AgentContext &agent, const json &, const CallContext &)
{
	json leases = json::array();
	for (const auto &[address, device] : agent.lender.devices()) {
		if (!device.lease)
			continue;
		// The lease id stays between lender and borrower: it is what authorises device access.
		leases.push_back({{"pci", address},
				  {"borrower", device.lease->borrower},
				  {"expires_in_ms", device.lease->expires_at_ms - agent.lender.now_ms()}});
	}
	return {{"leases", leases}};
}

} // namespace farpass::agent::handlers
