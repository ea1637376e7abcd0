#include "farpass_device.hpp"

#include "errors.hpp"

#include "farpass_uapi.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace farpass::agent {

// kernel_port.hpp repeats these so that code above the port needs no uapi header.
static_assert(bar_io == FARPASS_BAR_IO && bar_mem64 == FARPASS_BAR_MEM64 && bar_prefetch == FARPASS_BAR_PREFETCH &&
	      bar_mapped == FARPASS_BAR_MAPPED && bar_count == FARPASS_NUM_BARS);
static_assert(irq_slots == FARPASS_IRQ_SLOTS && irq_vectors == FARPASS_IRQ_VECTORS);

namespace {

const char *command_name(unsigned command)
{
	switch (command) {
	case FARPASS_CMD_VERSION: return "VERSION";
	case FARPASS_CMD_ANNOUNCE_DEVICE: return "ANNOUNCE_DEVICE";
	case FARPASS_CMD_WITHDRAW_DEVICE: return "WITHDRAW_DEVICE";
	case FARPASS_CMD_UPCALL_GET: return "UPCALL_GET";
	case FARPASS_CMD_UPCALL_REPLY: return "UPCALL_REPLY";
	case FARPASS_CMD_OUTBOUND_WINDOW: return "OUTBOUND_WINDOW";
	case FARPASS_CMD_DMA_LAYOUT: return "DMA_LAYOUT";
	case FARPASS_CMD_BAR_MAP: return "BAR_MAP";
	case FARPASS_CMD_IRQ_BRIDGE: return "IRQ_BRIDGE";
	case FARPASS_CMD_LINK_STATUS: return "LINK_STATUS";
	case FARPASS_CMD_REVOKE_DEVICE: return "REVOKE_DEVICE";
	default: return "unknown ioctl";
	}
}

// A C string copied into a fixed uapi array: it must fit with its NUL (the kernel checks again).
template <std::size_t N> void copy_name(char (&target)[N], const std::string &value, const char *what)
{
	if (value.empty() || value.size() >= N)
		throw AgentError(ErrorCode::invalid_params, std::string(what) + " \"" + value + "\" must have 1 to " +
								    std::to_string(N - 1) + " characters");
	std::memcpy(target, value.c_str(), value.size() + 1);
}

} // namespace

FdDeviceFile::~FdDeviceFile()
{
	if (fd_ >= 0)
		::close(fd_);
}

int FdDeviceFile::ioctl(unsigned long request, void *argument)
{
	int rc;
	while ((rc = ::ioctl(fd_, request, argument)) < 0 && errno == EINTR) {
	}
	return rc < 0 ? errno : 0;
}

std::unique_ptr<WindowMapping> FdDeviceFile::map(std::size_t length, std::uint64_t offset, int &error)
{
	void *address = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, static_cast<off_t>(offset));
	if (address == MAP_FAILED) {
		error = errno;
		return nullptr;
	}
	error = 0;
	return std::make_unique<WindowMapping>(std::span<std::byte>(static_cast<std::byte *>(address), length),
					       [](void *a, std::size_t n) { ::munmap(a, n); });
}

DeviceOpener open_device_path(std::string path)
{
	return [path = std::move(path)]() -> std::unique_ptr<DeviceFile> {
		const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			throw_system_error("opening " + path);
		return std::make_unique<FdDeviceFile>(fd);
	};
}

