// An owned file descriptor, closed on destruction (RAII).
#pragma once

#include <unistd.h>

#include <utility>

namespace farpass::agent {

class Fd {
public:
	explicit Fd(int fd = -1) : fd_(fd) {}
	~Fd()
	{
		if (fd_ >= 0)
			::close(fd_);
	}
	Fd(Fd &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
	Fd &operator=(Fd &&) = delete;
	Fd(const Fd &) = delete;
	Fd &operator=(const Fd &) = delete;
	int get() const { return fd_; }

private:
	int fd_;
};

} // namespace farpass::agent
