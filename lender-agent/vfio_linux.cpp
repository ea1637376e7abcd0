#include "vfio_linux.hpp"

#include "errors.hpp"
#include "fd.hpp"

#include <fcntl.h>
#include <linux/vfio.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

namespace farpass::agent {

namespace {

int checked(int rc, const std::string &what)
{
	if (rc < 0)
		throw_system_error(what);
	return rc;
}

// The /proc/self/fd link of fd: what it is an open file of.
std::string link_of(int fd)
{
	char target[256];
	const ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof(target));
	if (n < 0)
		throw_system_error("readlink of descriptor " + std::to_string(fd));
	return std::string(target, static_cast<std::size_t>(n));
}

class LinuxVfioDevice final : public VfioDevice {
public:
	// attach: a new container, the group joins it; otherwise the group is in its container already.
	LinuxVfioDevice(const std::string &pci_address, Fd container, Fd group, bool attach)
		: address_(pci_address), container_(std::move(container)), group_(std::move(group)),
		  device_(open_device(attach))
	{
		vfio_region_info config{};
		config.argsz = sizeof(config);
		config.index = VFIO_PCI_CONFIG_REGION_INDEX;
		checked(::ioctl(device_.get(), VFIO_DEVICE_GET_REGION_INFO, &config), address_ + ": config region info");
		config_offset_ = static_cast<off_t>(config.offset);
	}

	std::uint32_t read_config(std::uint32_t offset, unsigned width) override
	{
		std::uint32_t value = 0; // config space is little-endian, as is every host VFIO runs on here
		if (::pread(device_.get(), &value, width, config_offset_ + offset) != static_cast<ssize_t>(width))
			throw_system_error(address_ + ": config read at " + std::to_string(offset));
		return value;
	}

	void write_config(std::uint32_t offset, unsigned width, std::uint32_t value) override
	{
		if (::pwrite(device_.get(), &value, width, config_offset_ + offset) != static_cast<ssize_t>(width))
			throw_system_error(address_ + ": config write at " + std::to_string(offset));
	}

	void reset() override { checked(::ioctl(device_.get(), VFIO_DEVICE_RESET), address_ + ": reset"); }

	void set_irqs(unsigned index, std::span<const int> fds) override
	{
		set_irqs_call(VFIO_IRQ_SET_ACTION_TRIGGER | (fds.empty() ? VFIO_IRQ_SET_DATA_NONE : VFIO_IRQ_SET_DATA_EVENTFD),
			      index, fds, "index " + std::to_string(index) + " count " + std::to_string(fds.size()));
	}

	void set_intx_unmask(int fd) override
	{
		const int fds[] = {fd};
		set_irqs_call(VFIO_IRQ_SET_ACTION_UNMASK | VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_INTX_IRQ_INDEX, fds,
			      "INTx unmask eventfd");
	}

	void map_dma(std::uint64_t iova, std::uint64_t size, std::uint64_t vaddr) override
	{
		vfio_iommu_type1_dma_map map{};
		map.argsz = sizeof(map);
		map.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
		map.vaddr = vaddr;
		map.iova = iova;
		map.size = size;
		checked(::ioctl(container_.get(), VFIO_IOMMU_MAP_DMA, &map), address_ + ": VFIO_IOMMU_MAP_DMA");
	}

	void unmap_dma(std::uint64_t iova, std::uint64_t size) override
	{
		vfio_iommu_type1_dma_unmap unmap{};
		unmap.argsz = sizeof(unmap);
		unmap.iova = iova;
		unmap.size = size;
		checked(::ioctl(container_.get(), VFIO_IOMMU_UNMAP_DMA, &unmap), address_ + ": VFIO_IOMMU_UNMAP_DMA");
	}

	void map_dma_to_bar(std::uint64_t iova, std::uint64_t size, VfioDevice &peer, unsigned bar) override
	{
		const auto &peer_device = dynamic_cast<const LinuxVfioDevice &>(peer);
		vfio_region_info region{};
		region.argsz = sizeof(region);
		region.index = VFIO_PCI_BAR0_REGION_INDEX + bar;
		checked(::ioctl(peer_device.device_.get(), VFIO_DEVICE_GET_REGION_INFO, &region),
			peer_device.address_ + ": BAR " + std::to_string(bar) + " region info");
		if (!(region.flags & VFIO_REGION_INFO_FLAG_MMAP) || size > region.size)
			throw AgentError(ErrorCode::system_error, EINVAL,
					 peer_device.address_ + ": BAR " + std::to_string(bar) + " (" + std::to_string(region.size) +
						 " bytes) cannot be mmapped or is smaller than " + std::to_string(size) + " bytes");
		void *bar_map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, peer_device.device_.get(),
				       static_cast<off_t>(region.offset));
		if (bar_map == MAP_FAILED)
			throw_system_error(peer_device.address_ + ": mmap of BAR " + std::to_string(bar));
		// MAP_DMA looks the BAR's pages up now; the IOMMU mapping does not need the mmap afterwards.
		try {
			map_dma(iova, size, reinterpret_cast<std::uint64_t>(bar_map));
		} catch (...) {
			::munmap(bar_map, size);
			throw;
		}
		::munmap(bar_map, size);
	}

	void unmap_all_dma() override
	{
		vfio_iommu_type1_dma_unmap unmap{};
		unmap.argsz = sizeof(unmap);
		unmap.flags = VFIO_DMA_UNMAP_FLAG_ALL;
		checked(::ioctl(container_.get(), VFIO_IOMMU_UNMAP_DMA, &unmap), address_ + ": VFIO_IOMMU_UNMAP_DMA (all)");
	}