std::string farpass_errno_text(unsigned command, int error_number)
{
	const std::string name = ::strerrorname_np(error_number) ? ::strerrorname_np(error_number) : "E?";
	std::string meaning;
	const bool data_path = command == FARPASS_CMD_DMA_LAYOUT || command == FARPASS_CMD_BAR_MAP ||
			       command == FARPASS_CMD_IRQ_BRIDGE;
	switch (error_number) {
	case EPROTO: meaning = "VERSION was not negotiated on this file"; break;
	case EPROTONOSUPPORT: meaning = "the kernel speaks another uapi version"; break;
	case EINVAL:
		meaning = command == FARPASS_CMD_ANNOUNCE_DEVICE
				  ? "the kernel refused the arguments (argsz, flags, names, BARs), or the NTB's mdev types "
				    "are another lender's"
				  : "the kernel refused the arguments (argsz, flags, names, BARs, sizes or offsets)";
		break;
	case E2BIG: meaning = "the kernel does not know this struct's newer fields"; break;
	case ENOTTY: meaning = "the kernel does not know this ioctl"; break;
	case EOPNOTSUPP:
		meaning = data_path ? "the kernel has no data path (no FARPASS_FEAT_DATA_PATH: the NTB has no IOMMU domain)"
				    : "the kernel does not serve this (no FARPASS_FEAT_UPCALLS)";
		break;
	case EPERM:
		meaning = command == FARPASS_CMD_BAR_MAP ? "the device is not bound to vfio-pci" : "needs root with CAP_SYS_ADMIN";
		break;
	case EACCES: meaning = "needs root with CAP_SYS_ADMIN"; break;
	case ENOENT:
		meaning = command == FARPASS_CMD_UPCALL_REPLY ? "no such pending request (answered too late?)"
			  : command == FARPASS_CMD_BAR_MAP    ? "that BAR is not mapped there"
							      : "no such announced device id";
		break;
	case EEXIST:
		meaning = command == FARPASS_CMD_BAR_MAP ? "overlaps a mapping in the BAR window"
							 : "the device id is already announced";
		break;
	case ENODEV: meaning = command == FARPASS_CMD_BAR_MAP ? "no such NTB or PCI device" : "no such NTB bound to farpass"; break;
	case EADDRINUSE:
		meaning = "the device's slot (mdev type), or its place in the BAR window, holds another announced device";
		break;
	case ENOLINK: meaning = "the NTB link is down"; break;
	case ENOSPC: meaning = "the kernel's table of announced devices is full"; break;
	case EBUSY: meaning = "an mdev instance of the type exists"; break;
	case ERANGE: meaning = "outside the link's BAR window (or on its reserved last page)"; break;
	case EBADF: meaning = "a descriptor that is not an eventfd"; break;
	case ENODATA:
		meaning = command == FARPASS_CMD_REVOKE_DEVICE ? "the device has no instance"
							       : "no instance of the device is borrowing it now";
		break;
	default: meaning = std::strerror(error_number); break;
	}
	return std::string(command_name(command)) + ": " + name + ": " + meaning;
}

FarpassKernelPort::FarpassKernelPort(DeviceOpener opener, std::map<std::string, std::string> links)
	: opener_(std::move(opener)), links_(std::move(links))
{
}

bool FarpassKernelPort::available()
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	if (file_)
		return true;
	std::unique_ptr<DeviceFile> file;
	try {
		file = opener_();
	} catch (const AgentError &e) {
		reason_ = e.what();
		return false;
	}
	farpass_version version{};
	version.argsz = sizeof(version);
	version.version = FARPASS_API_VERSION;
	if (const int error = file->ioctl(FARPASS_IOCTL_VERSION, &version); error != 0) {
		reason_ = farpass_errno_text(FARPASS_CMD_VERSION, error);
		if (error == EPROTONOSUPPORT)
			reason_ += " (kernel " + std::to_string(version.version) + ", agent " +
				   std::to_string(FARPASS_API_VERSION) + ")";
		return false;
	}
	kernel_version_ = version.version;
	features_ = version.features;
	file_ = std::move(file);
	reason_.clear();
	return true;
}

DeviceFile &FarpassKernelPort::file()
{
	if (!available())
		throw AgentError(ErrorCode::system_error, ENODEV, "/dev/farpass: " + reason_);
	return *file_;
}

void FarpassKernelPort::call(unsigned command, unsigned long request, void *argument, const std::string &what)
{
	const int error = file().ioctl(request, argument);
	if (error == 0)
		return;
	if (error == EPROTO) { // the file lost its negotiated version: start again with a new one
		file_.reset();
		reason_ = farpass_errno_text(command, error);
	}
	throw AgentError(ErrorCode::system_error, error, what + ": " + farpass_errno_text(command, error));
}

void FarpassKernelPort::announce(const RemoteDevice &device)
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	if (device.id >= (1u << 31))
		throw AgentError(ErrorCode::invalid_params, "device id " + std::to_string(device.id) + " is not < 2^31");
	farpass_announce announce{};
	announce.argsz = sizeof(announce);
	announce.device_id = device.id;
	announce.vendor = device.vendor;
	announce.device = device.device;
	announce.subsystem_vendor = device.subsystem_vendor;
	announce.subsystem_device = device.subsystem_device;
	announce.class_code = device.class_code;
	announce.revision = device.revision;
	copy_name(announce.lender, device.lender_host, "lender host name");
	copy_name(announce.lender_addr, device.pci_address, "lender PCI address");
	copy_name(announce.ntb, device.ntb, "NTB PCI name");
	announce.irq_slot = device.irq_slot;
	// Without a data path this host cannot reach the link's BAR window, so no BAR claims a place in it
	// (and a kernel from before the data path refuses the flag).
	file(); // VERSION first: it tells the features
	const bool data_path = features_ & FARPASS_FEAT_DATA_PATH;
	for (std::size_t bar = 0; bar < bar_count; bar++) {
		const bool mapped = data_path && (device.bar_flags[bar] & FARPASS_BAR_MAPPED);
		announce.bars[bar].size = device.bar_sizes[bar];
		announce.bars[bar].flags = device.bar_flags[bar] & ~(mapped ? 0u : FARPASS_BAR_MAPPED);
		announce.bars[bar].win_offset = mapped ? device.bar_offsets[bar] : 0;
	}
	call(FARPASS_CMD_ANNOUNCE_DEVICE, FARPASS_IOCTL_ANNOUNCE_DEVICE, &announce,
	     "announcing " + device.lender_host + " " + device.pci_address + " as id " + std::to_string(device.id));
}

