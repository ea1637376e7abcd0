// What the agent needs from the farpass kernel module (/dev/farpass). The real implementation, over the
// uapi in include/, arrives with the module; tests use a fake.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace farpass::agent {

// A device lent by another host, as the borrower's kernel presents it (one mdev type each).
struct RemoteDevice {
	std::string lender_host;
	std::string pci_address; // on the lender
	std::uint16_t vendor = 0;
	std::uint16_t device = 0;
	std::vector<std::uint64_t> bar_sizes;
};

// A request from the borrower's kernel that only the lender can answer (the FUSE model: the kernel
// queues it, the agent completes it, and the kernel times it out if the agent never does).
struct Upcall {
	enum class Kind { borrow, release, config_read, config_write, reset };
	std::uint64_t id = 0;
	Kind kind = Kind::borrow;
	std::string lender_host;
	std::string pci_address;
	std::uint32_t offset = 0; // config accesses
	unsigned width = 0;
	std::uint32_t value = 0; // config_write
};

class KernelPort {
public:
	virtual ~KernelPort() = default;

	// Borrower role.
	virtual void announce(const RemoteDevice &device) = 0;
	virtual void withdraw(const std::string &lender_host, const std::string &pci_address) = 0;
	// Descriptor that polls readable while upcalls are queued.
	virtual int upcall_fd() const = 0;
	virtual std::optional<Upcall> next_upcall() = 0;
	// errno 0 for success; value is the result of a config_read.
	virtual void complete(std::uint64_t upcall_id, int error_number, std::uint32_t value) = 0;

	// Lender role: this host's mapping of the NTB outbound window towards the borrower, into which the
	// lender maps the device's DMA (IOVA = guest-physical address, target = window offset).
	virtual std::span<std::byte> outbound_window(const std::string &borrower_host) = 0;
};

} // namespace farpass::agent
