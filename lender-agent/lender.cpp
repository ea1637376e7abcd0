#include "lender.hpp"

#include "tls.hpp"
#include "errors.hpp"
#include "fd.hpp"
#include "protocol.hpp"

#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <limits>
#include <set>

namespace farpass::agent {

namespace {

using nlohmann::json;

constexpr int state_version = 1;
constexpr std::uint32_t config_space_size = 4096;
constexpr std::uint64_t page_size = 4096;
constexpr std::uint64_t huge_page = 2ull << 20; // the largest alignment a BAR needs for large IOMMU pages
constexpr unsigned intx_irq_index = 0; // VFIO_PCI_INTX_IRQ_INDEX
constexpr unsigned last_irq_index = 2; // VFIO_PCI_MSIX_IRQ_INDEX (INTx 0, MSI 1, MSI-X 2)
constexpr std::uint64_t max_wall_ms = 1ull << 62; // a saved expiry time: room for the clock conversion

// A kernel without the data path: EOPNOTSUPP (no IOMMU domain on the NTB) or ENOTTY (before uapi 2).
bool no_data_path(const AgentError &error)
{
	return error.code() == ErrorCode::system_error &&
	       (error.error_number() == EOPNOTSUPP || error.error_number() == ENOTTY);
}

void check_config_access(std::uint64_t offset, std::uint64_t width)
{
	if (width != 1 && width != 2 && width != 4)
		throw AgentError(ErrorCode::invalid_params, "config access width must be 1, 2 or 4, not " +
								    std::to_string(width));
	if (offset % width || offset > config_space_size - width)
		throw AgentError(ErrorCode::invalid_params, "config access of " + std::to_string(width) +
								    " bytes at " + std::to_string(offset) +
								    " is unaligned or outside config space");
}

// wall_offset_ms: wall clock minus monotonic clock now, to write expiry times as wall-clock times.
[[noreturn]] void malformed_state(const std::exception &e)
{
	throw AgentError(ErrorCode::internal_error, std::string("malformed state file: ") + e.what());
}

json device_state(const LentDevice &device, std::int64_t wall_offset_ms)
{
	json state = {{"pci", device.pci_address},
		      {"vendor", device.info.vendor},
		      {"device", device.info.device},
		      {"bar_sizes", device.info.bar_sizes},
		      {"iommu_group", device.info.iommu_group},
		      {"slot", device.slot},
		      {"reset_failed", device.reset_failed},
		      {"lease", nullptr}};
	if (device.lease) {
		json dma = json::array();
		for (const DmaMapping &m : device.dma_mappings)
			dma.push_back({{"iova", m.iova}, {"size", m.size}, {"window_offset", m.window_offset}});
		// Apart from "dma": an agent that predates them must not take one for a window mapping.
		json peer_dma = json::array();
		for (const PeerDmaMapping &m : device.peer_dma_mappings)
			peer_dma.push_back({{"iova", m.iova}, {"size", m.size}, {"peer_pci", m.peer_pci},
					    {"peer_lease", m.peer_lease}, {"bar", m.bar}});
		state["lease"] = {{"id", device.lease->id},
				  {"borrower", device.lease->borrower},
				  {"expires_at_ms", device.lease->expires_at_ms + wall_offset_ms},
				  {"dma", dma},
				  {"peer_dma", peer_dma},
				  {"irqs", nullptr}};
		if (device.irqs)
			state["lease"]["irqs"] = {{"index", device.irqs->index}, {"count", device.irqs->count}};
	}
	return state;
}

} // namespace

BarPlacement place_bars(std::uint32_t slot, const std::vector<std::uint64_t> &bar_sizes,
			const std::vector<std::uint32_t> &bar_flags, const BarWindow &window)
{
	BarPlacement placement;
	const std::uint64_t start = std::uint64_t(slot) * window.slot_bytes;
	const std::uint64_t end = std::min(start + window.slot_bytes, window.window_bytes - page_size);
	std::uint64_t next = start;
	for (std::size_t bar = 0; bar < bar_count && bar < bar_sizes.size(); bar++) {
		const std::uint64_t size = bar_sizes[bar];
		if (size < page_size || (bar < bar_flags.size() && (bar_flags[bar] & bar_io)))
			continue;
		const std::uint64_t align = std::clamp(size, page_size, huge_page);
		const std::uint64_t offset = (next + align - 1) / align * align;
		if (offset >= end || size > end - offset)
			continue; // a smaller BAR after it may still fit
		placement.offsets[bar] = offset;
		placement.placed[bar] = true;
		next = offset + size;
	}
	return placement;
}

Lender::Lender(Sysfs &sysfs, Vfio &vfio, KernelPort &kernel, const Clock &clock, const StateStore &store,
	       FdStore &fd_store, std::int64_t lease_ms, BarWindow window, std::map<std::string, std::string> links)
	: sysfs_(sysfs), vfio_(vfio), kernel_(kernel), clock_(clock), store_(store), fd_store_(fd_store), lease_ms_(lease_ms),
	  window_(window), links_(std::move(links))
{
}

std::vector<std::string> Lender::restore()
{
	std::vector<std::string> gone;
	std::map<std::string, std::vector<Fd>> stored = fd_store_.take_received();
	const auto state = store_.load(state_version);
	if (!state) {
		for (const auto &[name, fds] : stored)
			forget_stored(name);
		return gone;
	}
	const std::int64_t now = clock_.monotonic_ms();
	const std::int64_t wall_offset_ms = clock_.wall_ms() - now;
	std::map<std::string, std::vector<PeerDmaMapping>> peer_dma; // restored once every peer is
	try {
		for (const json &saved : state->at("devices")) {
			const std::string address = saved.at("pci");
			if (!sysfs_.has_pci_device(address)) {
				gone.push_back(address);
				continue;
			}
			LentDevice device{address, sysfs_.pci_device(address), std::nullopt, {}, nullptr, 0, {}};
			device.slot = saved.contains("slot") ? decode_uint<std::uint32_t>(saved["slot"], "slot", 0, irq_slots - 1)
							     : free_slot();
			device.bars = place_bars(device.slot, device.info.bar_sizes, device.info.bar_flags, window_);
			device.reset_failed = saved.value("reset_failed", false);
			// While this agent was down its borrowers could not renew: a restored lease gets a
			// full lease time from now, so the lender's own downtime never takes a device away.
			// The file holds wall-clock times (the monotonic clock restarts with the boot).
			if (!saved.at("lease").is_null())
				device.lease = Lease{saved["lease"].at("id"), saved["lease"].at("borrower"),
						     std::max(decode_uint<std::int64_t>(saved["lease"].at("expires_at_ms"),
											"expires_at_ms", 0, max_wall_ms) - wall_offset_ms,
							      now + lease_ms_)};
			sysfs_.bind_to_vfio(address);
			device.vfio = open_or_adopt(device, stored);
			LentDevice &restored = devices_.emplace(address, std::move(device)).first->second;
			if (!restored.lease) {
				unmap_unleased_bars(restored);
				continue;
			}
			std::vector<DmaMapping> dma; // a state file from before the data path has neither
			for (const json &m : saved["lease"].value("dma", json::array()))
				dma.push_back({decode_uint<std::uint64_t>(m.at("iova"), "iova"),
					       decode_uint<std::uint64_t>(m.at("size"), "size", 1),
					       decode_uint<std::uint64_t>(m.at("window_offset"), "window_offset")});
			std::optional<IrqSetting> irqs;
			if (const json saved_irqs = saved["lease"].value("irqs", json()); !saved_irqs.is_null())
				irqs = IrqSetting{decode_uint<unsigned>(saved_irqs.at("index"), "index", 0, last_irq_index),
						  decode_uint<std::uint32_t>(saved_irqs.at("count"), "count", 1, irq_vectors)};
			restore_data_path(restored, dma, irqs);
			for (const json &m : saved["lease"].value("peer_dma", json::array()))
				peer_dma[address].push_back({decode_uint<std::uint64_t>(m.at("iova"), "iova"),
							     decode_uint<std::uint64_t>(m.at("size"), "size", 1),
							     m.at("peer_pci"), m.at("peer_lease"),
							     decode_uint<std::uint32_t>(m.at("bar"), "bar", 0, bar_count - 1)});
		}
		for (const auto &[address, mappings] : peer_dma)
			restore_peer_dma(devices_.at(address), mappings);
	} catch (const json::exception &e) {
		malformed_state(e);
	} catch (const AgentError &e) {
		if (e.code() != ErrorCode::invalid_params) // sysfs or VFIO failed: not the file's fault
			throw;
		malformed_state(e); // a number out of its range
	}
	for (const auto &[name, fds] : stored)
		forget_stored(name);
	// Stored again as they are now (the adopted device's descriptor is a new one).
	for (const auto &entry : devices_) {
		const std::string name = vfio_fd_name(entry.first);
		attempt("storing the VFIO descriptors of " + entry.first, [&] {
			fd_store_.remove(name);
			fd_store_.store(name, entry.second.vfio->descriptors());
		});
	}
	persist(); // what could not be restored is gone from the state too
	return gone;
}

std::unique_ptr<VfioDevice> Lender::open_or_adopt(LentDevice &device, std::map<std::string, std::vector<Fd>> &stored)
{
	const std::string name = vfio_fd_name(device.pci_address);
	const auto entry = stored.find(name);
	if (entry == stored.end())
		return vfio_.open(device.pci_address, device.info.iommu_group);
	std::vector<Fd> fds = std::move(entry->second);
	stored.erase(entry);
	if (device.lease) {
		try {
			auto adopted = vfio_.adopt(device.pci_address, device.info.iommu_group, std::move(fds));
			device.adopted = true;
			notices_.push_back("adopted " + device.pci_address + "'s VFIO descriptors: not reset");
			return adopted;
		} catch (const AgentError &e) {
			notices_.push_back("stored VFIO descriptors of " + device.pci_address + " refused: " + e.what() +
					   "; opening it again");
		}
	}
	// Nothing to keep: closed, here and in the store, and the device opened anew (which resets it).
	fds.clear();
	attempt("removing the stored VFIO descriptors of " + device.pci_address, [&] { fd_store_.remove(name); });
	return vfio_.open(device.pci_address, device.info.iommu_group);
}

void Lender::forget_stored(const std::string &name)
{
	notices_.push_back("stored descriptors \"" + name + "\" are of no lent device: closed");
	attempt("removing stored descriptors \"" + name + "\"", [&] { fd_store_.remove(name); });
}

const LentDevice &Lender::lend(const std::string &pci_address)
{
	if (devices_.count(pci_address))
		throw AgentError(ErrorCode::already_lent, pci_address + " is already lent");
	LentDevice device{pci_address, sysfs_.pci_device(pci_address), std::nullopt, {}, nullptr, 0, {}};
	device.slot = free_slot();
	device.bars = place_bars(device.slot, device.info.bar_sizes, device.info.bar_flags, window_);
	for (std::size_t bar = 0; bar < bar_count; bar++)
		if (device.info.bar_sizes[bar] && !device.bars.placed[bar] && !(device.info.bar_flags[bar] & bar_io))
			notices_.push_back(pci_address + ": BAR " + std::to_string(bar) + " (" +
					   std::to_string(device.info.bar_sizes[bar]) + " bytes) does not fit in slot " +
					   std::to_string(device.slot) + " of the BAR window: not mapped");
	sysfs_.bind_to_vfio(pci_address);
	try {
		device.vfio = vfio_.open(pci_address, device.info.iommu_group);
	} catch (...) {
		sysfs_.return_to_host(pci_address);
		throw;
	}
	const auto [entry, inserted] = devices_.emplace(pci_address, std::move(device));
	const LentDevice &lent = entry->second;
	attempt("storing the VFIO descriptors of " + pci_address,
		[&] { fd_store_.store(vfio_fd_name(pci_address), lent.vfio->descriptors()); });
	persist();
	return lent;
}

void Lender::unlend(const std::string &pci_address, bool force)
{
	LentDevice &device = find(pci_address);
	if (device.lease && !force)
		throw AgentError(ErrorCode::device_busy, pci_address + " is borrowed by " + device.lease->borrower +
								 " (unlend --force ends the lease)");
	if (device.lease)
		end_lease(device);
	// The store's copies too: vfio-pci lets the device go only once no descriptor of it is open.
	attempt("removing the stored VFIO descriptors of " + pci_address,
		[&] { fd_store_.remove(vfio_fd_name(pci_address)); });
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
	if (!device.lease) {
		if (device.reset_failed)
			reset_after_lease(device);
		map_bars(device, borrower, false);
		device.lease = Lease{random_hex(8), borrower, 0};
		if (!device.data_path_ntb.empty())
			set_bus_master(device, true);
	}
	device.lease->expires_at_ms = clock_.monotonic_ms() + lease_ms_;
	persist();
	return *device.lease;
}

Lease Lender::renew(const std::string &pci_address, const std::string &borrower, const std::string &lease_id)
{
	LentDevice &device = holder_device(pci_address, borrower, lease_id);
	device.lease->expires_at_ms = clock_.monotonic_ms() + lease_ms_;
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
	const std::int64_t now = clock_.monotonic_ms();
	for (auto &[address, device] : devices_) {
		if (!device.lease)
			continue;
		std::uint64_t link_down_ms = 0;
		if (device.lease->expires_at_ms > now && !(link_down_ms = link_down_beyond_lease(device)))
			continue;
		expired.push_back({address, *device.lease, link_down_ms});
		end_lease(device);
	}
	if (!expired.empty())
		persist();
	return expired;
}

// Renewals come over the management network, which can outlive the NTB link: a lease whose link has
// been down for a lease time ends as if it had not been renewed (docs/agent-protocol.md, "Leases").
std::uint64_t Lender::link_down_beyond_lease(const LentDevice &device)
{
	if (device.data_path_ntb.empty())
		return 0;
	const std::optional<std::uint64_t> down_ms = kernel_.link_down_ms(device.data_path_ntb);
	return down_ms && *down_ms >= static_cast<std::uint64_t>(lease_ms_) ? *down_ms : 0;
}

std::uint32_t Lender::read_config(const std::string &pci_address, const std::string &borrower,
				  const std::string &lease_id, std::uint64_t offset, std::uint64_t width)
{
	check_config_access(offset, width);
	if (lease_id.empty()) {
		// Without a lease: reading a device nobody else borrows is allowed (the borrower's kernel
		// scans config space when a VM opens the device, before it borrows it).
		LentDevice &device = find(pci_address);
		if (device.lease && device.lease->borrower != borrower && device.lease->expires_at_ms > clock_.monotonic_ms())
			throw AgentError(ErrorCode::device_busy, pci_address + " is borrowed by " + device.lease->borrower);
		return device.vfio->read_config(static_cast<std::uint32_t>(offset), static_cast<unsigned>(width));
	}
	return holder_device(pci_address, borrower, lease_id)
		.vfio->read_config(static_cast<std::uint32_t>(offset), static_cast<unsigned>(width));
}

void Lender::write_config(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
			  std::uint64_t offset, std::uint64_t width, std::uint64_t value)
{
	check_config_access(offset, width);
	if (value >> (8 * width))
		throw AgentError(ErrorCode::invalid_params,
				 "value " + std::to_string(value) + " does not fit in " + std::to_string(width) + " bytes");
	holder_device(pci_address, borrower, lease_id)
		.vfio->write_config(static_cast<std::uint32_t>(offset), static_cast<unsigned>(width),
				    static_cast<std::uint32_t>(value));
}

void Lender::reset(const std::string &pci_address, const std::string &borrower, const std::string &lease_id)
{
	holder_device(pci_address, borrower, lease_id).vfio->reset();
}

void Lender::map_dma(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
		     std::uint64_t iova, std::uint64_t size, std::uint64_t window_offset)
{
	add_dma(holder_device(pci_address, borrower, lease_id), {iova, size, window_offset});
	persist();
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
	persist();
}

void Lender::map_peer_dma(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
			  std::uint64_t iova, std::uint64_t size, const std::string &peer_pci,
			  const std::string &peer_lease, std::uint64_t bar)
{
	if (bar >= bar_count)
		throw AgentError(ErrorCode::invalid_params, "BAR " + std::to_string(bar) + " is not 0 to 5");
	add_peer_dma(holder_device(pci_address, borrower, lease_id),
		     {iova, size, peer_pci, peer_lease, static_cast<std::uint32_t>(bar)});
	persist();
}

void Lender::set_irqs(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
		      std::uint64_t index, std::uint64_t count)
{
	if (index > last_irq_index)
		throw AgentError(ErrorCode::invalid_params, "IRQ index " + std::to_string(index) +
								    " is not INTx (0), MSI (1) or MSI-X (2)");
	if (count > (index == 0 ? 1 : irq_vectors))
		throw AgentError(ErrorCode::invalid_params, std::to_string(count) + " vectors are too many for IRQ index " +
								    std::to_string(index));
	LentDevice &device = holder_device(pci_address, borrower, lease_id);
	if (device.data_path_ntb.empty())
		throw AgentError(ErrorCode::system_error, EOPNOTSUPP,
				 "the lease on " + pci_address + " has no data path: no interrupt relay");
	// VFIO changes the vector count or index of an armed device only from disarmed.
	if (device.irqs && (count == 0 || device.irqs->index != index || device.irqs->count != count))
		disarm_irqs(device);
	if (count > 0) {
		try { // persisted either way: a failed arm leaves the device disarmed
			arm_irqs(device, static_cast<unsigned>(index), static_cast<std::uint32_t>(count));
		} catch (...) {
			persist();
			throw;
		}
	}
	persist();
}

void Lender::add_dma(LentDevice &device, const DmaMapping &mapping)
{
	const std::span<std::byte> window = kernel_.outbound_window(device.lease->borrower);
	if (mapping.size == 0 || mapping.window_offset > window.size() || mapping.size > window.size() - mapping.window_offset)
		throw AgentError(ErrorCode::invalid_params, "DMA window range [" + std::to_string(mapping.window_offset) +
								    ", +" + std::to_string(mapping.size) +
								    ") is empty or outside the " +
								    std::to_string(window.size()) + "-byte window");
	if (mapping.size - 1 > std::numeric_limits<std::uint64_t>::max() - mapping.iova) // may end at 2^64
		throw AgentError(ErrorCode::invalid_params, "DMA range of " + std::to_string(mapping.size) +
								    " bytes at IOVA " + std::to_string(mapping.iova) +
								    " wraps around 2^64");
	device.vfio->map_dma(mapping.iova, mapping.size,
			     reinterpret_cast<std::uint64_t>(window.data() + mapping.window_offset));
	device.dma_mappings.push_back(mapping);
}

LentDevice &Lender::peer_of(const LentDevice &device, const PeerDmaMapping &mapping)
{
	if (mapping.peer_pci == device.pci_address)
		throw AgentError(ErrorCode::invalid_params, device.pci_address + " is not a peer of itself");
	LentDevice &peer = holder_device(mapping.peer_pci, device.lease->borrower, mapping.peer_lease);
	if (device.data_path_ntb.empty() || peer.data_path_ntb.empty())
		throw AgentError(ErrorCode::system_error, EOPNOTSUPP,
				 "the lease on " + (device.data_path_ntb.empty() ? device.pci_address : peer.pci_address) +
					 " has no data path: no peer-to-peer DMA");
	if (!peer.bars.placed[mapping.bar] || mapping.size > peer.info.bar_sizes[mapping.bar])
		throw AgentError(ErrorCode::invalid_params, "BAR " + std::to_string(mapping.bar) + " of " + peer.pci_address +
								    " is not a memory BAR lent with it of at least " +
								    std::to_string(mapping.size) + " bytes");
	if (mapping.iova % page_size || mapping.size % page_size || mapping.size - 1 > ~std::uint64_t(0) - mapping.iova)
		throw AgentError(ErrorCode::invalid_params, "peer DMA range of " + std::to_string(mapping.size) +
								    " bytes at IOVA " + std::to_string(mapping.iova) +
								    " is not whole pages or wraps around 2^64");
	return peer;
}

void Lender::add_peer_dma(LentDevice &device, const PeerDmaMapping &mapping)
{
	device.vfio->map_dma_to_bar(mapping.iova, mapping.size, *peer_of(device, mapping).vfio, mapping.bar);
	device.peer_dma_mappings.push_back(mapping);
}

// Only onto the peer lease it was made for, restored too. An adopted container still holds the mapping:
// kept then, removed otherwise (the peer may be lent to anybody next).
void Lender::restore_peer_dma(LentDevice &device, const std::vector<PeerDmaMapping> &mappings)
{
	for (const PeerDmaMapping &mapping : mappings)
		attempt("restoring the peer DMA of " + device.pci_address + " at IOVA " + std::to_string(mapping.iova) +
				" onto " + mapping.peer_pci,
			[&] {
				if (!device.adopted)
					return add_peer_dma(device, mapping);
				try {
					peer_of(device, mapping);
				} catch (const AgentError &) {
					device.vfio->unmap_dma(mapping.iova, mapping.size);
					throw;
				}
				device.peer_dma_mappings.push_back(mapping);
			});
}

void Lender::unmap_peer_dma_onto(const LentDevice &peer)
{
	for (auto &entry : devices_) { // not a structured binding: clang 14's lambdas cannot capture one
		LentDevice &device = entry.second;
		bool all_unmapped = false;
		std::erase_if(device.peer_dma_mappings, [&](const PeerDmaMapping &mapping) {
			if (mapping.peer_pci != peer.pci_address)
				return false;
			attempt("unmapping the peer DMA of " + device.pci_address + " at IOVA " +
					std::to_string(mapping.iova) + " onto " + peer.pci_address,
				[&] {
					try {
						device.vfio->unmap_dma(mapping.iova, mapping.size);
					} catch (const std::exception &e) {
						// The device must not reach the peer past its lease: all of its DMA
						// goes (its guest's DMA faults from now on), and the failure is a notice.
						device.vfio->unmap_all_dma();
						all_unmapped = true;
						throw AgentError(ErrorCode::system_error, EIO,
								 std::string(e.what()) + "; all DMA of " + device.pci_address +
									 " unmapped instead");
					}
				});
			return true;
		});
		if (all_unmapped) {
			device.dma_mappings.clear();
			device.peer_dma_mappings.clear();
		}
	}
}

void Lender::arm_irqs(LentDevice &device, unsigned index, std::uint32_t count)
{
	std::vector<Fd> eventfds;
	std::vector<int> fds;
	for (std::uint32_t i = 0; i < count; i++) {
		eventfds.emplace_back(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
		if (eventfds.back().get() < 0)
			throw_system_error("eventfd for vector " + std::to_string(i) + " of " + device.pci_address);
		fds.push_back(eventfds.back().get());
	}
	device.vfio->set_irqs(index, fds);
	bool relayed = false;
	try {
		kernel_.irq_bridge(device.data_path_ntb, device.slot, 0, fds);
		relayed = true;
		if (index == intx_irq_index) { // level-triggered: the borrower's unmasks come back over the link
			const Fd unmask(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
			if (unmask.get() < 0)
				throw_system_error("eventfd for the INTx unmask of " + device.pci_address);
			device.vfio->set_intx_unmask(unmask.get());
			kernel_.irq_bridge_unmask(device.data_path_ntb, device.slot, unmask.get());
		}
	} catch (...) {
		if (relayed)
			attempt("clearing interrupt slot " + std::to_string(device.slot) + " of " + device.pci_address,
				[&] { kernel_.irq_bridge(device.data_path_ntb, device.slot, 0, {}); });
		device.vfio->set_irqs(index, {});
		device.irqs.reset();
		throw;
	}
	// VFIO and the kernel hold their own references to the eventfds: ours close here.
	device.irqs = IrqSetting{index, count};
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
	    device.lease->expires_at_ms <= clock_.monotonic_ms())
		throw AgentError(ErrorCode::no_such_lease,
				 "no live lease " + lease_id + " of " + borrower + " on " + pci_address);
	return device;
}

void Lender::map_bars(LentDevice &device, const std::string &borrower, bool restoring)
{
	device.data_path_ntb.clear();
	const auto link = links_.find(borrower);
	if (link == links_.end()) {
		notices_.push_back("lease of " + device.pci_address + " by " + borrower +
				   " has no data path: no \"ntb\" configured towards " + borrower);
		return;
	}
	std::vector<std::size_t> mapped;
	for (std::size_t bar = 0; bar < bar_count; bar++) {
		if (!device.bars.placed[bar])
			continue;
		try {
			kernel_.bar_map(link->second, device.pci_address, static_cast<unsigned>(bar), device.bars.offsets[bar],
					device.info.bar_sizes[bar], false);
		} catch (const AgentError &e) {
			if (restoring && e.error_number() == EEXIST) // mapped by the agent before this one
				continue;
			if (mapped.empty() && no_data_path(e)) {
				notices_.push_back("lease of " + device.pci_address + " by " + borrower +
						   " has no data path: " + e.what());
				return;
			}
			for (const std::size_t done : mapped)
				attempt("unmapping BAR " + std::to_string(done) + " of " + device.pci_address, [&] {
					unmap_bar(link->second, device, done);
				});
			throw;
		}
		mapped.push_back(bar);
	}
	device.data_path_ntb = link->second;
}

void Lender::restore_data_path(LentDevice &device, const std::vector<DmaMapping> &dma, std::optional<IrqSetting> irqs)
{
	const std::string what = "restoring the lease of " + device.pci_address + " by " + device.lease->borrower;
	attempt(what, [&] { map_bars(device, device.lease->borrower, true); });
	if (!device.data_path_ntb.empty())
		attempt(what + ": bus master", [&] { set_bus_master(device, true); });
	for (const DmaMapping &mapping : dma)
		attempt(what + ": DMA at IOVA " + std::to_string(mapping.iova), [&] {
			try {
				add_dma(device, mapping);
			} catch (const AgentError &e) {
				if (!device.adopted || e.error_number() != EEXIST) // EEXIST: still in the adopted container
					throw;
				device.dma_mappings.push_back(mapping);
			}
		});
	if (device.data_path_ntb.empty())
		return;
	if (irqs && device.adopted) { // still armed: VFIO triggers the eventfds the relay holds
		device.irqs = irqs;
		return;
	}
	// The old agent's eventfds went with its VFIO file: the relay gets new ones, or none.
	if (irqs)
		attempt(what + ": IRQ index " + std::to_string(irqs->index),
			[&] { arm_irqs(device, irqs->index, irqs->count); });
	else
		attempt(what + ": clearing interrupt slot " + std::to_string(device.slot),
			[&] { kernel_.irq_bridge(device.data_path_ntb, device.slot, 0, {}); });
}

void Lender::unmap_bar(const std::string &ntb, const LentDevice &device, std::size_t bar)
{
	kernel_.bar_map(ntb, device.pci_address, static_cast<unsigned>(bar), device.bars.offsets[bar],
			device.info.bar_sizes[bar], true);
}

// An agent that died inside acquire, after its BAR_MAPs and before it saved the lease, left the BARs
// reachable from the link with no lease, and every later acquire of the device failing with EEXIST.
// Nothing of a device without a lease may stay mapped: unmap each placed BAR on every link (ENOENT: it
// was not mapped there; a kernel or link without BAR mapping has nothing to unmap).
void Lender::unmap_unleased_bars(const LentDevice &device)
{
	std::set<std::string> ntbs;
	for (const auto &link : links_)
		ntbs.insert(link.second);
	for (const std::string &ntb : ntbs)
		for (std::size_t bar = 0; bar < bar_count; bar++) {
			if (!device.bars.placed[bar])
				continue;
			try {
				unmap_bar(ntb, device, bar);
				notices_.push_back("BAR " + std::to_string(bar) + " of " + device.pci_address + " was mapped on " +
						   ntb + " without a lease: unmapped");
			} catch (const AgentError &e) {
				if (e.error_number() != ENOENT && !no_data_path(e))
					notices_.push_back("unmapping BAR " + std::to_string(bar) + " of " + device.pci_address +
							   " on " + ntb + ": " + e.what());
			}
		}
}

void Lender::disarm_irqs(LentDevice &device)
{
	const IrqSetting irqs = *device.irqs;
	device.irqs.reset();
	attempt("disarming IRQ index " + std::to_string(irqs.index) + " of " + device.pci_address,
		[&] { device.vfio->set_irqs(irqs.index, {}); });
	attempt("clearing interrupt slot " + std::to_string(device.slot) + " of " + device.pci_address,
		[&] { kernel_.irq_bridge(device.data_path_ntb, device.slot, 0, {}); });
}

void Lender::end_lease(LentDevice &device)
{
	// No other device reaches its BARs first; then it stops before its mappings go. Every step is
	// tried: a lease that ends cannot be ended again, so a failed step is a notice, not a lease that stays.
	unmap_peer_dma_onto(device);
	attempt("stopping DMA of " + device.pci_address, [&] { set_bus_master(device, false); });
	if (device.irqs)
		disarm_irqs(device);
	for (const DmaMapping &mapping : device.dma_mappings)
		attempt("unmapping DMA at IOVA " + std::to_string(mapping.iova) + " of " + device.pci_address,
			[&] { device.vfio->unmap_dma(mapping.iova, mapping.size); });
	device.dma_mappings.clear();
	for (const PeerDmaMapping &mapping : device.peer_dma_mappings)
		attempt("unmapping the peer DMA at IOVA " + std::to_string(mapping.iova) + " of " + device.pci_address,
			[&] { device.vfio->unmap_dma(mapping.iova, mapping.size); });
	device.peer_dma_mappings.clear();
	if (device.adopted) // a mapping the previous agent made but did not save would outlive the lease
		attempt("unmapping all DMA of " + device.pci_address, [&] { device.vfio->unmap_all_dma(); });
	device.adopted = false;
	if (!device.data_path_ntb.empty())
		for (std::size_t bar = 0; bar < bar_count; bar++)
			if (device.bars.placed[bar])
				attempt("unmapping BAR " + std::to_string(bar) + " of " + device.pci_address, [&] {
					unmap_bar(device.data_path_ntb, device, bar);
				});
	device.data_path_ntb.clear();
	try {
		reset_after_lease(device);
	} catch (const AgentError &e) {
		notices_.push_back(e.what());
	}
	device.lease.reset();
}

void Lender::reset_after_lease(LentDevice &device)
{
	try {
		device.vfio->reset();
	} catch (const std::exception &e) {
		device.reset_failed = true;
		const auto *agent_error = dynamic_cast<const AgentError *>(&e);
		throw AgentError(ErrorCode::system_error, agent_error ? agent_error->error_number() : EIO,
				 "resetting " + device.pci_address + " after its last lease: " + e.what() +
					 "; no new lease until a reset succeeds");
	}
	device.reset_failed = false;
}

// The borrower's command register is virtual (its bus-master bit is the borrow itself), so the device
// decodes its BARs and masters DMA for exactly the lease with a data path: memory space and bus master on
// at acquire, bus master off first thing at its end.
void Lender::set_bus_master(LentDevice &device, bool on)
{
	constexpr std::uint32_t command = 0x04, memory_space = 0x2, bus_master = 0x4;
	const std::uint32_t value = device.vfio->read_config(command, 2);
	device.vfio->write_config(command, 2, on ? value | memory_space | bus_master : value & ~bus_master);
}

void Lender::attempt(const std::string &what, const std::function<void()> &step)
{
	try {
		step();
	} catch (const std::exception &e) {
		notices_.push_back(what + ": " + e.what());
	}
}

std::uint32_t Lender::free_slot() const
{
	std::vector<bool> used(irq_slots);
	for (const auto &[address, device] : devices_)
		used[device.slot] = true;
	const auto free = std::find(used.begin(), used.end(), false);
	if (free == used.end())
		throw AgentError(ErrorCode::system_error, ENOSPC,
				 "all " + std::to_string(irq_slots) + " device slots of the BAR window are taken");
	return static_cast<std::uint32_t>(free - used.begin());
}

void Lender::persist() const
{
	json devices = json::array();
	const std::int64_t wall_offset_ms = clock_.wall_ms() - clock_.monotonic_ms();
	for (const auto &[address, device] : devices_)
		devices.push_back(device_state(device, wall_offset_ms));
	store_.save({{"version", state_version}, {"devices", devices}});
}

} // namespace farpass::agent
