// Handlers for lendable devices and, on behalf of a lease holder, access to them.
#include "methods.hpp"
#include "pci_address.hpp"

namespace farpass::agent::handlers {

namespace {

std::string address_of(const json &params, const char *name = "pci")
{
	return canonical_pci_address(params.at(name).get<std::string>());
}

// Numbers come as 64-bit values: check_params has checked their ranges, the lender checks the rest in
// 64-bit arithmetic (nothing is narrowed before it is checked).
std::uint64_t number(const json &params, const char *name)
{
	return params.at(name).get<std::uint64_t>();
}

} // namespace

json device_view(const AgentContext &agent, const LentDevice &device)
{
	json view = {{"host", agent.host},
		     {"pci", device.pci_address},
		     {"vendor", device.info.vendor},
		     {"device", device.info.device},
		     {"subsystem_vendor", device.info.subsystem_vendor},
		     {"subsystem_device", device.info.subsystem_device},
		     {"class", device.info.class_code},
		     {"revision", device.info.revision},
		     {"bar_sizes", device.info.bar_sizes},
		     {"bar_flags", device.info.bar_flags},
		     {"bar_offsets", device.bars.offsets},
		     {"bar_mapped", device.bars.placed},
		     {"irq_slot", device.slot},
		     {"reset_failed", device.reset_failed},
		     {"borrower", nullptr}};
	if (device.lease)
		view["borrower"] = device.lease->borrower;
	return view;
}

json device_list(AgentContext &agent, const json &, const CallContext &)
{
	json devices = json::array();
	for (const auto &[address, device] : agent.lender.devices())
		devices.push_back(device_view(agent, device));
	return {{"devices", devices}};
}

json device_lend(AgentContext &agent, const json &params, const CallContext &)
{
	return device_view(agent, agent.lender.lend(address_of(params)));
}

json device_unlend(AgentContext &agent, const json &params, const CallContext &)
{
	agent.lender.unlend(address_of(params), params.value("force", false));
	return json::object();
}


json device_read_config(AgentContext &agent, const json &params, const CallContext &context)
{
	const std::uint32_t value = agent.lender.read_config(address_of(params), context.peer_host, params.value("lease", ""),
							     number(params, "offset"), number(params, "width"));
	return {{"value", value}};
}

json device_write_config(AgentContext &agent, const json &params, const CallContext &context)
{
	agent.lender.write_config(address_of(params), context.peer_host, params.at("lease"), number(params, "offset"),
				  number(params, "width"), number(params, "value"));
	return json::object();
}

json device_reset(AgentContext &agent, const json &params, const CallContext &context)
{
	agent.lender.reset(address_of(params), context.peer_host, params.at("lease"));
	return json::object();
}

json dma_map(AgentContext &agent, const json &params, const CallContext &context)
{
	agent.lender.map_dma(address_of(params), context.peer_host, params.at("lease"), number(params, "iova"),
			     number(params, "size"), number(params, "window_offset"));
	return json::object();
}

json dma_unmap(AgentContext &agent, const json &params, const CallContext &context)
{
	agent.lender.unmap_dma(address_of(params), context.peer_host, params.at("lease"), number(params, "iova"),
			       number(params, "size"));
	return json::object();
}

json dma_map_peer(AgentContext &agent, const json &params, const CallContext &context)
{
	agent.lender.map_peer_dma(address_of(params), context.peer_host, params.at("lease"), number(params, "iova"),
				  number(params, "size"), address_of(params, "peer_pci"), params.at("peer_lease"),
				  number(params, "bar"));
	return json::object();
}

json irq_set(AgentContext &agent, const json &params, const CallContext &context)
{
	agent.lender.set_irqs(address_of(params), context.peer_host, params.at("lease"),
			      number(params, "index"), number(params, "count"));
	return json::object();
}

} // namespace farpass::agent::handlers
