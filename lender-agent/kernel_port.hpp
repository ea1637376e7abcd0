// What the agent needs from the farpass kernel module (/dev/farpass, include/uapi/farpass.h,
// docs/uapi.md). The real port is FarpassKernelPort (farpass_device.hpp); tests use fakes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace farpass::agent {

inline constexpr std::size_t bar_count = 6;

// BAR flags, as FARPASS_BAR_* in the uapi and as "bar_flags" on the wire (docs/agent-protocol.md).
inline constexpr std::uint32_t bar_io = 1u << 0;
inline constexpr std::uint32_t bar_mem64 = 1u << 1;
inline constexpr std::uint32_t bar_prefetch = 1u << 2;

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
};

// enum farpass_upcall_op
enum class UpcallOp : std::uint32_t { borrow = 1, give_back = 2, config_read = 3, config_write = 4, reset = 5 };

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

	// Borrower role. Both return true when the kernel deferred the change (*_F_PENDING: an instance
	// exists on that NTB). Failures throw AgentError(system_error) with the ioctl's errno.
	virtual bool announce(const RemoteDevice &device) = 0;
	virtual bool withdraw(std::uint32_t device_id) = 0;

	// Upcalls: a descriptor that polls readable while requests are queued (-1 while the kernel serves
	// none), the next request if any (never blocks), and its completion.
	virtual int upcall_fd() const = 0;
	virtual std::optional<Upcall> next_upcall() = 0;
	virtual void complete(std::uint64_t seq, const UpcallReply &reply) = 0;

	// Lender role: this host's mapping of the NTB outbound window towards the borrower, into which the
	// lender maps the device's DMA (IOVA = guest-physical address, target = window offset).
	virtual std::span<std::byte> outbound_window(const std::string &borrower_host) = 0;
};

} // namespace farpass::agent
