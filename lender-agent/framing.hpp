// Stream framing: every message is a 4-byte big-endian payload length followed by the payload.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace farpass::agent {

// Hard limit on one payload; a length above it is rejected before any of the payload is buffered.
inline constexpr std::size_t max_frame_payload = 1 << 20;
// Until hello is done (and on a peer connection, the peer authenticated) the only message is hello, a
// few hundred bytes: an unauthenticated sender cannot make the agent buffer a megabyte per connection.
inline constexpr std::size_t max_hello_payload = 4096;
inline constexpr std::size_t frame_header_size = 4;

// Throws AgentError(message_too_large) for payloads above max_frame_payload.
std::string encode_frame(std::string_view payload);

// Reassembles frames from a byte stream that arrives in arbitrary pieces.
class FrameDecoder {
public:
	void feed(std::string_view bytes) { buffer_.append(bytes); }

	// The next complete payload, or nothing until more bytes arrive. Throws
	// AgentError(message_too_large) as soon as a header announces a payload above `limit`.
	std::optional<std::string> next(std::size_t limit = max_frame_payload);

	// True while bytes of an unfinished frame are buffered: end of stream now means truncation.
	bool mid_frame() const { return !buffer_.empty(); }

private:
	std::string buffer_;
};

} // namespace farpass::agent
