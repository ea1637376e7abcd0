// The real KernelPort: /dev/farpass (include/uapi/farpass.h, docs/uapi.md).
//
// Rules kept here: VERSION is the first ioctl on every open file (and its result decides whether the
// port is usable and whether upcalls are served); every struct is zero-initialised with argsz =
// sizeof and flags = 0; output flags (REVOKE's) are read back; errno values become AgentErrors that
// name the ioctl, the device id and what the errno means for that ioctl.
//
// The file is behind a seam (DeviceFile) so unit tests drive the port against a fake that behaves
// like the kernel (tests/unit/test_agent_kernel.cpp).
#pragma once

#include "kernel_port.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

namespace farpass::agent {

// One mapping of an NTB outbound window, unmapped on destruction (RAII).
class WindowMapping {
public:
	WindowMapping(std::span<std::byte> window, std::function<void(void *, std::size_t)> unmap)
		: window_(window), unmap_(std::move(unmap)) {}
	~WindowMapping() { unmap_(window_.data(), window_.size()); }
	WindowMapping(const WindowMapping &) = delete;
	WindowMapping &operator=(const WindowMapping &) = delete;
	std::span<std::byte> window() const { return window_; }

private:
	std::span<std::byte> window_;
	std::function<void(void *, std::size_t)> unmap_;
};

// One open /dev/farpass.
class DeviceFile {
public:
	virtual ~DeviceFile() = default;
	// ioctl(2): 0, or the errno of the failure.
	virtual int ioctl(unsigned long request, void *argument) = 0;
	// For poll(2).
	virtual int fd() const = 0;
	// mmap(2) of `length` bytes at `offset`, PROT_READ | PROT_WRITE, MAP_SHARED: the mapping (it may
	// outlive the file), or nullptr with the errno in `error`.
	virtual std::unique_ptr<WindowMapping> map(std::size_t length, std::uint64_t offset, int &error) = 0;
};

// The real file, closed on destruction (RAII). Opened O_RDWR | O_NONBLOCK | O_CLOEXEC: UPCALL_GET then
// answers EAGAIN instead of blocking the agent's poll loop.
class FdDeviceFile final : public DeviceFile {
public:
	explicit FdDeviceFile(int fd) : fd_(fd) {}
	~FdDeviceFile() override;
	FdDeviceFile(const FdDeviceFile &) = delete;
	FdDeviceFile &operator=(const FdDeviceFile &) = delete;

	int ioctl(unsigned long request, void *argument) override;
	int fd() const override { return fd_; }
	std::unique_ptr<WindowMapping> map(std::size_t length, std::uint64_t offset, int &error) override;

private:
	int fd_;
};

// Returns the open file, or throws AgentError(system_error) with open(2)'s errno.
using DeviceOpener = std::function<std::unique_ptr<DeviceFile>()>;
DeviceOpener open_device_path(std::string path);

// Text for an errno returned by a farpass ioctl ("EEXIST: device id in use ..."), per docs/uapi.md.
std::string farpass_errno_text(unsigned command, int error_number);

class FarpassKernelPort final : public KernelPort {
public:
	// links: peer host name -> PCI name of this host's NTB towards it (the configured peers' "ntb").
	explicit FarpassKernelPort(DeviceOpener opener, std::map<std::string, std::string> links = {});

	bool available() override;
	std::string unavailable_reason() const override { const std::lock_guard<std::recursive_mutex> guard(lock_); return reason_; }
	void announce(const RemoteDevice &device) override;
	void withdraw(std::uint32_t device_id) override;
	std::vector<DmaSlot> dma_layout(std::uint32_t device_id) override;
	bool revoke(std::uint32_t device_id) override;
	int upcall_fd() const override;
	std::optional<Upcall> next_upcall() override;
	void complete(std::uint64_t seq, const UpcallReply &reply) override;
	// The largest outbound window of the NTB towards borrower_host, mmapped once (FARPASS_IOCTL_OUTBOUND_WINDOW
	// + mmap) and kept for the port's life: VFIO DMA mappings point into it.
	std::span<std::byte> outbound_window(const std::string &borrower_host) override;
	void bar_map(const std::string &ntb, const std::string &pci, unsigned bar, std::uint64_t win_offset,
		     std::uint64_t size, bool unmap) override;
	void irq_bridge(const std::string &ntb, std::uint32_t slot, std::uint32_t start, std::span<const int> fds) override;
	void irq_bridge_unmask(const std::string &ntb, std::uint32_t slot, int fd) override;
	std::optional<std::uint64_t> link_down_ms(const std::string &ntb) override;

	std::uint32_t kernel_version() const { const std::lock_guard<std::recursive_mutex> guard(lock_); return kernel_version_; }
	std::uint64_t features() const { const std::lock_guard<std::recursive_mutex> guard(lock_); return features_; }

private:
	DeviceFile &file();
	// Runs the ioctl; on failure throws AgentError(system_error, errno) naming it. A file whose VERSION
	// is lost (EPROTO) or whose module went away is dropped, so the next available() reopens it.
	void call(unsigned command, unsigned long request, void *argument, const std::string &what);
	// IRQ_BRIDGE with these flags and fds (the struct ends in a flexible array).
	void irq_bridge_call(const std::string &ntb, std::uint32_t slot, std::uint32_t flags, std::uint32_t start,
			     std::span<const int> fds, const std::string &what);

	DeviceOpener opener_;
	// The daemon's request loop (lender role) and its borrower threads (loop and workers) share one port.
	mutable std::recursive_mutex lock_; // protects everything below
	std::unique_ptr<DeviceFile> file_;
	std::string reason_ = "not opened yet";
	std::uint32_t kernel_version_ = 0;
	std::uint64_t features_ = 0;
	std::map<std::string, std::string> links_;
	std::map<std::string, std::unique_ptr<WindowMapping>> windows_; // by NTB
};

} // namespace farpass::agent
