#include "methods.hpp"

namespace farpass::agent {

namespace {

using nlohmann::json;
using handler_function = json (*)(AgentContext &, const json &, const CallContext &);

Handler bind(AgentContext &agent, handler_function function)
{
	return [&agent, function](const json &params, const CallContext &context) {
		return function(agent, params, context);
	};
}

constexpr std::uint64_t u32_max = 0xffff'ffff;

constexpr ParamField pci{"pci", ParamType::string};
constexpr ParamField lease{"lease", ParamType::string};
// Config space is 4 KiB; accesses are 1, 2 or 4 bytes (alignment and the end: Lender).
constexpr ParamField offset{"offset", ParamType::unsigned_integer, true, 0, 4095};
constexpr ParamField width{"width", ParamType::unsigned_integer, true, 1, 4};
constexpr ParamField iova{"iova", ParamType::unsigned_integer};
constexpr ParamField size{"size", ParamType::unsigned_integer, true, 1};

} // namespace

// The one table: docs/agent-protocol.md documents each row.
std::vector<Method> method_table(AgentContext &agent)
{
	using namespace handlers;
	return {
		{"device.list", any_access, {}, bind(agent, device_list)},
		{"device.lend", local_admin_access, {pci}, bind(agent, device_lend)},
		{"device.unlend", local_admin_access, {pci, {"force", ParamType::boolean, false}},
		 bind(agent, device_unlend)},
		{"device.read_config", peer_access, {pci, {"lease", ParamType::string, false}, offset, width},
		 bind(agent, device_read_config)},
		{"device.write_config", peer_access, {pci, lease, offset, width, {"value", ParamType::unsigned_integer, true, 0, u32_max}},
		 bind(agent, device_write_config)},
		{"device.reset", peer_access, {pci, lease}, bind(agent, device_reset)},
		{"dma.map", peer_access, {pci, lease, iova, size, {"window_offset", ParamType::unsigned_integer}},
		 bind(agent, dma_map)},
		{"dma.unmap", peer_access, {pci, lease, iova, size}, bind(agent, dma_unmap)},
		{"dma.map_peer", peer_access,
		 {pci, lease, iova, size, {"peer_pci", ParamType::string}, {"peer_lease", ParamType::string},
		  {"bar", ParamType::unsigned_integer, true, 0, 5}},
		 bind(agent, dma_map_peer)},
		{"irq.set", peer_access,
		 {pci, lease, {"index", ParamType::unsigned_integer, true, 0, 2}, // INTx, MSI, MSI-X
		  {"count", ParamType::unsigned_integer, true, 0, irq_vectors}},
		 bind(agent, irq_set)},
		{"lease.acquire", peer_access, {pci}, bind(agent, lease_acquire)},
		{"lease.renew", peer_access, {pci, lease}, bind(agent, lease_renew)},
		{"lease.release", peer_access, {pci, lease}, bind(agent, lease_release)},
		{"lease.list", local_admin_access, {}, bind(agent, lease_list)},
		{"cluster.devices", local_admin_access, {}, bind(agent, cluster_devices),
		 [&agent](json local) { return cluster_devices_of_peers(agent, std::move(local)); }},
		{"cluster.status", any_access, {}, bind(agent, cluster_status)},
	};
}

} // namespace farpass::agent
