// ntb-peer: the other half of an ntb-epf device's link, driven by a script, to test the device with
// well-behaved and hostile peers without a second QEMU.
#include "ntb_link.hpp"
#include "socket_transport.hpp"

#include <charconv>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <thread>

namespace {

constexpr std::string_view usage = R"(usage: ntb-peer (--connect PATH | --listen PATH) [--timeout MS] [STEP[; STEP]...]...
Acts as the peer of the ntb-epf device whose link socket is PATH. Runs the steps given as arguments,
or, when there are none, read from standard input (one or more per line, each run as soon as it is read).
  hello [VERSION]              send HELLO (the protocol's version unless given)
  link up|down                 send LINK
  spad-set IDX VAL             send SPAD_SET of one scratchpad
  mw-write MW OFF HEX          send MW_WRITE
  mw-read MW OFF LEN [K=V]...  send MW_READ, wait for its READ_DONE (skipping other messages), print it
                               and check the fields given
  doorbell N                   send DOORBELL
  send TYPE [K=V]...           send any message; K is mw, status, arg, tag or data
  raw HEX                      send these bytes as they are
  expect TYPE [K=V]...         the next message is TYPE with these fields (K as for send, or len)
  expect-close MS              the device closes the link within MS, sending nothing more
  shutdown                     stop sending: the device reads the end of the stream
  sleep MS
TYPE is hello, link, spad-sync, spad-set, mw-write, mw-read, read-done, doorbell or a number. Numbers
are decimal or 0x-hex; a status may be an errno name (EFAULT); HEX is bytes in hex. --timeout (default
2000) bounds each wait for a message, and for a connection with --listen.
Prints "ok STEP: what happened" for each step. Exit status: 0 if every step held, 1 otherwise, after a
message naming the failing step.
)";

using ntb::Message;
using Bytes = std::vector<std::uint8_t>;
using Words = std::span<const std::string>;

struct Peer {
	ntb::Transport &transport;
	ntb::Link link;
	std::chrono::milliseconds timeout;
	std::uint64_t next_tag = 1;
};

// Runs a step: what happened, for the log; throws when the step does not hold.
using Action = std::function<std::string(Peer &)>;

struct Step {
	std::string text;
	Action action;
};

[[noreturn]] void fail(const std::string &why)
{
	throw std::runtime_error(why);
}

std::uint64_t number(std::string_view s, std::uint64_t max = std::numeric_limits<std::uint64_t>::max())
{
	std::string_view digits = s;
	int base = 10;
	if (digits.starts_with("0x") || digits.starts_with("0X")) {
		digits.remove_prefix(2);
		base = 16;
	}
	std::uint64_t v = 0;
	const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
	if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || v > max)
		fail("bad number '" + std::string(s) + "' (at most " + std::to_string(max) + ")");
	return v;
}

std::chrono::milliseconds millis(std::string_view s)
{
	return std::chrono::milliseconds(number(s, std::numeric_limits<int>::max()));
}

std::uint16_t status_value(std::string_view s)
{
	for (int e = 1; e < 4096; e++)
		if (const char *name = strerrorname_np(e); name && s == name)
			return static_cast<std::uint16_t>(e);
	return static_cast<std::uint16_t>(number(s, std::numeric_limits<std::uint16_t>::max()));
}

std::uint8_t type_value(std::string_view s)
{
	if (const auto type = ntb::type_from_name(s))
		return *type;
	if (s.empty() || s[0] < '0' || s[0] > '9')
		fail("unknown message type '" + std::string(s) + "'");
	return static_cast<std::uint8_t>(number(s, 255));
}

Bytes hex(std::string_view s)
{
	Bytes bytes(s.size() / 2);
	for (std::size_t i = 0; i < bytes.size(); i++) {
		const auto [end, ec] = std::from_chars(s.data() + 2 * i, s.data() + 2 * i + 2, bytes[i], 16);
		if (ec != std::errc{} || end != s.data() + 2 * i + 2)
			fail("bad hex '" + std::string(s) + "'");
	}
	if (s.size() % 2)
		fail("odd number of hex digits in '" + std::string(s) + "'");
	return bytes;
}

