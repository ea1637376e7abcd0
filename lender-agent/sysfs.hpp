// PCI devices as sysfs shows them, under a root directory ("/" in production, a temporary tree in tests,
// like mdevctl's Environment).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace farpass::agent {

struct PciDeviceInfo {
	std::uint16_t vendor = 0;
	std::uint16_t device = 0;
	std::uint16_t subsystem_vendor = 0;
	std::uint16_t subsystem_device = 0;
	std::uint32_t class_code = 0; // base << 16 | sub << 8 | prog-if
	std::uint8_t revision = 0;
	std::vector<std::uint64_t> bar_sizes; // BARs 0-5, 0 where unimplemented
	std::vector<std::uint32_t> bar_flags; // bar_io, bar_mem64, bar_prefetch (kernel_port.hpp)
	int iommu_group = -1;
	std::string driver; // empty when unbound
};

class Sysfs {
public:
	explicit Sysfs(std::filesystem::path root = "/") : root_(std::move(root)) {}

	bool has_pci_device(const std::string &address) const;
	// Throws AgentError(no_such_device) if absent.
	PciDeviceInfo pci_device(const std::string &address) const;

	// Makes vfio-pci the device's driver: driver_override, unbind from the current driver, reprobe.
	// Idempotent, so a restarted agent can call it for every device it had lent.
	void bind_to_vfio(const std::string &address);
	// Clears driver_override and lets the host's own driver probe the device again.
	void return_to_host(const std::string &address);

	static constexpr const char *vfio_driver = "vfio-pci";

private:
	std::filesystem::path device_dir(const std::string &address) const;
	void write(const std::filesystem::path &file, const std::string &value) const;

	std::filesystem::path root_;
};

} // namespace farpass::agent
