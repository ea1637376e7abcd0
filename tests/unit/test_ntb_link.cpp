// The ntb-epf link protocol library (tests/ntb-peer): encoder, stream decoder, and the link over a
// transport, here an in-memory pipe.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "ntb_link.hpp"

#include <cerrno>
#include <cstring>
#include <deque>
#include <random>
#include <set>

using ntb::Error;
using ntb::Message;
using ntb::NeedMore;
using Bytes = std::vector<std::uint8_t>;
using Decoded = std::variant<NeedMore, Message, Error>;
using Received = std::variant<Message, Error>;

namespace doctest {
template <> struct StringMaker<Decoded> {
	static String convert(const Decoded &d)
	{
		if (const auto *m = std::get_if<Message>(&d))
			return ntb::to_string(*m).c_str();
		if (const auto *e = std::get_if<Error>(&d))
			return std::string(ntb::describe(*e)).c_str();
		return "need more";
	}
};
template <> struct StringMaker<Received> {
	static String convert(const Received &r)
	{
		return std::visit([](const auto &v) { return StringMaker<Decoded>::convert(Decoded{v}); }, r);
	}
};
} // namespace doctest

namespace {

// Bytes that differ from their neighbours, so that a shifted or reordered copy does not compare equal.
Bytes pattern(std::size_t n)
{
	Bytes b(n);
	for (std::size_t i = 0; i < n; i++)
		b[i] = static_cast<std::uint8_t>(i * 131 % 251);
	return b;
}

// Every message type, with fields and payloads as the device sends them, extremes included.
std::vector<Message> one_of_each()
{
	return {
		{.type = NTB_EPF_MSG_HELLO, .arg = ntb::hello_arg()},
		{.type = NTB_EPF_MSG_LINK, .arg = 1},
		{.type = NTB_EPF_MSG_SPAD_SYNC, .payload = pattern(NTB_EPF_SPAD_COUNT_VALUE * 4)},
		{.type = NTB_EPF_MSG_SPAD_SET, .arg = 63, .payload = {0x78, 0x56, 0x34, 0x12}},
		{.type = NTB_EPF_MSG_MW_WRITE, .mw = 1, .arg = 0x3fff0000, .payload = pattern(ntb::max_payload)},
		{.type = NTB_EPF_MSG_MW_READ, .mw = 1, .arg = 0x1000, .tag = 42, .payload = {0, 0, 1, 0}},
		{.type = NTB_EPF_MSG_READ_DONE, .status = EFAULT, .tag = 42},
		{.type = NTB_EPF_MSG_READ_DONE, .tag = ~std::uint64_t{0}, .payload = pattern(4096)},
		{.type = NTB_EPF_MSG_DOORBELL, .arg = NTB_EPF_MSIX_VECTORS - 1},
	};
}

Bytes encode_all(const std::vector<Message> &messages)
{
	Bytes stream;
	for (const Message &m : messages) {
		const Bytes bytes = ntb::encode(m);
		stream.insert(stream.end(), bytes.begin(), bytes.end());
	}
	return stream;
}

// A header as encoded, then with its len field overwritten: what the encoder refuses to produce.
Bytes header_with_len(std::uint32_t len)
{
	Bytes bytes = ntb::encode({.type = NTB_EPF_MSG_MW_WRITE});
	std::memcpy(bytes.data() + offsetof(NtbEpfMsgHdr, len), &len, sizeof len);
	return bytes;
}

// One direction of an in-memory byte stream.
struct Direction {
	std::deque<std::uint8_t> bytes;
	bool ended = false;
};

// One end of an in-memory stream. It hands out at most `chunk` bytes per receive, to exercise
// reassembly; single-threaded, so a receive with nothing queued times out at once.
class PipeEnd final : public ntb::Transport {
public:
	PipeEnd(Direction &in, Direction &out, std::size_t chunk) : in_(in), out_(out), chunk_(chunk) {}

	bool send(std::span<const std::uint8_t> bytes) override
	{
		if (out_.ended)
			return false;
		out_.bytes.insert(out_.bytes.end(), bytes.begin(), bytes.end());
		return true;
	}
	std::optional<std::size_t> receive(std::span<std::uint8_t> buf, std::chrono::milliseconds) override
	{
		if (in_.bytes.empty())
			return in_.ended ? std::optional<std::size_t>(0) : std::nullopt;
		const std::size_t n = std::min({chunk_, buf.size(), in_.bytes.size()});
		std::copy_n(in_.bytes.begin(), n, buf.begin());
		in_.bytes.erase(in_.bytes.begin(), in_.bytes.begin() + static_cast<std::ptrdiff_t>(n));
		return n;
	}
	void shutdown_send() override { out_.ended = true; }

private:
	Direction &in_, &out_;
	std::size_t chunk_;
};

struct Pipe {
	explicit Pipe(std::size_t chunk = 65536) : a(b_to_a, a_to_b, chunk), b(a_to_b, b_to_a, chunk) {}
	Direction a_to_b, b_to_a;
	PipeEnd a, b;
};

constexpr std::chrono::milliseconds no_wait{0};

} // namespace

