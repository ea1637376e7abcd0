// The production transport: a connected UNIX stream socket, as the ntb-epf device uses.
#pragma once

#include "ntb_link.hpp"

#include <string>
#include <utility>

namespace ntb {

class SocketTransport final : public Transport {
public:
	// Both throw std::system_error naming the path.
	static SocketTransport connect(const std::string &path);
	// Listens on path (replacing a stale socket there) until one peer connects, at most timeout.
	static SocketTransport accept_one(const std::string &path, std::chrono::milliseconds timeout);

	SocketTransport(SocketTransport &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
	SocketTransport &operator=(SocketTransport &&) = delete;
	~SocketTransport() override;

	bool send(std::span<const std::uint8_t> bytes) override;
	std::optional<std::size_t> receive(std::span<std::uint8_t> buf,
					   std::chrono::milliseconds timeout) override;
	void shutdown_send() override;

private:
	explicit SocketTransport(int fd) : fd_(fd) {}
	int fd_;
};

} // namespace ntb
