// One connection on the agent's side, independent of any I/O: bytes in, bytes out.
//
// A peer connection is TLS (tls.hpp): the peer's certificate names its host before any message is read.
// The first message must be hello with this agent's protocol version and, from a peer, the host its
// certificate names. Errors of a request are replied to and the session goes on; errors that leave the
// stream unusable (oversized frame, failed TLS handshake, failed hello) close it.
#pragma once

#include "dispatcher.hpp"
#include "framing.hpp"
#include "log.hpp"
#include "tls.hpp"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <string_view>

namespace farpass::agent {

struct SessionConfig {
	Principal principal = Principal::local_admin;
	std::string local_host;
	std::string peer_label; // for log lines, e.g. "10.0.0.2:41234" or "cli pid 1234"
	// A peer session authenticates its peer with TLS under this context. Unit tests and the fuzzer, which
	// bypass TLS, give instead the host the peer has already proved (one of the two is required).
	const TlsContext *tls = nullptr;
	std::string authenticated_host = {};
	// Whoever serves the session runs the off-loop part of a request (take_work(), resume()); otherwise
	// the session runs it in receive().
	bool defer = false;
};

class Session {
public:
	Session(const Dispatcher &dispatcher, SessionConfig config, LogSink log);

	// Bytes received from the connection; returns the bytes to send back.
	std::string receive(std::string_view bytes);
	// The other side closed its end.
	void end_of_stream();

	// Closes the session for @why (logged), e.g. a deadline the server enforces.
	void cut(const std::string &why);

	// With SessionConfig::defer: the off-loop part of the request just received, taken once (empty if
	// none). Until resume() gets its reply no further request is handled (replies stay in order, and a
	// connection has at most one such request under way).
	std::function<nlohmann::json()> take_work() { return std::exchange(work_, nullptr); }
	// The reply the taken work made; returns the bytes to send: it, then the replies to requests
	// received meanwhile.
	std::string resume(const nlohmann::json &reply);
	bool waiting() const { return waiting_; }

	bool closed() const { return closed_; }
	bool greeted() const { return greeted_; }
	// True while an unfinished message (or TLS record) is buffered (a stalled sender is cut off).
	bool mid_message() const { return decoder_.mid_frame() || (tls_ && tls_->mid_record()); }

private:
	std::string receive_plaintext(std::string_view bytes);
	std::string handle_payload(std::string_view payload);
	std::string reply(const nlohmann::json &message);
	std::string handshake(std::string_view body);
	std::string send(const nlohmann::json &message);
	void close(LogLevel level, const std::string &why);

	const Dispatcher &dispatcher_;
	SessionConfig config_;
	LogSink log_;
	FrameDecoder decoder_;
	std::unique_ptr<TlsChannel> tls_;
	CallContext context_;
	bool greeted_ = false;
	bool closed_ = false;
	std::function<nlohmann::json()> work_;
	bool waiting_ = false;
};

} // namespace farpass::agent
