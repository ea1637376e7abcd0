#include "lender.hpp"

#include "auth.hpp"
#include "errors.hpp"

#include <algorithm>

namespace farpass::agent {

namespace {

using nlohmann::json;

constexpr int state_version = 1;
constexpr std::uint32_t config_space_size = 4096;

void check_config_access(std::uint32_t offset, unsigned width)
{
	if (width != 1 && width != 2 && width != 4)
		throw AgentError(ErrorCode::invalid_params, "config access width must be 1, 2 or 4, not " +
								    std::to_string(width));
	if (offset % width || offset + width > config_space_size)
		throw AgentError(ErrorCode::invalid_params, "config access of " + std::to_string(width) +
								    " bytes at " + std::to_string(offset) +
								    " is unaligned or outside config space");
}

json device_state(const LentDevice &device)
{
	json state = {{"pci", device.pci_address},
		      {"vendor", device.info.vendor},
		      {"device", device.info.device},
		      {"bar_sizes", device.info.bar_sizes},
		      {"iommu_group", device.info.iommu_group},
		      {"lease", nullptr}};
	if (device.lease)
		state["lease"] = {{"id", device.lease->id},
				  {"borrower", device.lease->borrower},
				  {"expires_at_ms", device.lease->expires_at_ms}};
	return state;
}

} // namespace

Lender::Lender(Sysfs &sysfs, Vfio &vfio, KernelPort &kernel, const Clock &clock, const StateStore &store,
	       std::int64_t lease_ms)
	: sysfs_(sysfs), vfio_(vfio), kernel_(kernel), clock_(clock), store_(store), lease_ms_(lease_ms)
{
}

std::vector<std::string> Lender::restore()
{
	std::vector<std::string> gone;
	const auto state = store_.load();
	if (!state)
		return gone;
	if (state->value("version", 0) != state_version)
		throw AgentError(ErrorCode::internal_error, "state file has version " +
								    state->value("version", json()).dump() +
								    ", this agent reads " + std::to_string(state_version));
	try {
		for (const json &saved : state->at("devices")) {
			const std::string address = saved.at("pci");
			if (!sysfs_.has_pci_device(address)) {
				gone.push_back(address);
				continue;
			}
			LentDevice device{address, sysfs_.pci_device(address), std::nullopt, {}, nullptr};
			// While this agent was down its borrowers could not renew: a restored lease gets a
			// full lease time from now, so the lender's own downtime never takes a device away.
			if (!saved.at("lease").is_null())
				device.lease = Lease{saved["lease"].at("id"), saved["lease"].at("borrower"),
						     std::max(saved["lease"].at("expires_at_ms").get<std::int64_t>(),
							      clock_.now_ms() + lease_ms_)};
			sysfs_.bind_to_vfio(address);
			device.vfio = vfio_.open(address, device.info.iommu_group);
			devices_.emplace(address, std::move(device));
		}
	} catch (const json::exception &e) {
		throw AgentError(ErrorCode::internal_error, std::string("malformed state file: ") + e.what());
	}
	if (!gone.empty())
		persist();
	return gone;
}

const LentDevice &Lender::lend(const std::string &pci_address)
{
	if (devices_.count(pci_address))
		throw AgentError(ErrorCode::already_lent, pci_address + " is already lent");
	LentDevice device{pci_address, sysfs_.pci_device(pci_address), std::nullopt, {}, nullptr};
	sysfs_.bind_to_vfio(pci_address);
	try {
		device.vfio = vfio_.open(pci_address, device.info.iommu_group);
	} catch (...) {
		sysfs_.return_to_host(pci_address);
		throw;
	}
	const auto [entry, inserted] = devices_.emplace(pci_address, std::move(device));
	persist();
	return entry->second;
}

void Lender::unlend(const std::string &pci_address, bool force)
{
	LentDevice &device = find(pci_address);
	if (device.lease && !force)
		throw AgentError(ErrorCode::device_busy, pci_address + " is borrowed by " + device.lease->borrower +
								 " (unlend --force ends the lease)");
	if (device.lease)
		end_lease(device);
	device.vfio.reset(); // closes the container before the host's driver takes the device back
	sysfs_.return_to_host(pci_address);
	devices_.erase(pci_address);
	persist();
}

Lease Lender::acquire(const std::string &pci_address, const std::string &borrower)
{
	LentDevice &device = find(pci_address);
	if (device.lease && device.lease->borrower != borrower)
		throw AgentError(ErrorCode::device_busy, pci_address + " is borrowed by " + device.lease->borrower);
	if (!device.lease)
		device.lease = Lease{to_hex(random_bytes(8)), borrower, 0};
	device.lease->expires_at_ms = clock_.now_ms() + lease_ms_;
	persist();
	return *device.lease;
}

Lease Lender::renew(const std::string &pci_address, const std::string &borrower, const std::string &lease_id)
{
	LentDevice &device = holder_device(pci_address, borrower, lease_id);
	device.lease->expires_at_ms = clock_.now_ms() + lease_ms_;
	persist();
	return *device.lease;
}

void Lender::release(const std::string &pci_address, const std::string &borrower, const std::string &lease_id)
{
	end_lease(holder_device(pci_address, borrower, lease_id));
	persist();
}

std::vector<ExpiredLease> Lender::expire_due()
{
	std::vector<ExpiredLease> expired;
	const std::int64_t now = clock_.now_ms();
	for (auto &[address, device] : devices_) {
		if (device.lease && device.lease->expires_at_ms <= now) {
			expired.push_back({address, *device.lease});
			end_lease(device);
		}
	}
	if (!expired.empty())
		persist();
	return expired;
}

std::uint32_t Lender::read_config(const std::string &pci_address, const std::string &borrower,
				  const std::string &lease_id, std::uint32_t offset, unsigned width)
{
	check_config_access(offset, width);
	if (lease_id.empty()) {
		// Without a lease: reading a device nobody else borrows is allowed (the borrower's kernel
		// scans config space when a VM opens the device, before it borrows it).
		LentDevice &device = find(pci_address);
		if (device.lease && device.lease->borrower != borrower && device.lease->expires_at_ms > clock_.now_ms())
			throw AgentError(ErrorCode::device_busy, pci_address + " is borrowed by " + device.lease->borrower);
		return device.vfio->read_config(offset, width);
	}
	return holder_device(pci_address, borrower, lease_id).vfio->read_config(offset, width);
}

void Lender::write_config(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
			  std::uint32_t offset, unsigned width, std::uint32_t value)
{
	check_config_access(offset, width);
	if (width < 4 && value >> (8 * width))
		throw AgentError(ErrorCode::invalid_params,
				 "value " + std::to_string(value) + " does not fit in " + std::to_string(width) + " bytes");
	holder_device(pci_address, borrower, lease_id).vfio->write_config(offset, width, value);
}

void Lender::reset(const std::string &pci_address, const std::string &borrower, const std::string &lease_id)
{
	holder_device(pci_address, borrower, lease_id).vfio->reset();
}

void Lender::map_dma(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
		     std::uint64_t iova, std::uint64_t size, std::uint64_t window_offset)
{
	LentDevice &device = holder_device(pci_address, borrower, lease_id);
	const std::span<std::byte> window = kernel_.outbound_window(borrower);
	if (size == 0 || window_offset > window.size() || size > window.size() - window_offset)
		throw AgentError(ErrorCode::invalid_params, "DMA window range [" + std::to_string(window_offset) +
								    ", +" + std::to_string(size) +
								    ") is empty or outside the " +
								    std::to_string(window.size()) + "-byte window");
	device.vfio->map_dma(iova, size, reinterpret_cast<std::uint64_t>(window.data() + window_offset));
	device.dma_mappings.push_back({iova, size});
}

void Lender::unmap_dma(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
		       std::uint64_t iova, std::uint64_t size)
{
	LentDevice &device = holder_device(pci_address, borrower, lease_id);
	auto &mappings = device.dma_mappings;
	const auto mapping = std::find_if(mappings.begin(), mappings.end(), [&](const DmaMapping &m) {
		return m.iova == iova && m.size == size;
	});
	if (mapping == mappings.end())
		throw AgentError(ErrorCode::invalid_params, "no DMA mapping of " + std::to_string(size) +
								    " bytes at IOVA " + std::to_string(iova));
	device.vfio->unmap_dma(iova, size);
	mappings.erase(mapping);
}

LentDevice &Lender::find(const std::string &pci_address)
{
	const auto entry = devices_.find(pci_address);
	if (entry == devices_.end())
		throw AgentError(ErrorCode::no_such_device, pci_address + " is not lent by this host");
	return entry->second;
}

LentDevice &Lender::holder_device(const std::string &pci_address, const std::string &borrower,
				  const std::string &lease_id)
{
	LentDevice &device = find(pci_address);
	// An expired lease that expire_due has not reaped yet is already over for its holder.
	if (!device.lease || device.lease->id != lease_id || device.lease->borrower != borrower ||
	    device.lease->expires_at_ms <= clock_.now_ms())
		throw AgentError(ErrorCode::no_such_lease,
				 "no live lease " + lease_id + " of " + borrower + " on " + pci_address);
	return device;
}

void Lender::end_lease(LentDevice &device)
{
	for (const DmaMapping &mapping : device.dma_mappings)
		device.vfio->unmap_dma(mapping.iova, mapping.size);
	device.dma_mappings.clear();
	device.vfio->reset();
	device.lease.reset();
}

void Lender::persist() const
{
	json devices = json::array();
	for (const auto &[address, device] : devices_)
		devices.push_back(device_state(device));
	store_.save({{"version", state_version}, {"devices", devices}});
}

} // namespace farpass::agent
