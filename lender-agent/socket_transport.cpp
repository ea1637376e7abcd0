#include "errors.hpp"
#include "transport.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace farpass::agent {

SocketTransport::SocketTransport(int fd, int timeout_ms) : fd_(fd), timeout_ms_(timeout_ms) {}

SocketTransport::~SocketTransport()
{
	if (fd_ >= 0)
		::close(fd_);
}

namespace {

// Non-blocking TCP connect of @fd (opened SOCK_NONBLOCK) bounded by @timeout_ms, then back to blocking
// mode: a dead host (no ARP answer, SYNs dropped) must not hold the caller (the agent's one loop) for
// the kernel's minutes of SYN retries. Returns 0 or the errno (ETIMEDOUT past the deadline).
int connect_within(int fd, const sockaddr *address, socklen_t length, int timeout_ms)
{
	int error = 0;
	if (::connect(fd, address, length) != 0) {
		error = errno;
		if (error == EINPROGRESS) {
			pollfd entry{fd, POLLOUT, 0};
			int rc;
			while ((rc = ::poll(&entry, 1, timeout_ms)) < 0 && errno == EINTR) {
			}
			socklen_t size = sizeof(error);
			if (rc == 0)
				error = ETIMEDOUT;
			else if (rc < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0)
				error = errno;
		}
	}
	if (error == 0 && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
		error = errno;
	return error;
}

} // namespace

SocketTransport SocketTransport::connect_tcp(const std::string &address, int timeout_ms)
{
	const auto colon = address.rfind(':');
	if (colon == std::string::npos)
		throw AgentError(ErrorCode::invalid_params, "peer address \"" + address + "\" is not host:port");
	const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
	addrinfo hints{};
	hints.ai_socktype = SOCK_STREAM;
	addrinfo *found = nullptr;
	if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
		throw AgentError(ErrorCode::peer_unreachable, EHOSTUNREACH,
				 "resolving " + address + ": " + ::gai_strerror(rc));
	int error = EHOSTUNREACH;
	for (const addrinfo *candidate = found; candidate; candidate = candidate->ai_next) {
		const int fd = ::socket(candidate->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			continue;
		error = connect_within(fd, candidate->ai_addr, candidate->ai_addrlen, timeout_ms);
		if (error == 0) {
			::freeaddrinfo(found);
			return SocketTransport(fd, timeout_ms);
		}
		::close(fd);
	}
	::freeaddrinfo(found);
	throw AgentError(ErrorCode::peer_unreachable, error, "connecting to " + address + ": " + std::strerror(error));
}

SocketTransport SocketTransport::connect_unix(const std::string &path, int timeout_ms)
{
	sockaddr_un address{};
	address.sun_family = AF_UNIX;
	if (path.size() >= sizeof(address.sun_path))
		throw AgentError(ErrorCode::invalid_params, "socket path too long: " + path);
	std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
	const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		throw_system_error("socket");
	// A Unix connect waits while the agent's listen queue is full (an agent that stopped accepting),
	// for at most the send timeout; a non-blocking one would fail at once instead of waiting.
	timeval limit{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
	const timeval none{};
	int error = ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit)) == 0 &&
				    ::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0 &&
				    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none)) == 0
			    ? 0
			    : errno;
	if (error == EAGAIN || error == EINPROGRESS)
		error = ETIMEDOUT;
	if (error) {
		::close(fd);
		throw AgentError(ErrorCode::peer_unreachable, error,
				 "connecting to " + path + ": " + std::strerror(error));
	}
	return SocketTransport(fd, timeout_ms);
}

void SocketTransport::set_deadline(int timeout_ms)
{
	deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
}

void SocketTransport::wait_for(short events, const char *what)
{
	using namespace std::chrono;
	pollfd entry{fd_, events, 0};
	int rc;
	for (;;) {
		int wait_ms = timeout_ms_;
		if (deadline_) {
			const auto left = duration_cast<milliseconds>(*deadline_ - steady_clock::now()).count();
			wait_ms = static_cast<int>(std::clamp<long long>(left, 0, timeout_ms_));
		}
		if ((rc = ::poll(&entry, 1, wait_ms)) >= 0 || errno != EINTR)
			break;
	}
	if (rc < 0)
		throw_system_error(what);
	if (rc == 0)
		throw AgentError(ErrorCode::timed_out, std::string(what) + ": no answer in time");
}

void SocketTransport::write(std::string_view bytes)
{
	while (!bytes.empty()) {
		wait_for(POLLOUT, "sending");
		const ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
		if (sent < 0 && errno == EINTR)
			continue;
		if (sent < 0)
			throw AgentError(ErrorCode::peer_unreachable, errno,
					 std::string("sending: ") + std::strerror(errno));
		bytes.remove_prefix(static_cast<std::size_t>(sent));
	}
}

std::string SocketTransport::read_some()
{
	char buffer[16384];
	for (;;) {
		wait_for(POLLIN, "receiving");
		const ssize_t received = ::recv(fd_, buffer, sizeof(buffer), 0);
		if (received < 0 && errno == EINTR)
			continue;
		if (received < 0)
			throw AgentError(ErrorCode::peer_unreachable, errno,
					 std::string("receiving: ") + std::strerror(errno));
		return std::string(buffer, static_cast<std::size_t>(received));
	}
}

} // namespace farpass::agent
