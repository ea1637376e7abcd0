// One session per peer agent, reused for every call to it (docs/agent-protocol.md, "Peer sessions"):
// connected (TLS handshake included: the connector's job) on the first call, hello once, then request
// after request. Every call is bounded by one deadline (connect, hello and the
// exchange together), shorter than the kernel's upcall timeout, so an upcall is always answered by us.
// Safe from several threads: calls to different peers run at once, calls to one peer one at a time
// (each waits for the one before, on the one session).
#pragma once

#include "client.hpp"
#include "clock.hpp"
#include "log.hpp"
#include "methods.hpp"
#include "transport.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace farpass::agent {

// Opens a stream to a peer within timeout_ms, authenticated as peer.host (in the daemon: TCP + TLS);
// throws AgentError (peer_unreachable, timed_out, authentication_failed).
using PeerConnector = std::function<std::unique_ptr<Transport>(const PeerAddress &peer, int timeout_ms)>;

class PeerSessions {
public:
	static constexpr std::int64_t first_backoff_ms = 250;
	static constexpr std::int64_t max_backoff_ms = 2000;

	PeerSessions(PeerConnector connect, const Clock &clock, std::string local_host, int call_timeout_ms, LogSink log);

	// The result of method on peer, or AgentError: the peer's error reply (the session stays open),
	// timed_out (ETIMEDOUT) past call_timeout_ms, peer_unreachable (EHOSTUNREACH or the socket's errno)
	// when the peer cannot be reached or is in its reconnect backoff. Any error other than an error reply
	// closes the session; the next call connects again.
	nlohmann::json call(const PeerAddress &peer, std::string_view method, const nlohmann::json &params);
	// The same within timeout_ms, if that is shorter (an upcall's time left).
	nlohmann::json call(const PeerAddress &peer, std::string_view method, const nlohmann::json &params,
			    int timeout_ms);

	// Forgets the session to host (if any).
	void close(const std::string &host);
	bool connected(const std::string &host) const;
	int call_timeout_ms() const { return call_timeout_ms_; }

private:
	struct Peer {
		std::mutex lock; // protects the rest; held for a whole call
		std::unique_ptr<Transport> transport;
		std::unique_ptr<RpcClient> client;
		std::int64_t backoff_ms = 0;  // 0: the last connect succeeded (or none failed yet)
		std::int64_t retry_at_ms = 0; // no connect attempt before this (Clock::monotonic_ms)
		std::string last_error;
	};

	// host's state, made on first use; a call holds it even if close() forgets it meanwhile.
	std::shared_ptr<Peer> state_of(const std::string &host);
	void open(const PeerAddress &peer, Peer &state, int timeout_ms);
	void drop(const PeerAddress &peer, Peer &state, const std::string &why);

	PeerConnector connect_;
	const Clock &clock_;
	std::string local_host_;
	int call_timeout_ms_;
	LogSink log_;
	mutable std::mutex lock_; // protects peers_ (the map, not the Peers in it)
	std::map<std::string, std::shared_ptr<Peer>> peers_; // by host
};

} // namespace farpass::agent
