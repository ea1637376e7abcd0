// This host's lent devices and their leases: the lender's side of ownership.
//
// Rules (docs/agent-protocol.md, "Leases"): a device has at most one lease; a lease lasts lease_ms from
// its last acquire or renew; when it ends (release, expiry, forced unlend) the device's DMA mappings are
// removed and the device is reset before anyone else may borrow it. Every change is persisted before
// it is acknowledged.
#pragma once

#include "clock.hpp"
#include "kernel_port.hpp"
#include "state_store.hpp"
#include "sysfs.hpp"
#include "vfio.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace farpass::agent {

struct Lease {
	std::string id;
	std::string borrower; // host name the borrower's agent authenticated with
	std::int64_t expires_at_ms = 0;
};

struct DmaMapping {
	std::uint64_t iova = 0;
	std::uint64_t size = 0;
};

struct LentDevice {
	std::string pci_address;
	PciDeviceInfo info;
	std::optional<Lease> lease;
	std::vector<DmaMapping> dma_mappings; // of the current lease
	std::unique_ptr<VfioDevice> vfio;
};

struct ExpiredLease {
	std::string pci_address;
	Lease lease;
};

class Lender {
public:
	Lender(Sysfs &sysfs, Vfio &vfio, KernelPort &kernel, const Clock &clock, const StateStore &store,
	       std::int64_t lease_ms);

	// Rebinds and reopens every device of the saved state, keeping its lease. DMA mappings do not
	// survive (the container is new): the borrower maps again. Returns the addresses of devices that
	// have disappeared from the host, which are forgotten.
	std::vector<std::string> restore();

	const LentDevice &lend(const std::string &pci_address);
	// Refuses a borrowed device with device_busy unless forced, which ends the lease first.
	void unlend(const std::string &pci_address, bool force);

	// A second borrower gets device_busy naming the holder; the holder itself gets its lease back,
	// renewed, so a retried acquire whose reply was lost is harmless.
	Lease acquire(const std::string &pci_address, const std::string &borrower);
	Lease renew(const std::string &pci_address, const std::string &borrower, const std::string &lease_id);
	void release(const std::string &pci_address, const std::string &borrower, const std::string &lease_id);
	// Ends every lease past its expiry time.
	std::vector<ExpiredLease> expire_due();

	// Device access on behalf of a lease holder; config reads also without a lease (empty lease_id)
	// while no other host borrows the device.
	std::uint32_t read_config(const std::string &pci_address, const std::string &borrower,
				  const std::string &lease_id, std::uint32_t offset, unsigned width);
	void write_config(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
			  std::uint32_t offset, unsigned width, std::uint32_t value);
	void reset(const std::string &pci_address, const std::string &borrower, const std::string &lease_id);
	void map_dma(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
		     std::uint64_t iova, std::uint64_t size, std::uint64_t window_offset);
	void unmap_dma(const std::string &pci_address, const std::string &borrower, const std::string &lease_id,
		       std::uint64_t iova, std::uint64_t size);

	const std::map<std::string, LentDevice> &devices() const { return devices_; }
	std::int64_t lease_ms() const { return lease_ms_; }
	std::int64_t now_ms() const { return clock_.now_ms(); }

private:
	LentDevice &find(const std::string &pci_address);
	LentDevice &holder_device(const std::string &pci_address, const std::string &borrower,
				  const std::string &lease_id);
	void end_lease(LentDevice &device);
	void persist() const;

	Sysfs &sysfs_;
	Vfio &vfio_;
	KernelPort &kernel_;
	const Clock &clock_;
	const StateStore &store_;
	std::int64_t lease_ms_;
	std::map<std::string, LentDevice> devices_;
};

} // namespace farpass::agent