Bytes le32(std::uint32_t v)
{
	return {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
		static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
}

// K=V arguments: header fields to send or to expect.
struct Fields {
	std::optional<std::uint8_t> mw;
	std::optional<std::uint16_t> status;
	std::optional<std::uint64_t> arg, tag;
	std::optional<std::uint32_t> len; // expected only: a sent len is the payload's
	std::optional<Bytes> data;
};

Fields fields(Words words, bool expecting)
{
	Fields f;
	for (const std::string &w : words) {
		const auto eq = w.find('=');
		const std::string key = w.substr(0, eq);
		const std::string_view value = eq == std::string::npos ? "" : std::string_view(w).substr(eq + 1);
		if (key == "mw")
			f.mw = static_cast<std::uint8_t>(number(value, 255));
		else if (key == "status")
			f.status = status_value(value);
		else if (key == "arg")
			f.arg = number(value);
		else if (key == "tag")
			f.tag = number(value);
		else if (key == "len" && expecting)
			f.len = static_cast<std::uint32_t>(number(value, std::numeric_limits<std::uint32_t>::max()));
		else if (key == "data")
			f.data = hex(value);
		else
			fail("unknown field '" + w + "'");
	}
	return f;
}

std::string shown(std::uint64_t v)
{
	return std::to_string(v);
}

std::string shown(const Bytes &b)
{
	return ntb::to_hex(b);
}

std::string described(const Message &m)
{
	std::string s = ntb::to_string(m);
	if (m.type == NTB_EPF_MSG_READ_DONE && m.status)
		if (const char *name = strerrorname_np(m.status))
			s += std::string(" (") + name + ")";
	return s;
}

void check(const Message &m, std::uint8_t type, const Fields &want)
{
	std::string wrong;
	const auto compare = [&](const char *key, const auto &expected, const auto &actual) {
		if (expected && *expected != actual)
			wrong += std::string(" ") + key + "=" + shown(*expected);
	};
	if (m.type != type)
		wrong = " " + std::string(ntb::type_name(type).value_or("type " + std::to_string(type)));
	compare("mw", want.mw, m.mw);
	compare("status", want.status, m.status);
	compare("arg", want.arg, m.arg);
	compare("tag", want.tag, m.tag);
	compare("len", want.len, m.payload.size());
	compare("data", want.data, m.payload);
	if (!wrong.empty())
		fail("got " + described(m) + "; expected" + wrong);
}

Message receive(Peer &p)
{
	auto r = p.link.receive(p.timeout);
	if (const auto *e = std::get_if<ntb::Error>(&r))
		fail("waiting for a message: " + std::string(ntb::describe(*e)));
	return std::get<Message>(std::move(r));
}

// Sends bytes as they are; the device having hung up fails the step.
void transmit(Peer &p, std::span<const std::uint8_t> bytes)
{
	if (!p.transport.send(bytes))
		fail("the device closed the link");
}

Action sender(Message m)
{
	// A payload the link cannot carry is a script error, found before anything runs.
	if (m.payload.size() > ntb::max_payload)
		fail("payload over " + std::to_string(ntb::max_payload) + " bytes (send it with raw)");
	return [m = std::move(m)](Peer &p) {
		transmit(p, ntb::encode(m));
		return "sent " + ntb::to_string(m);
	};
}

Action mw_read(std::uint8_t mw, std::uint64_t offset, std::uint32_t len, Fields want)
{
	return [=](Peer &p) {
		const std::uint64_t tag = p.next_tag++;
		transmit(p, ntb::encode({.type = NTB_EPF_MSG_MW_READ, .mw = mw, .arg = offset, .tag = tag,
					 .payload = le32(len)}));
		// The device may send other messages first (LINK, SPAD_SYNC); the completion is the answer.
		unsigned skipped = 0;
		for (;; skipped++) {
			const Message m = receive(p);
			if (m.type != NTB_EPF_MSG_READ_DONE || m.tag != tag)
				continue;
			check(m, NTB_EPF_MSG_READ_DONE, want);
			return described(m) + (skipped ? " (after " + std::to_string(skipped) + " other messages)" : "");
		}
	};
}

Action expect_close(std::chrono::milliseconds timeout)
{
	return [=](Peer &p) -> std::string {
		const auto r = p.link.receive(timeout);
		if (const auto *m = std::get_if<Message>(&r))
			fail("got " + described(*m) + " instead of the end of the link");
		const auto e = std::get<ntb::Error>(r);
		if (e == ntb::Error::timed_out)
			fail("the link is still open after " + std::to_string(timeout.count()) + " ms");
		if (e != ntb::Error::closed && e != ntb::Error::truncated)
			fail("got " + std::string(ntb::describe(e)) + " instead of the end of the link");
		return "closed";
	};
}

Action compile(Words w)
{
	const std::string &op = w[0];
	const Words args = w.subspan(1);
	const auto arity = [&](std::size_t min, std::size_t max) {
		if (args.size() < min || args.size() > max)
			fail("wrong number of arguments to " + op);
	};

	if (op == "hello") {
		arity(0, 1);
		const auto version = args.empty() ? NTB_EPF_LINK_VERSION : number(args[0], 0xffffffff);
		return sender({.type = NTB_EPF_MSG_HELLO, .arg = ntb::hello_arg(static_cast<std::uint32_t>(version))});
	}
	if (op == "link") {
		arity(1, 1);
		if (args[0] != "up" && args[0] != "down")
			fail("link takes up or down");
		return sender({.type = NTB_EPF_MSG_LINK, .arg = args[0] == "up"});
	}
	if (op == "spad-set") {
		arity(2, 2);
		return sender({.type = NTB_EPF_MSG_SPAD_SET, .arg = number(args[0]),
			       .payload = le32(static_cast<std::uint32_t>(number(args[1], 0xffffffff)))});
	}
	if (op == "mw-write") {
		arity(3, 3);
		return sender({.type = NTB_EPF_MSG_MW_WRITE, .mw = static_cast<std::uint8_t>(number(args[0], 255)),
			       .arg = number(args[1]), .payload = hex(args[2])});
	}
	if (op == "mw-read") {
		arity(3, 9);
		return mw_read(static_cast<std::uint8_t>(number(args[0], 255)), number(args[1]),
			       static_cast<std::uint32_t>(number(args[2], 0xffffffff)), fields(args.subspan(3), true));
	}
	if (op == "doorbell") {
		arity(1, 1);
		return sender({.type = NTB_EPF_MSG_DOORBELL, .arg = number(args[0])});
	}
	if (op == "send") {
		arity(1, 6);
		const Fields f = fields(args.subspan(1), false);
		return sender({.type = type_value(args[0]), .mw = f.mw.value_or(0), .status = f.status.value_or(0),
			       .arg = f.arg.value_or(0), .tag = f.tag.value_or(0), .payload = f.data.value_or(Bytes{})});
	}
	if (op == "raw") {
		arity(1, 1);
		return [bytes = hex(args[0])](Peer &p) {
			transmit(p, bytes);
			return "sent " + std::to_string(bytes.size()) + " bytes";
		};
	}
	if (op == "expect") {
		arity(1, 7);
		return [type = type_value(args[0]), want = fields(args.subspan(1), true)](Peer &p) {
			const Message m = receive(p);
			check(m, type, want);
			return described(m);
		};
	}
	if (op == "expect-close") {
		arity(1, 1);
		return expect_close(millis(args[0]));
	}
	if (op == "shutdown") {
		arity(0, 0);
		return [](Peer &p) {
			p.transport.shutdown_send();
			return std::string();
		};
	}
	if (op == "sleep") {
		arity(1, 1);
		return [ms = millis(args[0])](Peer &) {
			std::this_thread::sleep_for(ms);
			return std::string();
		};
	}
	fail("unknown step '" + op + "'");
}

// Steps are separated by ';' or newlines; a step starting with '#' is a comment.
std::vector<Step> parse(std::string_view text)
{
	std::vector<Step> steps;
	for (std::size_t start = 0; start <= text.size();) {
		const std::size_t end = std::min(text.find_first_of(";\n", start), text.size());
		const std::string_view step = text.substr(start, end - start);
		start = end + 1;

		std::vector<std::string> words;
		for (std::size_t w = step.find_first_not_of(" \t"); w != std::string_view::npos;) {
			const std::size_t e = std::min(step.find_first_of(" \t", w), step.size());
			words.emplace_back(step.substr(w, e - w));
			w = step.find_first_not_of(" \t", e);
		}
		if (words.empty() || words[0].starts_with('#'))
			continue;

		std::string joined = words[0];
		for (std::size_t i = 1; i < words.size(); i++)
			joined += " " + words[i];
		try {
			steps.push_back({joined, compile(words)});
		} catch (const std::exception &e) {
			fail("bad step '" + joined + "': " + e.what());
		}
	}
	return steps;
}

// Runs steps in order; false after reporting the first that did not hold.
bool run(const std::vector<Step> &steps, Peer &peer, unsigned &number)
{
	for (const Step &step : steps) {
		number++;
		try {
			const std::string what = step.action(peer);
			std::cout << "ok " << step.text << (what.empty() ? "" : ": " + what) << std::endl;
		} catch (const std::exception &e) {
			std::cerr << "ntb-peer: step " << number << " '" << step.text << "' failed: " << e.what()
				  << std::endl;
			return false;
		}
	}
	return true;
}

int run_peer(const std::vector<std::string> &args)
{
	std::string connect, listen, script;
	std::chrono::milliseconds timeout{2000};
	for (std::size_t i = 0; i < args.size(); i++) {
		const auto value = [&]() -> const std::string & {
			if (i + 1 == args.size())
				fail(args[i] + " needs a value");
			return args[++i];
		};
		if (args[i] == "--connect")
			connect = value();
		else if (args[i] == "--listen")
			listen = value();
		else if (args[i] == "--timeout")
			timeout = millis(value());
		else if (args[i] == "--help" || args[i] == "-h") {
			std::cout << usage;
			return 0;
		} else
			script += args[i] + ";";
	}
	if (connect.empty() == listen.empty())
		fail("one of --connect PATH and --listen PATH is needed\n" + std::string(usage));

	// An argument script is checked whole before anything is sent, so a typo cannot half-run it.
	const std::vector<Step> steps = parse(script);
	auto transport = connect.empty() ? ntb::SocketTransport::accept_one(listen, timeout)
					 : ntb::SocketTransport::connect(connect);
	Peer peer{transport, ntb::Link(transport), timeout};
	unsigned number = 0;

	if (!script.empty())
		return run(steps, peer, number) ? 0 : 1;
	for (std::string line; std::getline(std::cin, line);) {
		std::vector<Step> from_line;
		try {
			from_line = parse(line);
		} catch (const std::exception &e) {
			std::cerr << "ntb-peer: step " << number + 1 << ": " << e.what() << std::endl;
			return 1;
		}
		if (!run(from_line, peer, number))
			return 1;
	}
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	try {
		return run_peer(std::vector<std::string>(argv + 1, argv + argc));
	} catch (const std::exception &e) {
		std::cerr << "ntb-peer: " << e.what() << std::endl;
		return 1;
	}
}
