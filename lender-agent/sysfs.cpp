#include "sysfs.hpp"

#include "errors.hpp"
#include "kernel_port.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>

namespace farpass::agent {

namespace fs = std::filesystem;

namespace {

std::uint64_t read_hex(const fs::path &file)
{
	std::ifstream in(file);
	std::uint64_t value = 0;
	if (!(in >> std::hex >> value))
		throw AgentError(ErrorCode::system_error, EIO, "cannot read " + file.string());
	return value;
}

// Attributes older test trees (and some kernels) may lack: 0 when absent.
std::uint64_t read_hex_or_zero(const fs::path &file)
{
	return fs::exists(file) ? read_hex(file) : 0;
}

// include/linux/ioport.h
constexpr std::uint64_t ioresource_io = 0x100;
constexpr std::uint64_t ioresource_prefetch = 0x2000;
constexpr std::uint64_t ioresource_mem_64 = 0x100000;

std::string link_name(const fs::path &link)
{
	std::error_code error;
	const fs::path target = fs::read_symlink(link, error);
	return error ? std::string() : target.filename().string();
}

} // namespace

fs::path Sysfs::device_dir(const std::string &address) const
{
	return root_ / "sys/bus/pci/devices" / address;
}

bool Sysfs::has_pci_device(const std::string &address) const
{
	return fs::exists(device_dir(address));
}

PciDeviceInfo Sysfs::pci_device(const std::string &address) const
{
	const fs::path dir = device_dir(address);
	if (!fs::exists(dir))
		throw AgentError(ErrorCode::no_such_device, "no PCI device " + address);
	PciDeviceInfo info;
	info.vendor = static_cast<std::uint16_t>(read_hex(dir / "vendor"));
	info.device = static_cast<std::uint16_t>(read_hex(dir / "device"));
	info.subsystem_vendor = static_cast<std::uint16_t>(read_hex_or_zero(dir / "subsystem_vendor"));
	info.subsystem_device = static_cast<std::uint16_t>(read_hex_or_zero(dir / "subsystem_device"));
	info.class_code = static_cast<std::uint32_t>(read_hex_or_zero(dir / "class"));
	info.revision = static_cast<std::uint8_t>(read_hex_or_zero(dir / "revision"));
	// "resource" has one "start end flags" line per resource; the first six are the BARs.
	std::ifstream resource(dir / "resource");
	for (std::size_t bar = 0; bar < bar_count; bar++) {
		std::uint64_t start = 0, end = 0, flags = 0;
		if (!(resource >> std::hex >> start >> end >> flags))
			throw AgentError(ErrorCode::system_error, EIO, "cannot parse " + (dir / "resource").string());
		const std::uint64_t size = end > start ? end - start + 1 : 0;
		info.bar_sizes.push_back(size);
		info.bar_flags.push_back(size == 0 ? 0
						   : (flags & ioresource_io ? bar_io : 0) |
							     (flags & ioresource_mem_64 ? bar_mem64 : 0) |
							     (flags & ioresource_prefetch ? bar_prefetch : 0));
	}
	const std::string group = link_name(dir / "iommu_group");
	if (group.empty())
		throw AgentError(ErrorCode::no_such_device, EINVAL, address + " has no IOMMU group (IOMMU off?)");
	info.iommu_group = std::stoi(group);
	info.driver = link_name(dir / "driver");
	return info;
}

void Sysfs::write(const fs::path &file, const std::string &value) const
{
	const int fd = ::open(file.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0)
		throw_system_error("opening " + file.string());
	const ssize_t written = ::write(fd, value.data(), value.size());
	const int saved_errno = errno;
	::close(fd);
	errno = saved_errno;
	if (written != static_cast<ssize_t>(value.size()))
		throw_system_error("writing \"" + value + "\" to " + file.string());
}

void Sysfs::bind_to_vfio(const std::string &address)
{
	const PciDeviceInfo info = pci_device(address);
	write(device_dir(address) / "driver_override", vfio_driver);
	if (info.driver == vfio_driver)
		return;
	if (!info.driver.empty())
		write(root_ / "sys/bus/pci/drivers" / info.driver / "unbind", address);
	write(root_ / "sys/bus/pci/drivers_probe", address);
}

void Sysfs::return_to_host(const std::string &address)
{
	const PciDeviceInfo info = pci_device(address);
	// A lone newline clears driver_override.
	write(device_dir(address) / "driver_override", "\n");
	if (!info.driver.empty())
		write(root_ / "sys/bus/pci/drivers" / info.driver / "unbind", address);
	write(root_ / "sys/bus/pci/drivers_probe", address);
}

} // namespace farpass::agent