void FarpassKernelPort::withdraw(std::uint32_t device_id)
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	farpass_withdraw withdraw{};
	withdraw.argsz = sizeof(withdraw);
	withdraw.device_id = device_id;
	call(FARPASS_CMD_WITHDRAW_DEVICE, FARPASS_IOCTL_WITHDRAW_DEVICE, &withdraw,
	     "withdrawing id " + std::to_string(device_id));
}

bool FarpassKernelPort::revoke(std::uint32_t device_id)
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	farpass_revoke revoke{};
	revoke.argsz = sizeof(revoke);
	revoke.device_id = device_id;
	call(FARPASS_CMD_REVOKE_DEVICE, FARPASS_IOCTL_REVOKE_DEVICE, &revoke, "revoking id " + std::to_string(device_id));
	return !(revoke.flags & FARPASS_REVOKE_F_NO_REQUEST);
}

std::vector<DmaSlot> FarpassKernelPort::dma_layout(std::uint32_t device_id)
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	farpass_dma_layout layout{};
	layout.argsz = sizeof(layout);
	layout.device_id = device_id;
	call(FARPASS_CMD_DMA_LAYOUT, FARPASS_IOCTL_DMA_LAYOUT, &layout, "DMA layout of id " + std::to_string(device_id));
	std::vector<DmaSlot> slots;
	for (std::uint32_t i = 0; i < layout.nr_slots && i < FARPASS_DMA_SLOTS; i++)
		slots.push_back({layout.slots[i].gpa, layout.slots[i].size, layout.slots[i].offset,
				 (layout.slots[i].flags & FARPASS_DMA_SLOT_F_LENDER_PEER) != 0, layout.slots[i].peer_id,
				 layout.slots[i].peer_bar});
	return slots;
}

int FarpassKernelPort::upcall_fd() const
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	return file_ && (features_ & FARPASS_FEAT_UPCALLS) ? file_->fd() : -1;
}

std::optional<Upcall> FarpassKernelPort::next_upcall()
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	if (upcall_fd() < 0)
		return std::nullopt;
	farpass_upcall_req request{};
	request.argsz = sizeof(request);
	const int error = file_->ioctl(FARPASS_IOCTL_UPCALL_GET, &request);
	if (error == EAGAIN)
		return std::nullopt;
	if (error != 0)
		throw AgentError(ErrorCode::system_error, error,
				 "taking an upcall: " + farpass_errno_text(FARPASS_CMD_UPCALL_GET, error));
	Upcall upcall;
	upcall.seq = request.seq;
	upcall.op = request.op;
	upcall.device_id = request.device_id;
	upcall.timeout_ms = request.timeout_ms;
	for (std::size_t i = 0; i < upcall.args.size(); i++)
		upcall.args[i] = request.args[i];
	return upcall;
}

void FarpassKernelPort::complete(std::uint64_t seq, const UpcallReply &reply)
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	farpass_upcall_reply answer{};
	answer.argsz = sizeof(answer);
	answer.seq = seq;
	answer.error = reply.error;
	for (std::size_t i = 0; i < reply.data.size(); i++)
		answer.data[i] = reply.data[i];
	call(FARPASS_CMD_UPCALL_REPLY, FARPASS_IOCTL_UPCALL_REPLY, &answer, "answering upcall " + std::to_string(seq));
}

