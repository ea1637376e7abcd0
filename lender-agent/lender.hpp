// This host's lent devices and their leases: the lender's side of ownership.
//
// Rules (docs/agent-protocol.md, "Leases" and "The data path"): a device has at most one lease; a lease
// lasts lease_ms from its last acquire or renew. At lend a device gets a slot (its interrupt mailbox slot
// and its part of every link's BAR window, fixed while it is lent, kept across restarts); while a lease
// is held its memory BARs are mapped in the BAR window of the NTB towards the holder. When the lease ends
// (release, expiry, forced unlend) the device stops before its mappings go: interrupts off, DMA
// unmapped, BARs unmapped, reset, free. Every change is persisted before it is acknowledged.
#pragma once

#include "clock.hpp"
#include "fd_store.hpp"
#include "kernel_port.hpp"
#include "state_store.hpp"
#include "sysfs.hpp"
#include "vfio.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace farpass::agent {

struct Lease {
	std::string id;
	std::string borrower; // host name the borrower's agent authenticated with
	std::int64_t expires_at_ms = 0; // Clock::monotonic_ms(); wall-clock time only in the state file
};

struct DmaMapping {
	std::uint64_t iova = 0;
	std::uint64_t size = 0;
	std::uint64_t window_offset = 0; // in the outbound window towards the holder
};

// Peer-to-peer between two devices lent to one borrower: device DMA to [iova, iova + size) reaches BAR
// `bar` of the lent device `peer_pci` from its start, while the peer's lease `peer_lease` lasts.
struct PeerDmaMapping {
	std::uint64_t iova = 0;
	std::uint64_t size = 0;
	std::string peer_pci;
	std::string peer_lease;
	std::uint32_t bar = 0;
};

// The link's BAR window as the lender divides it (config "bar_slot_bytes", "bar_window_bytes").
struct BarWindow {
	std::uint64_t slot_bytes = 4ull << 20;
	std::uint64_t window_bytes = (64ull << 20) - 4096; // its last page is the kernel's (interrupt acks)
};

// Where a slot's memory BARs sit in the BAR window: each aligned to min(size, 2 MiB) (at least a page),
// in BAR order, inside the slot and below the window's last page; a BAR that does not fit, an I/O BAR
// and one smaller than a page (BAR_MAP maps whole pages of the BAR only) are not placed.
struct BarPlacement {
	std::array<std::uint64_t, bar_count> offsets{};
	std::array<bool, bar_count> placed{};
};
BarPlacement place_bars(std::uint32_t slot, const std::vector<std::uint64_t> &bar_sizes,
			const std::vector<std::uint32_t> &bar_flags, const BarWindow &window);

struct IrqSetting {
	unsigned index = 0; // VFIO_PCI_INTX/MSI/MSIX_IRQ_INDEX
	std::uint32_t count = 0;
};

struct LentDevice {
	std::string pci_address;
	PciDeviceInfo info;
	std::optional<Lease> lease;
	std::vector<DmaMapping> dma_mappings; // of the current lease
	std::unique_ptr<VfioDevice> vfio;
	std::uint32_t slot = 0; // < irq_slots
	BarPlacement bars;
	std::string data_path_ntb = {};	  // the NTB whose BAR window maps the BARs now ("" = no data path)
	std::optional<IrqSetting> irqs = {}; // armed by irq.set during the current lease
	// Its VFIO descriptors are a previous agent's (docs/agent-protocol.md, "Adoption"): the container
	// may hold mappings the state does not name, removed all at once when the lease ends.
	bool adopted = false;
	std::vector<PeerDmaMapping> peer_dma_mappings = {}; // of the current lease
	// A lease ended and the reset after it failed: the device may still hold what its last holder
	// programmed (rings, DMA addresses), which the next holder's bus-master enable would set going in
	// that holder's memory. No new lease until a reset succeeds.
	bool reset_failed = false;
};

struct ExpiredLease {
	std::string pci_address;
	Lease lease;
	std::uint64_t link_down_ms = 0; // 0: the lease time ran out; else its link was down this long
};

class Lender {
public:
	// links: peer host -> this host's NTB towards it (the configured peers' "ntb"), where its leases'
	// BARs are mapped and its interrupts relayed.
	Lender(Sysfs &sysfs, Vfio &vfio, KernelPort &kernel, const Clock &clock, const StateStore &store,
	       FdStore &fd_store, std::int64_t lease_ms, BarWindow window = {}, std::map<std::string, std::string> links = {});

	// Rebinds and reopens every device of the saved state, keeping its slot and lease. A leased
	// device whose VFIO descriptors the fd store kept is adopted, not reopened: not reset, its
	// mappings and interrupts kept (a saved DMA mapping still there counts as mapped). Otherwise a
	// restored lease gets its data path back as it was: BARs mapped again (still mapped from before is
	// fine), DMA mappings and armed interrupts redone in the new container with new eventfds (the old
	// ones went with the old agent's VFIO file); what cannot be redone is a notice. Stored descriptors
	// of no lent device are closed; every device's are stored again. Returns the addresses of devices
	// that have disappeared from the host, which are forgotten.
	std::vector<std::string> restore();

	// Refuses with system_error (ENOSPC) when all irq_slots slots are taken.
	const LentDevice &lend(const std::string &pci_address);
	// Refuses a borrowed device with device_busy unless forced, which ends the lease first.
	void unlend(const std::string &pci_address, bool force);

