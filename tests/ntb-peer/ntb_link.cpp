#include "ntb_link.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

// The header is copied to and from NtbEpfMsgHdr as is, which is the wire format only on a little-endian
// host; a big-endian port needs byte swaps here.
static_assert(std::endian::native == std::endian::little);

namespace ntb {

namespace {

constexpr std::array<std::pair<std::uint8_t, std::string_view>, 8> type_names{{
	{NTB_EPF_MSG_HELLO, "hello"},
	{NTB_EPF_MSG_LINK, "link"},
	{NTB_EPF_MSG_SPAD_SYNC, "spad-sync"},
	{NTB_EPF_MSG_SPAD_SET, "spad-set"},
	{NTB_EPF_MSG_MW_WRITE, "mw-write"},
	{NTB_EPF_MSG_MW_READ, "mw-read"},
	{NTB_EPF_MSG_READ_DONE, "read-done"},
	{NTB_EPF_MSG_DOORBELL, "doorbell"},
}};
// A type added to the patch needs a name here.
static_assert(type_names.size() == NTB_EPF_MSG__MAX - NTB_EPF_MSG_HELLO);

} // namespace

std::optional<std::string_view> type_name(std::uint8_t type)
{
	for (const auto &[value, name] : type_names)
		if (value == type)
			return name;
	return std::nullopt;
}

std::optional<std::uint8_t> type_from_name(std::string_view name)
{
	for (const auto &[value, n] : type_names)
		if (n == name)
			return value;
	return std::nullopt;
}

std::string to_hex(std::span<const std::uint8_t> bytes)
{
	static constexpr char digits[] = "0123456789abcdef";
	std::string s;
	s.reserve(bytes.size() * 2);
	for (std::uint8_t b : bytes) {
		s += digits[b >> 4];
		s += digits[b & 15];
	}
	return s;
}

std::string to_string(const Message &m)
{
	// Enough payload to recognise it; a 64 KiB window write would drown the log.
	constexpr std::size_t shown = 32;
	const auto name = type_name(m.type);
	char header[128];
	std::snprintf(header, sizeof header, " mw=%u status=%u len=%zu arg=0x%llx tag=0x%llx", m.mw,
		      m.status, m.payload.size(), static_cast<unsigned long long>(m.arg),
		      static_cast<unsigned long long>(m.tag));

	std::string s = (name ? std::string(*name) : "type " + std::to_string(m.type)) + header;
	if (!m.payload.empty()) {
		s += " data=" + to_hex(std::span(m.payload).first(std::min(shown, m.payload.size())));
		if (m.payload.size() > shown)
			s += "...";
	}
	return s;
}

std::vector<std::uint8_t> encode(const Message &m)
{
	if (m.payload.size() > max_payload)
		throw std::length_error("ntb-epf message payload of " + std::to_string(m.payload.size()) +
					" bytes, over the link's limit of " + std::to_string(max_payload));
	NtbEpfMsgHdr hdr{};
	hdr.type = m.type;
	hdr.mw = m.mw;
	hdr.status = m.status;
	hdr.len = static_cast<std::uint32_t>(m.payload.size());
	hdr.arg = m.arg;
	hdr.tag = m.tag;

	std::vector<std::uint8_t> bytes(header_size + m.payload.size());
	std::memcpy(bytes.data(), &hdr, header_size);
	std::ranges::copy(m.payload, bytes.begin() + header_size);
	return bytes;
}

std::string_view describe(Error e)
{
	switch (e) {
	case Error::payload_too_large:
		return "payload length over 64 KiB";
	case Error::unknown_type:
		return "unknown message type";
	case Error::truncated:
		return "end of stream inside a message";
	case Error::closed:
		return "end of stream";
	case Error::timed_out:
		return "timed out";
	}
	return "unknown error";
}

void Decoder::feed(std::span<const std::uint8_t> bytes)
{
	if (error_)
		return;
	// Drop what was returned already, so the buffer holds at most one message and a chunk.
	buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(start_));
	start_ = 0;
	buf_.insert(buf_.end(), bytes.begin(), bytes.end());
}

std::variant<NeedMore, Message, Error> Decoder::next()
{
	if (error_)
		return *error_;
	if (pending() < header_size)
		return NeedMore{};

	NtbEpfMsgHdr hdr;
	std::memcpy(&hdr, buf_.data() + start_, header_size);
	// Judged from the header alone: waiting for 4 GiB of payload is not an option.
	if (hdr.len > max_payload)
		return *(error_ = Error::payload_too_large);
	if (!type_name(hdr.type))
		return *(error_ = Error::unknown_type);
	if (pending() - header_size < hdr.len)
		return NeedMore{};

	const auto payload = buf_.begin() + static_cast<std::ptrdiff_t>(start_ + header_size);
	Message m{hdr.type, hdr.mw, hdr.status, hdr.arg, hdr.tag, {payload, payload + hdr.len}};
	start_ += header_size + hdr.len;
	return m;
}

std::variant<Message, Error> Link::receive(std::chrono::milliseconds timeout)
{
	using clock = std::chrono::steady_clock;
	const auto deadline = clock::now() + timeout;
	std::array<std::uint8_t, header_size + max_payload> chunk;

	for (;;) {
		auto next = decoder_.next();
		if (auto *m = std::get_if<Message>(&next))
			return std::move(*m);
		if (auto *e = std::get_if<Error>(&next))
			return *e;

		// Past the deadline, bytes already there are still taken: only silence is a timeout.
		const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now());
		const auto n = transport_.receive(chunk, std::max(left, std::chrono::milliseconds(0)));
		if (!n)
			return Error::timed_out;
		if (*n == 0)
			return decoder_.pending() ? Error::truncated : Error::closed;
		decoder_.feed(std::span(chunk).first(*n));
	}
}

} // namespace ntb
