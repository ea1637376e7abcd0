// What the agent needs from the farpass kernel module (/dev/farpass, include/uapi/farpass.h,
// docs/uapi.md). The real port is FarpassKernelPort (farpass_device.hpp); tests use fakes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace farpass::agent {

inline constexpr std::size_t bar_count = 6;

// BAR flags, as FARPASS_BAR_* in the uapi and as "bar_flags" on the wire (docs/agent-protocol.md).
inline constexpr std::uint32_t bar_io = 1u << 0;
inline constexpr std::uint32_t bar_mem64 = 1u << 1;
inline constexpr std::uint32_t bar_prefetch = 1u << 2;
inline constexpr std::uint32_t bar_mapped = 1u << 3; // placed at its bar_offsets entry of the link's BAR window

inline constexpr std::uint32_t irq_slots = 16;	  // FARPASS_IRQ_SLOTS: lent devices per link with interrupts
inline constexpr std::uint32_t irq_vectors = 2048; // FARPASS_IRQ_VECTORS: vectors per device

// A device lent by another host, as this host's kernel presents it: one mdev type on the NTB towards
// its lender.
struct RemoteDevice {
	std::uint32_t id = 0; // < 2^31, unique on this host, the same on every borrower (borrower.hpp)
	std::string lender_host;
	std::string pci_address; // on the lender
	std::string ntb;	 // PCI name of this host's NTB to the lender
	std::uint16_t vendor = 0;
	std::uint16_t device = 0;
	std::uint16_t subsystem_vendor = 0;
	std::uint16_t subsystem_device = 0;
	std::uint32_t class_code = 0; // base << 16 | sub << 8 | prog-if
	std::uint8_t revision = 0;
	std::array<std::uint64_t, bar_count> bar_sizes{};
	std::array<std::uint32_t, bar_count> bar_flags{};
	std::array<std::uint64_t, bar_count> bar_offsets{}; // in the link's BAR window, where bar_mapped
	std::uint32_t irq_slot = 0; // the lender's slot of the device (its interrupt mailbox slot)

	bool operator==(const RemoteDevice &) const = default;
};

// One slot of a borrow's DMA window (struct farpass_dma_slot): guest RAM or a peer BAR in the link's DMA
// window, or a lender peer (a BAR of another device the same lender lends, which it maps itself).
struct DmaSlot {
	std::uint64_t gpa = 0; // = the lender's IOVA
	std::uint64_t size = 0;
	std::uint64_t offset = 0; // in the link's DMA window
	bool lender_peer = false;
	std::uint32_t peer_id = 0; // a lender peer: its device id and BAR
	std::uint32_t peer_bar = 0;
};

// enum farpass_upcall_op
enum class UpcallOp : std::uint32_t {
	borrow = 1,
	give_back = 2,
	config_read = 3,
	config_write = 4,
	reset = 5,
	set_irqs = 6,
};

// A request from this host's kernel that only the lender can answer (the FUSE model: the kernel queues
// it with a deadline, the agent completes it, and the kernel fails it with ETIMEDOUT if the agent never
// does). Fields as struct farpass_upcall_req.
struct Upcall {
	std::uint64_t seq = 0;
	std::uint32_t op = 0;
	std::uint32_t device_id = 0;
	std::uint32_t timeout_ms = 0;
	std::array<std::uint64_t, 6> args{};
};

struct UpcallReply {
	std::int32_t error = 0; // 0 or a negative errno
	std::array<std::uint64_t, 6> data{};
};

class KernelPort {
public:
	virtual ~KernelPort() = default;

	// Whether /dev/farpass can be used now (module loaded, version agreed). Never throws; a port that
	// is not open tries to open it again, so loading farpass.ko after the agent started works.
	virtual bool available() = 0;
	// Why it is not (for logs); empty when it is.
	virtual std::string unavailable_reason() const = 0;

	// Borrower role: the device fills (withdraw: empties) the mdev type of its lender's slot on its
	// NTB, at once. Failures throw AgentError(system_error) with the ioctl's errno (announce:
	// EADDRINUSE while the slot holds another device; withdraw: EBUSY while the device has an
	// instance). A kernel without the data path gets no bar_mapped flags (nor offsets).
	virtual void announce(const RemoteDevice &device) = 0;
	virtual void withdraw(std::uint32_t device_id) = 0;
	// Where the guest RAM of the VFIO user borrowing device_id sits in the link's DMA window (built by
	// the kernel before its BORROW upcall).
	virtual std::vector<DmaSlot> dma_layout(std::uint32_t device_id) = 0;
	// The lender ended device_id's lease: its instance is unplugged (the VFIO user asked to release
	// it). False when the user had no request eventfd to ask with. Throws like announce (ENODATA: no
	// instance; ENOTTY: a kernel without it).
	virtual bool revoke(std::uint32_t device_id) = 0;

	// Upcalls: a descriptor that polls readable while requests are queued (-1 while the kernel serves
	// none), the next request if any (never blocks), and its completion.
	virtual int upcall_fd() const = 0;
	virtual std::optional<Upcall> next_upcall() = 0;
	virtual void complete(std::uint64_t seq, const UpcallReply &reply) = 0;

	// Lender role: this host's mapping of the NTB outbound window towards the borrower, into which the
	// lender maps the device's DMA (IOVA = guest-physical address, target = window offset).
	virtual std::span<std::byte> outbound_window(const std::string &borrower_host) = 0;
	// Lender role, the data path (FARPASS_FEAT_DATA_PATH; a kernel without it fails with EOPNOTSUPP, an
	// older one with ENOTTY). Exposes (or, unmap, hides) `size` bytes of memory BAR `bar` of the lent
	// device `pci` at `win_offset` of the BAR window of this host's NTB `ntb`.
	virtual void bar_map(const std::string &ntb, const std::string &pci, unsigned bar, std::uint64_t win_offset,
			     std::uint64_t size, bool unmap) = 0;
	// Relays eventfds fds[i] as vectors start + i of `slot` to the peer of `ntb`; no fds clears the slot.
	// The kernel keeps its own references: the caller may close them afterwards.
	virtual void irq_bridge(const std::string &ntb, std::uint32_t slot, std::uint32_t start,
				std::span<const int> fds) = 0;
	// Signals eventfd fd at each INTx unmask the peer of `ntb` sends for `slot` (the device's VFIO INTx
	// unmask eventfd); clearing the slot (irq_bridge with no fds) drops it.
	virtual void irq_bridge_unmask(const std::string &ntb, std::uint32_t slot, int fd) = 0;
	// How long the link of this host's NTB `ntb` has been down (0 while up); nothing when the kernel
	// cannot tell (no FARPASS_FEAT_LINK_STATUS, /dev/farpass unavailable, the NTB gone). Never throws.
	virtual std::optional<std::uint64_t> link_down_ms(const std::string &ntb) = 0;
};

} // namespace farpass::agent
