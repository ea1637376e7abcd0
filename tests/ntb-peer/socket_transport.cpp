#include "socket_transport.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace ntb {

namespace {

[[noreturn]] void fail(const std::string &what, const std::string &path)
{
	throw std::system_error(errno, std::generic_category(), what + " " + path);
}

// An fd closed on every exit path, until release().
class Fd {
public:
	explicit Fd(int fd) : fd_(fd) {}
	Fd(Fd &&other) noexcept : fd_(other.release()) {}
	Fd &operator=(Fd &&) = delete;
	~Fd()
	{
		if (fd_ >= 0)
			close(fd_);
	}
	int get() const { return fd_; }
	int release() { return std::exchange(fd_, -1); }

private:
	int fd_;
};

Fd unix_socket(const std::string &path, sockaddr_un &addr)
{
	addr = sockaddr_un{};
	addr.sun_family = AF_UNIX;
	if (path.size() >= sizeof addr.sun_path) {
		errno = ENAMETOOLONG;
		fail("socket path too long:", path);
	}
	std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
	Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
	if (fd.get() < 0)
		fail("cannot create a socket for", path);
	return fd;
}

// poll() for events, restarting after signals; false on timeout.
bool wait_for(int fd, short events, std::chrono::milliseconds timeout)
{
	using clock = std::chrono::steady_clock;
	const auto deadline = clock::now() + timeout;
	for (;;) {
		const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now());
		pollfd pfd{fd, events, 0};
		const int n = poll(&pfd, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
		if (n > 0)
			return true;
		if (n == 0)
			return false;
		if (errno != EINTR)
			throw std::system_error(errno, std::generic_category(), "poll");
	}
}

} // namespace

SocketTransport SocketTransport::connect(const std::string &path)
{
	sockaddr_un addr;
	Fd fd = unix_socket(path, addr);
	if (::connect(fd.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof addr) < 0)
		fail("cannot connect to", path);
	return SocketTransport(fd.release());
}

SocketTransport SocketTransport::accept_one(const std::string &path, std::chrono::milliseconds timeout)
{
	sockaddr_un addr;
	Fd listener = unix_socket(path, addr);
	unlink(path.c_str());
	if (bind(listener.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof addr) < 0 ||
	    listen(listener.get(), 1) < 0)
		fail("cannot listen on", path);
	// One peer only: later connections find no socket, as when the peer is away.
	struct Unlink {
		const std::string &path;
		~Unlink() { unlink(path.c_str()); }
	} unlink_on_return{path};

	if (!wait_for(listener.get(), POLLIN, timeout)) {
		errno = ETIMEDOUT;
		fail("no peer connected to", path);
	}
	const int fd = accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
	if (fd < 0)
		fail("cannot accept on", path);
	return SocketTransport(fd);
}

SocketTransport::~SocketTransport()
{
	if (fd_ >= 0)
		close(fd_);
}

bool SocketTransport::send(std::span<const std::uint8_t> bytes)
{
	while (!bytes.empty()) {
		// MSG_NOSIGNAL: a peer that hung up is an answer (false), not a reason to die of SIGPIPE.
		const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return false;
		bytes = bytes.subspan(static_cast<std::size_t>(n));
	}
	return true;
}

std::optional<std::size_t> SocketTransport::receive(std::span<std::uint8_t> buf,
						    std::chrono::milliseconds timeout)
{
	if (!wait_for(fd_, POLLIN, timeout))
		return std::nullopt;
	for (;;) {
		const ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
		if (n >= 0)
			return static_cast<std::size_t>(n);
		// A reset (the peer closed with our bytes unread), or any other error, ends the stream.
		if (errno != EINTR)
			return 0;
	}
}

void SocketTransport::shutdown_send()
{
	shutdown(fd_, SHUT_WR);
}

} // namespace ntb