TEST_CASE("the test messages cover every type the generated header defines")
{
	std::set<std::uint8_t> types;
	for (const Message &m : one_of_each())
		types.insert(m.type);
	for (std::uint8_t t = NTB_EPF_MSG_HELLO; t < NTB_EPF_MSG__MAX; t++) {
		CAPTURE(t);
		CHECK(types.count(t) == 1);
		CHECK(ntb::type_from_name(*ntb::type_name(t)) == t);
	}
}

TEST_CASE("every message type comes out of the decoder as it went into the encoder")
{
	for (const Message &m : one_of_each()) {
		CAPTURE(ntb::to_string(m));
		ntb::Decoder decoder;
		decoder.feed(ntb::encode(m));
		CHECK(decoder.next() == Decoded{m});
		CHECK(decoder.next() == Decoded{NeedMore{}});
		CHECK(decoder.pending() == 0);
	}
}

TEST_CASE("a decoder fed one byte at a time returns each message when its last byte arrives, not before")
{
	const std::vector<Message> messages = one_of_each();
	const Bytes stream = encode_all(messages);
	ntb::Decoder decoder;
	std::size_t next = 0, message_end = ntb::encode(messages[0]).size();

	for (std::size_t i = 0; i < stream.size(); i++) {
		decoder.feed(std::span(stream).subspan(i, 1));
		if (i + 1 < message_end) {
			REQUIRE(decoder.next() == Decoded{NeedMore{}});
			continue;
		}
		CAPTURE(i);
		REQUIRE(decoder.next() == Decoded{messages[next]});
		REQUIRE(decoder.next() == Decoded{NeedMore{}});
		if (++next < messages.size())
			message_end += ntb::encode(messages[next]).size();
	}
	CHECK(next == messages.size());
}

TEST_CASE("messages cross a transport whatever the size of the chunks it delivers")
{
	const std::vector<Message> messages = one_of_each();
	for (std::size_t chunk : {1, 3, 23, 24, 25, 4096, 65560, 1 << 20}) {
		CAPTURE(chunk);
		Pipe pipe(chunk);
		ntb::Link sender(pipe.a), receiver(pipe.b);
		for (const Message &m : messages)
			REQUIRE(sender.send(m));
		pipe.a.shutdown_send();

		for (const Message &m : messages)
			CHECK(receiver.receive(no_wait) == Received{m});
		CHECK(receiver.receive(no_wait) == Received{Error::closed});
	}
}

TEST_CASE("a payload length over 64 KiB is rejected from the header alone, for good")
{
	ntb::Decoder decoder;
	decoder.feed(header_with_len(ntb::max_payload + 1));
	CHECK(decoder.next() == Decoded{Error::payload_too_large});

	// No resynchronisation: what follows the bad header is not taken for messages.
	decoder.feed(ntb::encode({.type = NTB_EPF_MSG_LINK}));
	CHECK(decoder.next() == Decoded{Error::payload_too_large});
}

TEST_CASE("the largest length in a header is 64 KiB, and the decoder waits for its payload")
{
	for (std::uint32_t len : {ntb::max_payload, ntb::max_payload + 1, 0xffffffffu}) {
		CAPTURE(len);
		ntb::Decoder decoder;
		decoder.feed(header_with_len(len));
		if (len <= ntb::max_payload)
			CHECK(decoder.next() == Decoded{NeedMore{}});
		else
			CHECK(decoder.next() == Decoded{Error::payload_too_large});
	}
}

TEST_CASE("an unknown message type is reported, though the encoder sends it for hostile tests")
{
	for (std::uint8_t type : {0, int{NTB_EPF_MSG__MAX}, 0xff}) {
		CAPTURE(type);
		ntb::Decoder decoder;
		decoder.feed(ntb::encode({.type = type}));
		CHECK(decoder.next() == Decoded{Error::unknown_type});
	}
}

TEST_CASE("the encoder refuses a payload the link cannot carry")
{
	CHECK_THROWS_AS(ntb::encode({.type = NTB_EPF_MSG_MW_WRITE, .payload = Bytes(ntb::max_payload + 1)}),
			std::length_error);
	CHECK(ntb::encode({.type = NTB_EPF_MSG_MW_WRITE, .payload = Bytes(ntb::max_payload)}).size() ==
	      ntb::header_size + ntb::max_payload);
}