	// A second borrower gets device_busy naming the holder; the holder itself gets its lease back,
	// renewed, so a retried acquire whose reply was lost is harmless. A device whose reset failed
	// after its last lease is reset first; if that fails too, system_error and no lease. A new lease
	// maps the device's placed BARs towards the borrower's NTB first; a failure there means no lease.
	// Without that NTB (no "ntb" configured for the borrower) or without a kernel data path
	// (EOPNOTSUPP, or ENOTTY from a kernel older than uapi 2) the lease has no data path
	// (data_path_ntb empty, a notice says so).
	Lease acquire(const std::string &pci_address, const std::string &borrower);
	Lease renew(const std::string &pci_address, const std::string &borrower, const std::string &lease_id);
	void release(const std::string &pci_address, const std::string &borrower, const std::string &lease_id);
	// Ends every lease past its expiry time.
	std::vector<ExpiredLease> expire_due();

	// Device access on behalf of a lease holder; config reads also without a lease (empty lease_id)
	// while no other host borrows the device.
	std::uint32_t read_config(const std::string &pci_address, const std::string &borrower,
				  const std::string &lease_id, std::uint64_t offset, std::uint64_t width);
	void write_config(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
			  std::uint64_t offset, std::uint64_t width, std::uint64_t value);
	void reset(const std::string &pci_address, const std::string &borrower, const std::string &lease_id);
	void map_dma(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
		     std::uint64_t iova, std::uint64_t size, std::uint64_t window_offset);
	void unmap_dma(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
		       std::uint64_t iova, std::uint64_t size);
	// Peer-to-peer on this host: both devices under live leases of the borrower with a data path, the
	// peer's lease peer_lease (the borrower's proof that the peer is its guest's device now), BAR `bar`
	// of the peer lent with it and at least size bytes. Undone when either lease ends, the peer's first
	// (no device reaches a BAR once its lease is over).
	void map_peer_dma(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
			  std::uint64_t iova, std::uint64_t size, const std::string &peer_pci,
			  const std::string &peer_lease, std::uint64_t bar);
	// Arms `count` vectors of IRQ index `index` with new eventfds (VFIO_DEVICE_SET_IRQS) relayed to the
	// holder's slot (IRQ_BRIDGE); count 0 disarms. Needs a lease with a data path.
	void set_irqs(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
		      std::uint64_t index, std::uint64_t count);

	// What happened that the daemon should log (BARs left out of the window, leases without a data
	// path, teardown steps that failed); taking them empties the list.
	std::vector<std::string> take_notices() { return std::exchange(notices_, {}); }

	const std::map<std::string, LentDevice> &devices() const { return devices_; }
	std::int64_t lease_ms() const { return lease_ms_; }
	std::int64_t now_ms() const { return clock_.monotonic_ms(); } // the time of expires_at_ms

private:
	LentDevice &find(const std::string &pci_address);
	// The stored descriptors of device if they check out (a leased device only), else a new open.
	std::unique_ptr<VfioDevice> open_or_adopt(LentDevice &device, std::map<std::string, std::vector<Fd>> &stored);
	void forget_stored(const std::string &name);
	LentDevice &holder_device(const std::string &pci_address, const std::string &borrower,
				  const std::string &lease_id);
	// restoring: a BAR still mapped by the agent before this one (EEXIST) counts as mapped.
	void map_bars(LentDevice &device, const std::string &borrower, bool restoring);
	std::uint64_t link_down_beyond_lease(const LentDevice &device);
	void restore_data_path(LentDevice &device, const std::vector<DmaMapping> &dma, std::optional<IrqSetting> irqs);
	void unmap_bar(const std::string &ntb, const LentDevice &device, std::size_t bar);
	void unmap_unleased_bars(const LentDevice &device);
	// The steps map_dma and set_irqs share with restore (checks done by the caller).
	void add_dma(LentDevice &device, const DmaMapping &mapping);
	// The peer a mapping leads to, if the mapping may be there (map_peer_dma's rules); throws otherwise.
	LentDevice &peer_of(const LentDevice &device, const PeerDmaMapping &mapping);
	void add_peer_dma(LentDevice &device, const PeerDmaMapping &mapping);
	void restore_peer_dma(LentDevice &device, const std::vector<PeerDmaMapping> &mappings);
	// Every other device's peer mappings onto device's BARs go (its lease is ending); one that cannot be
	// unmapped takes all of its device's DMA mappings with it.
	void unmap_peer_dma_onto(const LentDevice &device);
	void arm_irqs(LentDevice &device, unsigned index, std::uint32_t count);
	void disarm_irqs(LentDevice &device);
	void end_lease(LentDevice &device);
	// Marks the device reset_failed and throws system_error when its reset fails; clears the mark
	// otherwise.
	void reset_after_lease(LentDevice &device);
	void set_bus_master(LentDevice &device, bool on);
	// Runs one step of a teardown; a failure becomes a notice.
	void attempt(const std::string &what, const std::function<void()> &step);
	std::uint32_t free_slot() const;
	void persist() const;

	Sysfs &sysfs_;
	Vfio &vfio_;
	KernelPort &kernel_;
	const Clock &clock_;
	const StateStore &store_;
	FdStore &fd_store_;
	std::int64_t lease_ms_;
	BarWindow window_;
	std::map<std::string, std::string> links_;
	std::map<std::string, LentDevice> devices_;
	std::vector<std::string> notices_;
};

} // namespace farpass::agent
