// The agent's configuration file (lender-agent/config.cpp): defaults, comments, and strict checking.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "config.hpp"
#include "errors.hpp"

using namespace farpass::agent;

namespace {

std::string error_of(std::string_view text)
{
	try {
		parse_config(text);
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::invalid_params);
		return e.what();
	}
	FAIL("config accepted");
	return {};
}

} // namespace

TEST_CASE("a full config file with comments is read")
{
	const AgentConfig config = parse_config(R"({
		// this host
		"host": "lender-a", "listen": "10.0.0.1:7450", "socket": "/tmp/a.sock",
		"state_dir": "/tmp/state", "pki": "/tmp/pki", "lease_ms": 5000,
		"peers": [{"host": "lender-b", "address": "10.0.0.2:7450"}]
	})");
	CHECK(config.host == "lender-a");
	CHECK(config.listen == "10.0.0.1:7450");
	CHECK(config.socket == "/tmp/a.sock");
	CHECK(config.state_dir == "/tmp/state");
	CHECK(config.pki == "/tmp/pki");
	CHECK(config.lease_ms == 5000);
	REQUIRE(config.peers.size() == 1);
	CHECK(config.peers[0].host == "lender-b");
	CHECK(config.peers[0].address == "10.0.0.2:7450");
}

TEST_CASE("an empty config takes the documented defaults and the machine's host name")
{
	const AgentConfig config = parse_config("{}");
	CHECK_FALSE(config.host.empty());
	CHECK(config.listen == "0.0.0.0:7450");
	CHECK(config.socket == "/run/farpass/agent.sock");
	CHECK(config.state_dir == "/var/lib/farpass");
	CHECK(config.pki == "/etc/farpass/pki");
	CHECK(config.lease_ms == 10'000);
	CHECK(config.peers.empty());
}

TEST_CASE("unknown keys, wrong types, short leases and incomplete peers are errors")
{
	CHECK(error_of(R"({"lease": 5})") == "config: unknown key \"lease\"");
	CHECK(error_of(R"({"lease_ms": "5"})") ==
	      "config: \"lease_ms\" must be an unsigned integer from 1000 to 3600000, not \"5\"");
	CHECK(error_of(R"({"lease_ms": 10})") ==
	      "config: \"lease_ms\" must be an unsigned integer from 1000 to 3600000, not 10");
	CHECK(error_of(R"({"peers": [{"host": "b"}]})") == "config: each peer needs \"host\" and \"address\"");
	CHECK(error_of("[1]") == "config: not a JSON object");
	CHECK(error_of("{") == "config: not valid JSON");
	CHECK(error_of(R"({"peers": )" + std::string(20, '[') + std::string(20, ']') + "}") ==
	      "config: JSON nested deeper than 16 levels");
}

TEST_CASE("borrowing: a peer's ntb, poll_ms and the device path")
{
	const AgentConfig config = parse_config(R"({"host": "borrower1", "poll_ms": 2000, "device": "/tmp/fp",
		"peers": [{"host": "lender", "address": "10.99.0.1:7450", "ntb": "0000:00:0a.0"},
			  {"host": "borrower2", "address": "10.99.0.3:7450"}]})");
	CHECK(config.poll_ms == 2000);
	CHECK(config.device == "/tmp/fp");
	REQUIRE(config.peers.size() == 2);
	CHECK(config.peers[0].ntb == "0000:00:0a.0");
	CHECK(config.peers[1].ntb.empty());
	CHECK(parse_config("{}").poll_ms == 5000);
	CHECK(parse_config("{}").device == "/dev/farpass");
	CHECK(error_of(R"({"poll_ms": 10})") == "config: \"poll_ms\" must be an unsigned integer from 100 to 3600000, not 10");
	CHECK(parse_config("{}").call_timeout_ms == 1500);
	CHECK(parse_config(R"({"call_timeout_ms": 800})").call_timeout_ms == 800);
	CHECK(error_of(R"({"call_timeout_ms": 50})") == "config: \"call_timeout_ms\" must be an unsigned integer from 100 to 60000, not 50");
	CHECK(error_of(R"({"peers": [{"host": "a", "address": "b:1", "nbt": "x"}]})") ==
	      "config: unknown peer key \"nbt\"");
	CHECK(error_of(R"({"peers": ["a"]})") == "config: each peer is an object");
}

TEST_CASE("the BAR window: bar_slot_bytes and bar_window_bytes, page multiples")
{
	CHECK(parse_config("{}").bar_slot_bytes == 4u << 20);
	CHECK(parse_config("{}").bar_window_bytes == (64u << 20) - 4096);
	const AgentConfig config = parse_config(R"({"bar_slot_bytes": 1048576, "bar_window_bytes": 16777216})");
	CHECK(config.bar_slot_bytes == 1u << 20);
	CHECK(config.bar_window_bytes == 16u << 20);
	CHECK(error_of(R"({"bar_slot_bytes": 6000})") == "config: \"bar_slot_bytes\" must be a multiple of 4096");
	CHECK(error_of(R"({"bar_slot_bytes": 0})") ==
	      "config: \"bar_slot_bytes\" must be an unsigned integer from 4096 to 1099511627776, not 0");
	CHECK(error_of(R"({"bar_window_bytes": 4096})") ==
	      "config: \"bar_window_bytes\" must be an unsigned integer from 8192 to 1099511627776, not 4096");
	CHECK(error_of(R"({"bar_window_bytes": 2199023259648})") ==
	      "config: \"bar_window_bytes\" must be an unsigned integer from 8192 to 1099511627776, not 2199023259648");
	CHECK(error_of(R"({"bar_window_bytes": 8193})") == "config: \"bar_window_bytes\" must be a multiple of 4096");
	CHECK(error_of(R"({"bar_slot_bytes": 134217728})") == "config: \"bar_slot_bytes\" exceeds \"bar_window_bytes\"");
	CHECK(error_of(R"({"bar_slot_bytes": -4096})") ==
	      "config: \"bar_slot_bytes\" must be an unsigned integer from 4096 to 1099511627776, not -4096");
}

TEST_CASE("numbers are decoded with their ranges: the ends are in, one past them and wrapping values out")
{
	CHECK(parse_config(R"({"lease_ms": 1000, "poll_ms": 100, "call_timeout_ms": 60000})").lease_ms == 1000);
	CHECK(parse_config(R"({"lease_ms": 3600000})").lease_ms == 3'600'000);
	CHECK(error_of(R"({"lease_ms": 3600001})").find("\"lease_ms\" must be") != std::string::npos);
	// 2^64 - 1 was lease_ms -1 once read as a signed number.
	CHECK(error_of(R"({"lease_ms": 18446744073709551615})") ==
	      "config: \"lease_ms\" must be an unsigned integer from 1000 to 3600000, not 18446744073709551615");
	CHECK(error_of(R"({"poll_ms": 99})").find("\"poll_ms\" must be") != std::string::npos);
	CHECK(error_of(R"({"poll_ms": 18446744073709551615})").find("\"poll_ms\" must be") != std::string::npos);
	CHECK(error_of(R"({"call_timeout_ms": 60001})").find("\"call_timeout_ms\" must be") != std::string::npos);
	CHECK(error_of(R"({"call_timeout_ms": -1})").find("\"call_timeout_ms\" must be") != std::string::npos);
	CHECK(parse_config(R"({"bar_slot_bytes": 1099511627776, "bar_window_bytes": 1099511627776})").bar_slot_bytes ==
	      1ull << 40);
	CHECK(error_of(R"({"bar_window_bytes": 1099511631872})").find("\"bar_window_bytes\" must be") !=
	      std::string::npos);
}