TEST_CASE("the header is laid out as the spec and the generated header say")
{
	const Message m{.type = 0x11, .mw = 0x22, .status = 0x3344, .arg = 0x0102030405060708,
			.tag = 0x1112131415161718, .payload = {0xee}};
	// docs/ntb-epf.rst: type, mw, le16 status, le32 len, le64 arg, le64 tag, then the payload.
	const Bytes spec{0x11, 0x22, 0x44, 0x33, 0x01, 0x00, 0x00, 0x00, 0x08, 0x07, 0x06, 0x05, 0x04,
			 0x03, 0x02, 0x01, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, 0xee};
	const Bytes bytes = ntb::encode(m);
	CHECK(bytes == spec);

	// The header QEMU compiles reads the same fields back (copied out: packed fields bind no references).
	NtbEpfMsgHdr hdr;
	std::memcpy(&hdr, bytes.data(), sizeof hdr);
	const auto value = [](auto field) { return field; };
	CHECK(value(hdr.type) == 0x11);
	CHECK(value(hdr.mw) == 0x22);
	CHECK(value(hdr.status) == 0x3344);
	CHECK(value(hdr.len) == 1);
	CHECK(value(hdr.arg) == 0x0102030405060708);
	CHECK(value(hdr.tag) == 0x1112131415161718);
	CHECK(ntb::header_size == 24);
}

TEST_CASE("HELLO's arg is the magic in the upper half and the version in the lower")
{
	CHECK(ntb::hello_arg() == 0x4254544e00000001);
	CHECK(ntb::hello_arg(2) == 0x4254544e00000002);
}

TEST_CASE("the end of the stream inside a message is told apart from one between messages")
{
	const Bytes link = ntb::encode({.type = NTB_EPF_MSG_LINK, .arg = 1});
	Pipe pipe;
	ntb::Link receiver(pipe.b);
	REQUIRE(pipe.a.send(link));
	REQUIRE(pipe.a.send(std::span(link).first(ntb::header_size - 1)));
	pipe.a.shutdown_send();

	CHECK(receiver.receive(no_wait) == Received{Message{.type = NTB_EPF_MSG_LINK, .arg = 1}});
	CHECK(receiver.receive(no_wait) == Received{Error::truncated});
}

TEST_CASE("a link with nothing to read times out rather than blocking")
{
	Pipe pipe;
	ntb::Link receiver(pipe.b);
	CHECK(receiver.receive(no_wait) == Received{Error::timed_out});
	// A header without its payload is not a message either.
	const Bytes spad_set = ntb::encode({.type = NTB_EPF_MSG_SPAD_SET, .payload = {1, 2, 3, 4}});
	REQUIRE(pipe.a.send(std::span(spad_set).first(ntb::header_size + 2)));
	CHECK(receiver.receive(no_wait) == Received{Error::timed_out});
}

TEST_CASE("corrupted streams give messages or an error, never more bytes than were fed")
{
	// Small messages only, so that corruptions land in headers often.
	std::vector<Message> messages = one_of_each();
	std::erase_if(messages, [](const Message &m) { return m.payload.size() > 256; });
	const Bytes clean = encode_all(messages);
	std::mt19937 random(20261121); // fixed: a failure must reproduce

	for (int round = 0; round < 2000; round++) {
		Bytes stream = clean;
		stream.resize(random() % (clean.size() + 1));
		for (int flips = random() % 4; flips > 0 && !stream.empty(); flips--)
			stream[random() % stream.size()] = static_cast<std::uint8_t>(random());

		ntb::Decoder decoder;
		std::size_t fed = 0, decoded = 0;
		std::optional<Error> error;
		while (fed < stream.size()) {
			const std::size_t n = std::min<std::size_t>(1 + random() % 64, stream.size() - fed);
			decoder.feed(std::span(stream).subspan(fed, n));
			fed += n;
			for (;;) {
				const Decoded d = decoder.next();
				if (const auto *m = std::get_if<Message>(&d)) {
					decoded += ntb::header_size + m->payload.size();
					continue;
				}
				if (const auto *e = std::get_if<Error>(&d)) {
					error = *e;
					REQUIRE(decoder.next() == Decoded{*e});
				}
				break;
			}
		}
		CAPTURE(round);
		REQUIRE(decoded <= fed);
		// Until an error, every byte fed is in a message returned or in the one being assembled.
		if (!error)
			REQUIRE(decoded + decoder.pending() == fed);
	}
}
