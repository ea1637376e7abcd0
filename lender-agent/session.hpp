// One connection on the agent's side, independent of any I/O: bytes in, bytes out.
//
// The first message must be hello with this agent's protocol version; a peer connection is authenticated
// from that hello on (auth.hpp). Errors of a request are replied to and the session goes on; errors that
// leave the stream unusable (oversized frame, failed authentication, failed hello) close it.
#pragma once

#include "auth.hpp"
#include "dispatcher.hpp"
#include "framing.hpp"
#include "log.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace farpass::agent {

struct SessionConfig {
	Principal principal = Principal::local_admin;
	std::string local_host;
	std::string peer_label;		    // for log lines, e.g. "10.0.0.2:41234" or "cli pid 1234"
	const ClusterKey *key = nullptr; // required for peer sessions
};

class Session {
public:
	Session(const Dispatcher &dispatcher, SessionConfig config, LogSink log);

	// Bytes received from the connection; returns the bytes to send back.
	std::string receive(std::string_view bytes);
	// The other side closed its end.
	void end_of_stream();

	bool closed() const { return closed_; }
	// True while an unfinished message is buffered (a stalled sender is cut off by the daemon).
	bool mid_message() const { return decoder_.mid_frame(); }

private:
	std::string handle_payload(std::string_view payload);
	std::string handshake(std::string_view body);
	std::string send(const nlohmann::json &message);
	void close(LogLevel level, const std::string &why);

	const Dispatcher &dispatcher_;
	SessionConfig config_;
	LogSink log_;
	FrameDecoder decoder_;
	std::optional<SessionAuth> auth_;
	CallContext context_;
	bool greeted_ = false;
	bool closed_ = false;
};

} // namespace farpass::agent
