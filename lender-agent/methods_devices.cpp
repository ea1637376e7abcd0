// Handlers for lendable devices and, on behalf of a lease holder, access to them.
#include "methods.hpp"
#include "pci_address.hpp"

namespace farpass::agent::handlers {

namespace {

std::string address_of(const json &params)
{
	return canonical_pci_address(params.at("pci").get<std::string>());
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
							     params.at("offset"), params.at("width"));
	return {{"value", value}};
}

json device_write_config(AgentContext &agent, const json &params, const CallContext &context)
{
	agent.lender.write_config(address_of(params), context.peer_host, params.at("lease"), params.at("offset"),
				  params.at("width"), params.at("value"));
	return json::object();
}

json device_reset(AgentContext &agent, const json &params, const CallContext &context)
{
	agent.lender.reset(address_of(params), context.peer_host, params.at("lease"));
	return json::object();
}

json dma_map(AgentContext &agent, const json &params, const CallContext &context)
{
	agent.lender.map_dma(address_of(params), context.peer_host, params.at("lease"), params.at("iova"),
			     params.at("size"), params.at("window_offset"));
	return json::object();
}

json dma_unmap(AgentContext &agent, const json &params, const CallContext &context)
{
	agent.lender.unmap_dma(address_of(params), context.peer_host, params.at("lease"), params.at("iova"),
			       params.at("size"));
	return json::object();
}

json irq_set(AgentContext &agent, const json &params, const CallContext &context)
{
	agent.lender.set_irqs(address_of(params), context.peer_host, params.at("lease"),
			      params.at("index").get<std::uint64_t>(), params.at("count").get<std::uint64_t>());
	return json::object();
}

} // namespace farpass::agent::handlers
