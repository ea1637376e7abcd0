// A reliable ordered byte stream to another agent or to the local agent (TCP or Unix socket in
// production, an in-memory pipe in tests).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace farpass::agent {

class Transport {
public:
	virtual ~Transport() = default;
	// Throws AgentError on failure.
	virtual void write(std::string_view bytes) = 0;
	// Some bytes, or an empty string at end of stream. Throws AgentError(timed_out) when nothing
	// arrives in time, so a silent peer never wedges the caller.
	virtual std::string read_some() = 0;
	// Bounds all I/O from now on to timeout_ms from now in total (not per read or write): past it, write
	// and read_some throw AgentError(timed_out). A transport that cannot block may ignore it.
	virtual void set_deadline(int timeout_ms) { (void)timeout_ms; }
};

class SocketTransport final : public Transport {
public:
	// Takes ownership of a connected stream socket.
	SocketTransport(int fd, int timeout_ms);
	~SocketTransport() override;
	SocketTransport(const SocketTransport &) = delete;
	SocketTransport &operator=(const SocketTransport &) = delete;

	// "host:port"; throws AgentError(peer_unreachable).
	static SocketTransport connect_tcp(const std::string &address, int timeout_ms);
	static SocketTransport connect_unix(const std::string &path, int timeout_ms);

	void write(std::string_view bytes) override;
	std::string read_some() override;
	void set_deadline(int timeout_ms) override;

	SocketTransport(SocketTransport &&other) noexcept
		: fd_(other.fd_), timeout_ms_(other.timeout_ms_), deadline_(other.deadline_)
	{
		other.fd_ = -1;
	}

private:
	void wait_for(short events, const char *what);

	int fd_;
	int timeout_ms_; // per wait, when no deadline is set
	std::optional<std::chrono::steady_clock::time_point> deadline_;
};

} // namespace farpass::agent