std::span<std::byte> FarpassKernelPort::outbound_window(const std::string &borrower_host)
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	const auto link = links_.find(borrower_host);
	if (link == links_.end())
		throw AgentError(ErrorCode::system_error, ENOLINK,
				 "no NTB configured towards " + borrower_host + " (its peer entry has no \"ntb\")");
	const std::string &ntb = link->second;
	if (const auto mapped = windows_.find(ntb); mapped != windows_.end())
		return mapped->second->window();

	// The largest of the NTB's outbound windows (the DMA window must hold all of the borrower's guest RAM).
	farpass_outbound_window best{};
	for (std::uint32_t mw = 0;; mw++) {
		farpass_outbound_window w{};
		w.argsz = sizeof(w);
		copy_name(w.ntb, ntb, "NTB PCI name");
		w.mw = mw;
		const int error = file().ioctl(FARPASS_IOCTL_OUTBOUND_WINDOW, &w);
		if (error == ENOENT && mw > 0 && mw >= w.count)
			break;
		if (error != 0)
			call(FARPASS_CMD_OUTBOUND_WINDOW, FARPASS_IOCTL_OUTBOUND_WINDOW, &w,
			     "outbound window " + std::to_string(mw) + " of NTB " + ntb + " towards " + borrower_host);
		if (w.size > best.size)
			best = w;
		if (mw + 1 >= w.count)
			break;
	}
	if (best.size == 0 || best.size > SIZE_MAX)
		throw AgentError(ErrorCode::system_error, ENODEV, "NTB " + ntb + " has no outbound window to map");
	int error = 0;
	auto mapping = file().map(static_cast<std::size_t>(best.size), best.offset, error);
	if (!mapping)
		throw AgentError(ErrorCode::system_error, error,
				 "mmap of outbound window " + std::to_string(best.mw) + " of NTB " + ntb + ": " +
					 farpass_errno_text(FARPASS_CMD_OUTBOUND_WINDOW, error));
	return windows_.emplace(ntb, std::move(mapping)).first->second->window();
}

void FarpassKernelPort::bar_map(const std::string &ntb, const std::string &pci, unsigned bar, std::uint64_t win_offset,
				std::uint64_t size, bool unmap)
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	farpass_bar_map map{};
	map.argsz = sizeof(map);
	map.flags = unmap ? FARPASS_BAR_MAP_F_UNMAP : 0;
	copy_name(map.ntb, ntb, "NTB PCI name");
	copy_name(map.pci, pci, "PCI name");
	map.bar = bar;
	map.win_offset = win_offset;
	map.size = size;
	call(FARPASS_CMD_BAR_MAP, FARPASS_IOCTL_BAR_MAP, &map,
	     std::string(unmap ? "unmapping" : "mapping") + " BAR " + std::to_string(bar) + " of " + pci + " at " +
		     std::to_string(win_offset) + " of NTB " + ntb + "'s BAR window");
}

void FarpassKernelPort::irq_bridge_call(const std::string &ntb, std::uint32_t slot, std::uint32_t flags,
				       std::uint32_t start, std::span<const int> fds, const std::string &what)
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	// The struct ends in a flexible array: one buffer of argsz bytes, as the kernel reads it.
	const std::size_t argsz = sizeof(farpass_irq_bridge) + fds.size() * sizeof(__s32);
	std::vector<std::uint64_t> buffer((argsz + sizeof(std::uint64_t) - 1) / sizeof(std::uint64_t));
	auto *bridge = reinterpret_cast<farpass_irq_bridge *>(buffer.data());
	bridge->argsz = static_cast<__u32>(argsz);
	bridge->flags = flags;
	copy_name(bridge->ntb, ntb, "NTB PCI name");
	bridge->irq_slot = slot;
	bridge->start = start;
	bridge->count = static_cast<__u32>(fds.size());
	for (std::size_t i = 0; i < fds.size(); i++)
		bridge->fds[i] = fds[i];
	call(FARPASS_CMD_IRQ_BRIDGE, FARPASS_IOCTL_IRQ_BRIDGE, bridge, what + " on NTB " + ntb);
}

void FarpassKernelPort::irq_bridge(const std::string &ntb, std::uint32_t slot, std::uint32_t start,
				   std::span<const int> fds)
{
	irq_bridge_call(ntb, slot, fds.empty() ? FARPASS_IRQ_BRIDGE_F_CLEAR : 0, start, fds,
			fds.empty() ? "clearing interrupt slot " + std::to_string(slot)
				    : "relaying " + std::to_string(fds.size()) + " vector(s) of interrupt slot " +
					      std::to_string(slot));
}

void FarpassKernelPort::irq_bridge_unmask(const std::string &ntb, std::uint32_t slot, int fd)
{
	const int fds[] = {fd};
	irq_bridge_call(ntb, slot, FARPASS_IRQ_BRIDGE_F_UNMASK, 0, fds,
			"relaying INTx unmasks of interrupt slot " + std::to_string(slot));
}

std::optional<std::uint64_t> FarpassKernelPort::link_down_ms(const std::string &ntb)
{
	const std::lock_guard<std::recursive_mutex> guard(lock_);
	if (!available() || !(features_ & FARPASS_FEAT_LINK_STATUS))
		return std::nullopt;
	farpass_link_status status{};
	status.argsz = sizeof(status);
	try {
		copy_name(status.ntb, ntb, "NTB PCI name");
		call(FARPASS_CMD_LINK_STATUS, FARPASS_IOCTL_LINK_STATUS, &status, "link status of NTB " + ntb);
	} catch (const AgentError &) {
		return std::nullopt; // the NTB is gone (ENODEV): what it carried went with it
	}
	return status.down_ms;
}

} // namespace farpass::agent
