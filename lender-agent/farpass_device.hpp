// The real KernelPort: /dev/farpass (include/uapi/farpass.h, docs/uapi.md).
//
// Rules kept here: VERSION is the first ioctl on every open file (and its result decides whether the
// port is usable and whether upcalls are served); every struct is zero-initialised with argsz =
// sizeof and flags = 0; output flags (*_F_PENDING) are read back; errno values become AgentErrors that
// name the ioctl, the device id and what the errno means for that ioctl.
//
// The file is behind a seam (DeviceFile) so unit tests drive the port against a fake that behaves
// like the kernel (tests/unit/test_agent_kernel.cpp).
#pragma once

#include "kernel_port.hpp"

#include <functional>
#include <memory>
#include <string>

namespace farpass::agent {

// One open /dev/farpass.
class DeviceFile {
public:
	virtual ~DeviceFile() = default;
	// ioctl(2): 0, or the errno of the failure.
	virtual int ioctl(unsigned long request, void *argument) = 0;
	// For poll(2).
	virtual int fd() const = 0;
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
	explicit FarpassKernelPort(DeviceOpener opener);

	bool available() override;
	std::string unavailable_reason() const override { return reason_; }
	bool announce(const RemoteDevice &device) override;
	bool withdraw(std::uint32_t device_id) override;
	int upcall_fd() const override;
	std::optional<Upcall> next_upcall() override;
	void complete(std::uint64_t seq, const UpcallReply &reply) override;
	std::span<std::byte> outbound_window(const std::string &borrower_host) override;

	std::uint32_t kernel_version() const { return kernel_version_; }
	std::uint64_t features() const { return features_; }

private:
	DeviceFile &file();
	// Runs the ioctl; on failure throws AgentError(system_error, errno) naming it. A file whose VERSION
	// is lost (EPROTO) or whose module went away is dropped, so the next available() reopens it.
	void call(unsigned command, unsigned long request, void *argument, const std::string &what);

	DeviceOpener opener_;
	std::unique_ptr<DeviceFile> file_;
	std::string reason_ = "not opened yet";
	std::uint32_t kernel_version_ = 0;
	std::uint64_t features_ = 0;
};

} // namespace farpass::agent
