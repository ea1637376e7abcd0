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
		"state_dir": "/tmp/state", "cluster_key": "/tmp/key", "lease_ms": 5000,
		"peers": [{"host": "lender-b", "address": "10.0.0.2:7450"}]
	})");
	CHECK(config.host == "lender-a");
	CHECK(config.listen == "10.0.0.1:7450");
	CHECK(config.socket == "/tmp/a.sock");
	CHECK(config.state_dir == "/tmp/state");
	CHECK(config.cluster_key == "/tmp/key");
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
	CHECK(config.cluster_key == "/etc/farpass/cluster.key");
	CHECK(config.lease_ms == 10'000);
	CHECK(config.peers.empty());
}

TEST_CASE("unknown keys, wrong types, short leases and incomplete peers are errors")
{
	CHECK(error_of(R"({"lease": 5})") == "config: unknown key \"lease\"");
	CHECK(error_of(R"({"lease_ms": "5"})") == "config: \"lease_ms\" has the wrong type");
	CHECK(error_of(R"({"lease_ms": 10})") == "config: \"lease_ms\" must be at least 1000");
	CHECK(error_of(R"({"peers": [{"host": "b"}]})") == "config: each peer needs \"host\" and \"address\"");
	CHECK(error_of("[1]") == "config: not a JSON object");
	CHECK(error_of("{") == "config: not a JSON object");
}
