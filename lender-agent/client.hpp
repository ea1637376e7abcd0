// The calling side of the protocol (an agent calling a peer, farpassctl calling its agent).
#pragma once

#include "framing.hpp"
#include "transport.hpp"

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace farpass::agent {

class RpcClient {
public:
	// transport: to a peer, a TlsTransport (its certificate is what the peer checks our hello's host
	// against); to the local agent, the CLI socket.
	RpcClient(Transport &transport, std::string local_host);

	// Negotiates the version; returns the other side's hello result.
	nlohmann::json hello();
	// Returns the result, or throws AgentError carrying the error the other side replied with.
	nlohmann::json call(std::string_view method, const nlohmann::json &params);
	// False once an exchange did not end with a well-formed reply to it (I/O error, timeout, protocol or
	// TLS error): the stream may be out of step,
	// so the connection must not be used again. An error *reply* leaves it usable.
	bool usable() const { return usable_; }

private:
	nlohmann::json exchange(std::string_view method, const nlohmann::json &params);

	Transport &transport_;
	std::string local_host_;
	FrameDecoder decoder_;
	std::uint64_t next_id_ = 0;
	bool usable_ = true;
};

} // namespace farpass::agent