	std::vector<int> descriptors() const override { return {container_.get(), group_.get(), device_.get()}; }

private:
	// VFIO_DEVICE_SET_IRQS with these flags and fds from vector 0 (vfio_irq_set ends in a flexible array:
	// one buffer of argsz bytes).
	void set_irqs_call(std::uint32_t flags, unsigned index, std::span<const int> fds, const std::string &what)
	{
		const std::size_t argsz = sizeof(vfio_irq_set) + fds.size() * sizeof(std::int32_t);
		std::vector<std::uint64_t> buffer((argsz + sizeof(std::uint64_t) - 1) / sizeof(std::uint64_t));
		auto *set = reinterpret_cast<vfio_irq_set *>(buffer.data());
		set->argsz = static_cast<std::uint32_t>(argsz);
		set->flags = flags;
		set->index = index;
		set->start = 0;
		set->count = static_cast<std::uint32_t>(fds.size());
		for (std::size_t i = 0; i < fds.size(); i++)
			reinterpret_cast<std::int32_t *>(set->data)[i] = fds[i];
		checked(::ioctl(device_.get(), VFIO_DEVICE_SET_IRQS, set), address_ + ": VFIO_DEVICE_SET_IRQS " + what);
	}

	// The group joins a container of its own, so the device's IOMMU domain holds only our mappings. The
	// device is opened by its address through the group: an adopted group that does not hold it, or is
	// in no container, fails here (a second open of an open device does not reset it).
	int open_device(bool attach)
	{
		vfio_group_status status{};
		status.argsz = sizeof(status);
		checked(::ioctl(group_.get(), VFIO_GROUP_GET_STATUS, &status), address_ + ": group status");
		if (!(status.flags & VFIO_GROUP_FLAGS_VIABLE))
			throw AgentError(ErrorCode::system_error, EBUSY,
					 address_ + ": IOMMU group has devices not bound to vfio-pci");
		const int container = container_.get();
		if (attach) {
			checked(::ioctl(group_.get(), VFIO_GROUP_SET_CONTAINER, &container), address_ + ": set container");
			checked(::ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU), address_ + ": set type1v2 IOMMU");
		} else if (!(status.flags & VFIO_GROUP_FLAGS_CONTAINER_SET)) {
			throw AgentError(ErrorCode::system_error, EINVAL, address_ + ": the stored group is in no container");
		}
		return checked(::ioctl(group_.get(), VFIO_GROUP_GET_DEVICE_FD, address_.c_str()), address_ + ": device fd");
	}

	std::string address_;
	Fd container_;
	Fd group_;
	Fd device_;
	off_t config_offset_ = 0;
};

} // namespace

std::unique_ptr<VfioDevice> LinuxVfio::open(const std::string &pci_address, int iommu_group)
{
	Fd container(checked(::open("/dev/vfio/vfio", O_RDWR | O_CLOEXEC), "opening /dev/vfio/vfio"));
	const std::string group_path = "/dev/vfio/" + std::to_string(iommu_group);
	// A group is open once at a time: descriptors just removed from the fd store are closed there
	// soon after (the removal is a datagram), so EBUSY is retried for up to 2 s.
	int group_fd = -1;
	for (int tries = 0; (group_fd = ::open(group_path.c_str(), O_RDWR | O_CLOEXEC)) < 0 && errno == EBUSY && tries < 40; tries++)
		::usleep(50'000);
	Fd group(checked(group_fd, "opening VFIO group " + std::to_string(iommu_group)));
	return std::make_unique<LinuxVfioDevice>(pci_address, std::move(container), std::move(group), true);
}

std::unique_ptr<VfioDevice> LinuxVfio::adopt(const std::string &pci_address, int iommu_group, std::vector<Fd> fds)
{
	const std::string group_path = "/dev/vfio/" + std::to_string(iommu_group);
	const auto refuse = [&](const std::string &why) { throw AgentError(ErrorCode::system_error, EINVAL, why); };
	if (fds.size() != 3)
		refuse(std::to_string(fds.size()) + " descriptors, not a container, a group and a device");
	// Each kind once, whatever the order the store kept them in.
	std::vector<Fd> container, group, device;
	for (Fd &fd : fds) {
		const std::string link = link_of(fd.get());
		if (link == "/dev/vfio/vfio")
			container.push_back(std::move(fd));
		else if (link == group_path)
			group.push_back(std::move(fd));
		else if (link == "anon_inode:[vfio-device]")
			device.push_back(std::move(fd));
		else
			refuse("a descriptor of " + link + ", not /dev/vfio/vfio, " + group_path + " (IOMMU group " +
			       std::to_string(iommu_group) + " in sysfs) or a VFIO device");
	}
	if (container.size() != 1 || group.size() != 1 || device.size() != 1)
		refuse("not one container, one group and one device");
	vfio_iommu_type1_info iommu{};
	iommu.argsz = sizeof(iommu);
	checked(::ioctl(container[0].get(), VFIO_IOMMU_GET_INFO, &iommu), "the stored container's IOMMU");
	vfio_device_info info{};
	info.argsz = sizeof(info);
	checked(::ioctl(device[0].get(), VFIO_DEVICE_GET_INFO, &info), "the stored device's info");
	if (!(info.flags & VFIO_DEVICE_FLAGS_PCI))
		refuse("the stored device is no PCI device");
	// The device is opened again through the group (by the address in the state); the stored
	// descriptor of it closes once that one is open.
	return std::make_unique<LinuxVfioDevice>(pci_address, std::move(container[0]), std::move(group[0]), false);
}

} // namespace farpass::agent
