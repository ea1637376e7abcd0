// The ntb-epf link protocol (docs/ntb-epf.rst, "Link protocol"): messages, their encoding, an
// incremental decoder, and a link that runs them over a byte-stream transport.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

// Generated at build time from the QEMU patch, so this side cannot drift from the device's layout.
#define QEMU_PACKED __attribute__((packed))
#include "ntb_epf.h"
#undef QEMU_PACKED

// The layout the spec documents; a patch that changes it must change the spec and this peer too.
static_assert(sizeof(NtbEpfMsgHdr) == 24);
static_assert(offsetof(NtbEpfMsgHdr, type) == 0);
static_assert(offsetof(NtbEpfMsgHdr, mw) == 1);
static_assert(offsetof(NtbEpfMsgHdr, status) == 2);
static_assert(offsetof(NtbEpfMsgHdr, len) == 4);
static_assert(offsetof(NtbEpfMsgHdr, arg) == 8);
static_assert(offsetof(NtbEpfMsgHdr, tag) == 16);

namespace ntb {

inline constexpr std::size_t header_size = sizeof(NtbEpfMsgHdr);
inline constexpr std::uint32_t max_payload = NTB_EPF_LINK_MAX_PAYLOAD;

// HELLO's arg: the magic and a protocol version (the device accepts only NTB_EPF_LINK_VERSION).
constexpr std::uint64_t hello_arg(std::uint32_t version = NTB_EPF_LINK_VERSION)
{
	return std::uint64_t{NTB_EPF_LINK_MAGIC} << 32 | version;
}

// One message; the header's len is the payload's size. type is a byte, not an NtbEpfMsgType, so that a
// test peer can send types the device does not know.
struct Message {
	std::uint8_t type = 0;
	std::uint8_t mw = 0;
	std::uint16_t status = 0;
	std::uint64_t arg = 0;
	std::uint64_t tag = 0;
	std::vector<std::uint8_t> payload{};

	bool operator==(const Message &) const = default;
};

// "hello", "spad-sync", ... for NTB_EPF_MSG_*; nullopt for other values.
std::optional<std::string_view> type_name(std::uint8_t type);
std::optional<std::uint8_t> type_from_name(std::string_view name);
// One line for logs: type, header fields, and the start of the payload in hex.
std::string to_string(const Message &m);
std::string to_hex(std::span<const std::uint8_t> bytes);

// Header and payload as sent. Throws std::length_error for a payload over max_payload, which no
// receiver accepts (send such a header as raw bytes to test that).
std::vector<std::uint8_t> encode(const Message &m);

enum class Error : std::uint8_t {
	payload_too_large, // a header's len over max_payload
	unknown_type,      // a header's type outside NTB_EPF_MSG_*
	truncated,         // the stream ended inside a message
	closed,            // the stream ended between messages
	timed_out,         // no complete message in time
};
std::string_view describe(Error e);

struct NeedMore {
	bool operator==(const NeedMore &) const = default;
};

// Reassembles messages from byte chunks of any size. A malformed header is final: the stream has no
// resynchronisation point, so every later next() repeats the error.
class Decoder {
public:
	void feed(std::span<const std::uint8_t> bytes);
	std::variant<NeedMore, Message, Error> next();
	// Bytes held of a message not yet complete.
	std::size_t pending() const { return buf_.size() - start_; }

private:
	std::vector<std::uint8_t> buf_;
	std::size_t start_ = 0; // first byte not yet returned in a message
	std::optional<Error> error_;
};

// The seam between the protocol and the bytes: a socket in the tool, an in-memory pipe in unit tests.
class Transport {
public:
	virtual ~Transport() = default;
	// Sends every byte; false once the other end is gone.
	virtual bool send(std::span<const std::uint8_t> bytes) = 0;
	// Up to buf.size() bytes, waiting at most timeout: how many, 0 at the end of the stream, nullopt if
	// none arrived in time.
	virtual std::optional<std::size_t> receive(std::span<std::uint8_t> buf,
						   std::chrono::milliseconds timeout) = 0;
	// No more sending: the other end reads the end of the stream, and may still answer.
	virtual void shutdown_send() = 0;
};

class Link {
public:
	explicit Link(Transport &transport) : transport_(transport) {}
	bool send(const Message &m) { return transport_.send(encode(m)); }
	// The next message, or why none came within timeout.
	std::variant<Message, Error> receive(std::chrono::milliseconds timeout);

private:
	Transport &transport_;
	Decoder decoder_;
};

} // namespace ntb
