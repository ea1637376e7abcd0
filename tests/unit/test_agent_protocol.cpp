// The agent's protocol (lender-agent/{framing,protocol,dispatcher,session,client,methods*}.cpp): framing,
// the envelope and schema checks, every method's results and exact error codes, the hello handshake,
// and bad input that must end in a clear error, never a crash or a wedged connection.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "log.hpp"
#include "client.hpp"
#include "errors.hpp"
#include "framing.hpp"
#include "protocol.hpp"

using namespace farpass::agent;
using namespace farpass::agent::testing;
using nlohmann::json;

namespace {

int error_code(const json &reply)
{
	return reply.contains("error") ? reply["error"].at("code").get<int>() : 0;
}

int code(ErrorCode c)
{
	return static_cast<int>(c);
}

std::string request(const json &message)
{
	return encode_frame(message.dump());
}

std::string hello_frame(std::uint64_t version = protocol_version)
{
	return request({{"id", 0}, {"method", "hello"}, {"params", {{"protocol", version}, {"host", "cli"}}}});
}

std::vector<json> decode_all(const std::string &bytes)
{
	FrameDecoder decoder;
	decoder.feed(bytes);
	std::vector<json> messages;
	while (const auto payload = decoder.next())
		messages.push_back(json::parse(*payload));
	CHECK_FALSE(decoder.mid_frame());
	return messages;
}

struct LoggedSession {
	explicit LoggedSession(AgentFixture &agent)
		: session(*agent.dispatcher, {Principal::local_admin, "lender-a", "cli pid 42", nullptr},
			  [this](LogLevel, const std::string &line) { log += line + "\n"; })
	{
	}
	std::string log;
	Session session;
};

} // namespace

TEST_CASE("frames carry a 4-byte big-endian length and reassemble from single bytes")
{
	const std::string frame = encode_frame("{\"a\":1}");
	CHECK(frame.substr(0, 4) == std::string("\0\0\0\7", 4));
	FrameDecoder decoder;
	for (std::size_t i = 0; i + 1 < frame.size(); i++) {
		decoder.feed(frame.substr(i, 1));
		CHECK_FALSE(decoder.next());
		CHECK(decoder.mid_frame());
	}
	decoder.feed(frame.substr(frame.size() - 1));
	CHECK(decoder.next() == "{\"a\":1}");
	CHECK_FALSE(decoder.mid_frame());
}

TEST_CASE("an oversized frame is refused from its header alone, on both sides")
{
	FrameDecoder decoder;
	decoder.feed(std::string("\x00\x10\x00\x01", 4)); // 1 MiB + 1
	CHECK_THROWS_AS(decoder.next(), AgentError);
	CHECK_THROWS_AS(encode_frame(std::string(max_frame_payload + 1, ' ')), AgentError);
	CHECK(encode_frame(std::string(max_frame_payload, ' ')).size() == max_frame_payload + 4);
}

TEST_CASE("the envelope: malformed JSON, non-objects, missing id or method, extra members")
{
	AgentFixture agent;
	const CallContext admin{Principal::local_admin, ""};
	CHECK(error_code(agent.dispatcher->handle("{\"id\":1,", admin)) == code(ErrorCode::parse_error));
	CHECK(error_code(agent.dispatcher->handle("", admin)) == code(ErrorCode::parse_error));
	CHECK(error_code(agent.dispatcher->handle("[1,2]", admin)) == code(ErrorCode::invalid_request));
	CHECK(error_code(agent.dispatcher->handle("{\"method\":\"device.list\"}", admin)) ==
	      code(ErrorCode::invalid_request));
	CHECK(error_code(agent.dispatcher->handle("{\"id\":-1,\"method\":\"device.list\"}", admin)) ==
	      code(ErrorCode::invalid_request));
	CHECK(error_code(agent.dispatcher->handle("{\"id\":1}", admin)) == code(ErrorCode::invalid_request));
	CHECK(error_code(agent.dispatcher->handle("{\"id\":1,\"method\":7}", admin)) ==
	      code(ErrorCode::invalid_request));
	CHECK(error_code(agent.dispatcher->handle("{\"id\":1,\"method\":\"device.list\",\"params\":[]}", admin)) ==
	      code(ErrorCode::invalid_request));
	CHECK(error_code(agent.dispatcher->handle("{\"id\":1,\"method\":\"device.list\",\"x\":0}", admin)) ==
	      code(ErrorCode::invalid_request));
	const json reply = agent.dispatcher->handle("{\"id\":9,\"method\":\"device.list\"}", admin);
	CHECK(reply.at("id") == 9);
	CHECK(reply.at("result").at("devices") == json::array());
}

TEST_CASE("an error reply carries the code, the errno and a message, with the request's id")
{
	AgentFixture agent;
	const json reply = agent.call("no.such", json::object());
	CHECK(reply == json{{"id", 1},
			    {"error",
			     {{"code", code(ErrorCode::unknown_method)},
			      {"errno", ENOSYS},
			      {"message", "unknown method \"no.such\""}}}});
}

TEST_CASE("every method checks its schema and permission before its handler runs")
{
	AgentFixture agent;
	for (const Method &method : agent.dispatcher->methods()) {
		CAPTURE(method.name);
		const std::string name(method.name);
		const Principal allowed = method.access & local_admin_access ? Principal::local_admin : Principal::peer;
		json valid = json::object();
		for (const ParamField &field : method.params)
			if (field.required)
				valid[field.name] = field.type == ParamType::string ? json("x") : json(1u);
		CHECK(error_code(agent.call(name, {{"unexpected", 1}}, allowed)) == code(ErrorCode::invalid_params));
		for (const ParamField &field : method.params) {
			CAPTURE(field.name);
			json wrong_type = valid;
			wrong_type[field.name] = json::array();
			CHECK(error_code(agent.call(name, wrong_type, allowed)) == code(ErrorCode::invalid_params));
			if (field.required) {
				json missing = valid;
				missing.erase(field.name);
				CHECK(error_code(agent.call(name, missing, allowed)) == code(ErrorCode::invalid_params));
			}
		}
		if (method.access != any_access) {
			const Principal other = allowed == Principal::peer ? Principal::local_admin : Principal::peer;
			CHECK(error_code(agent.call(name, valid, other)) == code(ErrorCode::permission_denied));
		}
	}
}

TEST_CASE("device.lend and device.unlend: results and error codes")
{
	AgentFixture agent;
	const json lent = agent.call("device.lend", {{"pci", "01:00.0"}});
	CHECK(lent.at("result") == json{{"host", "lender-a"},
					 {"pci", nvme_address},
					 {"vendor", 0x8086},
					 {"device", 0x5845},
					 {"subsystem_vendor", 0x1af4},
					 {"subsystem_device", 0x1100},
					 {"class", 0x010802},
					 {"revision", 2},
					 {"bar_sizes", {0x4000, 0, 0, 0, 0, 0}},
					 {"bar_flags", {0, 0, 0, 0, 0, 0}},
					 {"bar_offsets", {0, 0, 0, 0, 0, 0}},
					 {"bar_mapped", {true, false, false, false, false, false}},
					 {"irq_slot", 0},
					 {"reset_failed", false},
					 {"borrower", nullptr}});
	CHECK(error_code(agent.call("device.lend", {{"pci", nvme_address}})) == code(ErrorCode::already_lent));
	CHECK(error_code(agent.call("device.lend", {{"pci", "0000:09:00.0"}})) == code(ErrorCode::no_such_device));
	CHECK(error_code(agent.call("device.lend", {{"pci", "../../../etc"}})) == code(ErrorCode::invalid_params));

	agent.call("lease.acquire", {{"pci", nvme_address}}, Principal::peer, "borrower-b");
	const json busy = agent.call("device.unlend", {{"pci", nvme_address}});
	CHECK(error_code(busy) == code(ErrorCode::device_busy));
	CHECK(busy["error"]["errno"] == EBUSY);
	CHECK(agent.call("device.unlend", {{"pci", nvme_address}, {"force", true}}).at("result") == json::object());
	CHECK(error_code(agent.call("device.unlend", {{"pci", nvme_address}})) == code(ErrorCode::no_such_device));
}

TEST_CASE("device.list shows each lent device and its borrower, to peers and the CLI")
{
	AgentFixture agent;
	agent.call("device.lend", {{"pci", nvme_address}});
	agent.call("device.lend", {{"pci", nic_address}});
	agent.call("lease.acquire", {{"pci", nic_address}}, Principal::peer, "borrower-b");
	const json devices = agent.call("device.list", json::object(), Principal::peer, "borrower-c")["result"]["devices"];
	REQUIRE(devices.size() == 2);
	CHECK(devices[0]["borrower"].is_null());
	CHECK(devices[1]["borrower"] == "borrower-b");
}

TEST_CASE("lease.acquire, renew and release: the borrower is the caller's authenticated host")
{
	AgentFixture agent(10'000);
	agent.call("device.lend", {{"pci", nvme_address}});
	const json acquired = agent.call("lease.acquire", {{"pci", nvme_address}}, Principal::peer, "borrower-b");
	const std::string lease = acquired.at("result").at("lease");
	CHECK(acquired["result"]["lease_ms"] == 10'000);
	CHECK(acquired["result"]["expires_in_ms"] == 10'000);
	CHECK(acquired["result"]["device"]["borrower"] == "borrower-b");

	const json busy = agent.call("lease.acquire", {{"pci", nvme_address}}, Principal::peer, "borrower-c");
	CHECK(error_code(busy) == code(ErrorCode::device_busy));
	CHECK(busy["error"]["message"] == "0000:01:00.0 is borrowed by borrower-b");
	CHECK(error_code(agent.call("lease.acquire", {{"pci", nic_address}}, Principal::peer, "borrower-b")) ==
	      code(ErrorCode::no_such_device));

	agent.clock.now += 3000;
	CHECK(agent.call("lease.renew", {{"pci", nvme_address}, {"lease", lease}}, Principal::peer, "borrower-b")
		      .at("result")
		      .at("expires_in_ms") == 10'000);
	CHECK(error_code(agent.call("lease.renew", {{"pci", nvme_address}, {"lease", lease}}, Principal::peer,
				    "borrower-c")) == code(ErrorCode::no_such_lease));
	CHECK(agent.call("lease.release", {{"pci", nvme_address}, {"lease", lease}}, Principal::peer, "borrower-b")
		      .at("result") == json::object());
	CHECK(error_code(agent.call("lease.release", {{"pci", nvme_address}, {"lease", lease}}, Principal::peer,
				    "borrower-b")) == code(ErrorCode::no_such_lease));
}

TEST_CASE("lease.list shows the leases lent out, without their ids")
{
	AgentFixture agent(10'000);
	agent.call("device.lend", {{"pci", nvme_address}});
	CHECK(agent.call("lease.list", json::object())["result"]["leases"] == json::array());
	agent.call("lease.acquire", {{"pci", nvme_address}}, Principal::peer, "borrower-b");
	agent.clock.now += 2500;
	CHECK(agent.call("lease.list", json::object())["result"]["leases"] ==
	      json::array({{{"pci", nvme_address}, {"borrower", "borrower-b"}, {"expires_in_ms", 7500}}}));
}

TEST_CASE("device.read_config, write_config, reset, dma.map and dma.unmap need the caller's live lease")
{
	AgentFixture agent;
	agent.call("device.lend", {{"pci", nvme_address}});
	const std::string lease =
		agent.call("lease.acquire", {{"pci", nvme_address}}, Principal::peer, "borrower-b")["result"]["lease"];
	const auto as = [&](const std::string &method, json params, const std::string &host = "borrower-b") {
		params["pci"] = nvme_address;
		if (!params.contains("lease"))
			params["lease"] = lease;
		return agent.call(method, params, Principal::peer, host);
	};
	CHECK(as("device.write_config", {{"offset", 4}, {"width", 2}, {"value", 6}})["result"] == json::object());
	CHECK(as("device.read_config", {{"offset", 4}, {"width", 2}})["result"] == json{{"value", 6}});
	CHECK(error_code(as("device.read_config", {{"offset", 4}, {"width", 8}})) == code(ErrorCode::invalid_params));
	CHECK(as("device.reset", json::object())["result"] == json::object());
	CHECK(agent.vfio.records.at(nvme_address)->resets == 1);
	CHECK(as("dma.map", {{"iova", 0}, {"size", 4096}, {"window_offset", 0}})["result"] == json::object());
	CHECK(as("dma.unmap", {{"iova", 0}, {"size", 4096}})["result"] == json::object());
	CHECK(error_code(as("dma.unmap", {{"iova", 0}, {"size", 4096}})) == code(ErrorCode::invalid_params));
	for (const char *method : {"device.read_config", "device.write_config", "device.reset", "dma.map", "dma.unmap"}) {
		CAPTURE(method);
		const json params = {{"offset", 0}, {"width", 4}, {"value", 0}, {"iova", 0}, {"size", 1}, {"window_offset", 0}};
		json valid_for_method = json::object();
		for (const Method &m : agent.dispatcher->methods())
			if (m.name == method)
				for (const ParamField &field : m.params)
					if (params.contains(field.name))
						valid_for_method[field.name] = params[field.name];
		CHECK(error_code(as(method, valid_for_method, "borrower-c")) == code(ErrorCode::no_such_lease));
	}
}

TEST_CASE("log lines escape control characters and backslashes: a peer's name cannot forge a line")
{
	CHECK(escape_for_log("hello from evil\n<3>fatal: forged\r\x1b[2J\x7f\\x0a") ==
	      "hello from evil\\x0a<3>fatal: forged\\x0d\\x1b[2J\\x7f\\\\x0a");
	CHECK(escape_for_log("lender-a: hello from borrower-b") == "lender-a: hello from borrower-b");
}

TEST_CASE("JSON nested deeper than max_json_depth is a parse_error, at any boundary")
{
	const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
	CHECK(parse_json(nested(max_json_depth)).is_array());
	CHECK_THROWS_WITH_AS(parse_json(nested(max_json_depth + 1)), "JSON nested deeper than 16 levels", AgentError);
	CHECK_THROWS_AS(parse_json(nested(100'000)), AgentError);
	CHECK_THROWS_WITH_AS(parse_json("{\"a\":"), "not valid JSON", AgentError);

	AgentFixture agent;
	const std::string deep = R"({"id": 3, "method": "device.list", "params": {"x": )" + nested(20) + "}}";
	const json reply = agent.dispatcher->handle(deep, {Principal::local_admin, ""});
	CHECK(error_code(reply) == code(ErrorCode::parse_error));
	CHECK(reply["error"]["message"] == "JSON nested deeper than 16 levels");
}

TEST_CASE("before hello only a small frame is accepted; after it, up to the frame limit")
{
	AgentFixture agent;
	LoggedSession before(agent);
	const std::string big(max_hello_payload + 1, ' ');
	const auto refused = decode_all(before.session.receive(encode_frame(big)));
	REQUIRE(refused.size() == 1);
	CHECK(error_code(refused[0]) == code(ErrorCode::message_too_large));
	CHECK(before.session.closed());

	LoggedSession after(agent);
	after.session.receive(hello_frame());
	const std::string padded = R"({"id": 1, "method": "device.list")" + std::string(max_hello_payload, ' ') + "}";
	const auto replies = decode_all(after.session.receive(encode_frame(padded)));
	REQUIRE(replies.size() == 1);
	CHECK(replies[0].contains("result"));
	CHECK_FALSE(after.session.closed());
}

TEST_CASE("numeric parameters: ranges checked in 64-bit before the handler, boundary and wrapping values")
{
	AgentFixture agent;
	agent.call("device.lend", {{"pci", nvme_address}});
	const std::string lease =
		agent.call("lease.acquire", {{"pci", nvme_address}}, Principal::peer, "borrower-b")["result"]["lease"];
	const auto as = [&](const std::string &method, json params) {
		params["pci"] = nvme_address;
		params["lease"] = lease;
		return agent.call(method, params, Principal::peer, "borrower-b");
	};
	const auto invalid = [&](const std::string &method, const json &params) {
		return error_code(as(method, params)) == code(ErrorCode::invalid_params);
	};
	constexpr std::uint64_t two_32 = 1ull << 32, max64 = ~0ull;

	// Config space: the last byte and the last dword are fine; past them, and values that would
	// wrap to a valid one in 32 bits (2^32 + 4 was offset 4, 2^32 + 2 width 2), are not.
	CHECK(as("device.read_config", {{"offset", 4095}, {"width", 1}}).contains("result"));
	CHECK(as("device.read_config", {{"offset", 4092}, {"width", 4}}).contains("result"));
	CHECK(invalid("device.read_config", {{"offset", 4096}, {"width", 1}}));
	CHECK(invalid("device.read_config", {{"offset", 4094}, {"width", 4}}));
	CHECK(invalid("device.read_config", {{"offset", two_32 + 4}, {"width", 2}}));
	CHECK(invalid("device.read_config", {{"offset", 4}, {"width", two_32 + 2}}));
	CHECK(invalid("device.read_config", {{"offset", 4}, {"width", 0}}));
	CHECK(as("device.read_config", {{"offset", two_32 + 4}, {"width", 2}})["error"]["message"] ==
	      "\"offset\" must be an unsigned integer from 0 to 4095, not 4294967300");
	CHECK(as("device.write_config", {{"offset", 0x10}, {"width", 4}, {"value", two_32 - 1}}).contains("result"));
	CHECK(invalid("device.write_config", {{"offset", 0x10}, {"width", 4}, {"value", two_32}}));
	CHECK(invalid("device.write_config", {{"offset", 0x10}, {"width", 2}, {"value", two_32 + 6}}));
	CHECK(invalid("device.write_config", {{"offset", 0x10}, {"width", 2}, {"value", 0x10000}}));
	CHECK(agent.vfio.records.at(nvme_address)->config[0x10] == 0xff); // the refused writes wrote nothing

	// DMA: an IOVA range may end at 2^64 but not wrap past it; empty ranges are refused.
	CHECK(as("dma.map", {{"iova", max64 - 4095}, {"size", 4096}, {"window_offset", 0}}).contains("result"));
	CHECK(invalid("dma.map", {{"iova", max64 - 4095}, {"size", 8192}, {"window_offset", 4096}}));
	CHECK(invalid("dma.map", {{"iova", 0}, {"size", 0}, {"window_offset", 0}}));
	CHECK(invalid("dma.map", {{"iova", 0}, {"size", 4096}, {"window_offset", max64}}));

	// Interrupts: index 0 to 2, at most 2048 vectors.
	CHECK(invalid("irq.set", {{"index", 3}, {"count", 1}}));
	CHECK(invalid("irq.set", {{"index", max64}, {"count", 1}}));
	CHECK(invalid("irq.set", {{"index", 2}, {"count", 2049}}));
	CHECK(invalid("irq.set", {{"index", 2}, {"count", two_32 + 1}}));
	CHECK(invalid("irq.set", {{"index", 2}, {"count", -1}}));
}

TEST_CASE("decode_uint: the range's ends are in, one past them and other JSON types are not")
{
	CHECK(decode_uint(json(5), "n", 5, 9) == 5);
	CHECK(decode_uint(json(9), "n", 5, 9) == 9);
	CHECK(decode_uint(json(~0ull), "n", 0, ~0ull) == ~0ull);
	for (const json &bad : {json(4), json(10), json(-1), json(5.5), json("5"), json(nullptr)}) {
		CAPTURE(bad);
		CHECK_THROWS_AS(decode_uint(bad, "n", 5, 9), AgentError);
	}
	CHECK_THROWS_AS(decode_uint<std::uint16_t>(json(0x10000), "vendor"), AgentError);
	CHECK(decode_uint<std::uint16_t>(json(0xffff), "vendor") == 0xffff);
}

TEST_CASE("device.read_config without a lease: a free device, or one the caller borrows; busy otherwise")
{
	AgentFixture agent;
	agent.call("device.lend", {{"pci", nvme_address}});
	agent.vfio.records.at(nvme_address)->config[0] = 0x86;
	const json read = {{"pci", nvme_address}, {"offset", 0}, {"width", 1}};
	CHECK(agent.call("device.read_config", read, Principal::peer, "borrower-b")["result"] == json{{"value", 0x86}});
	agent.call("lease.acquire", {{"pci", nvme_address}}, Principal::peer, "borrower-b");
	CHECK(agent.call("device.read_config", read, Principal::peer, "borrower-b")["result"] == json{{"value", 0x86}});
	const json busy = agent.call("device.read_config", read, Principal::peer, "borrower-c");
	CHECK(error_code(busy) == code(ErrorCode::device_busy));
	CHECK(busy["error"]["message"] == "0000:01:00.0 is borrowed by borrower-b");
	CHECK(error_code(agent.call("device.write_config", {{"pci", nvme_address}, {"offset", 4}, {"width", 2}, {"value", 6}},
				    Principal::peer, "borrower-c")) == code(ErrorCode::invalid_params));
}

TEST_CASE("cluster.status and cluster.devices")
{
	AgentFixture agent(10'000);
	agent.call("device.lend", {{"pci", nvme_address}});
	agent.clock.now += 61'000;
	CHECK(agent.call("cluster.status", json::object())["result"] == json{{"host", "lender-a"},
									     {"protocol", 1},
									     {"uptime_s", 61},
									     {"lease_ms", 10'000},
									     {"devices_lent", 1},
									     {"remote_devices", json::array()},
									     {"devices_borrowed", 0},
									     {"peers", json::array()}});

	agent.context->peers = {{"lender-b", "10.0.0.2:7450"}, {"lender-c", "10.0.0.3:7450"}};
	agent.context->call_peer = [](const PeerAddress &peer, std::string_view method, const json &) -> json {
		CHECK(method == "device.list");
		if (peer.host == "lender-c")
			throw AgentError(ErrorCode::peer_unreachable, ECONNREFUSED, "connection refused");
		return {{"devices", json::array({{{"host", "lender-b"}, {"pci", "0000:05:00.0"}}})}};
	};
	const json result = agent.call("cluster.devices", json::object())["result"];
	REQUIRE(result["devices"].size() == 2);
	CHECK(result["devices"][0]["host"] == "lender-a");
	CHECK(result["devices"][1]["host"] == "lender-b");
	CHECK(result["unreachable"] == json::array({{{"host", "lender-c"}, {"error", "connection refused"}}}));

	// The peers are asked off the poll loop: on the loop, cluster.devices only lists this host's devices.
	bool asked = false;
	agent.context->call_peer = [&asked](const PeerAddress &, std::string_view, const json &) -> json {
		asked = true;
		return {{"devices", json::array()}};
	};
	const json request = {{"id", 1}, {"method", "cluster.devices"}};
	Dispatched dispatched = agent.dispatcher->dispatch(request.dump(), CallContext{Principal::local_admin, ""});
	REQUIRE(dispatched.later);
	CHECK_FALSE(asked);
	CHECK(dispatched.later()["result"]["devices"].size() == 1);
	CHECK(asked);
}

TEST_CASE("the first message must be hello with this protocol version; mismatches are numbered errors")
{
	AgentFixture agent;
	{
		LoggedSession s(agent);
		const auto replies = decode_all(s.session.receive(hello_frame(2)));
		REQUIRE(replies.size() == 1);
		CHECK(error_code(replies[0]) == code(ErrorCode::version_mismatch));
		CHECK(replies[0]["error"]["message"] == "protocol version 2 is not supported; this agent speaks 1");
		CHECK(s.session.closed());
		CHECK(s.log.find("hello refused") != std::string::npos);
	}
	{
		LoggedSession s(agent);
		const auto replies = decode_all(s.session.receive(request({{"id", 3}, {"method", "device.list"}})));
		CHECK(error_code(replies.at(0)) == code(ErrorCode::invalid_request));
		CHECK(s.session.closed());
	}
	{
		LoggedSession s(agent);
		const auto replies = decode_all(s.session.receive(hello_frame() + request({{"id", 1}, {"method", "device.list"}})));
		REQUIRE(replies.size() == 2);
		CHECK(replies[0]["result"] == json{{"protocol", 1}, {"host", "lender-a"}});
		CHECK(replies[1]["result"]["devices"] == json::array());
		CHECK_FALSE(s.session.closed());
	}
}

TEST_CASE("bad requests are answered and the connection goes on")
{
	AgentFixture agent;
	LoggedSession s(agent);
	s.session.receive(hello_frame());
	const std::string bad = encode_frame("{not json") + request({{"id", 1}, {"method", "no.such"}}) +
				request({{"id", 2}, {"method", "device.lend"}, {"params", {{"pci", 1}}}}) +
				request({{"id", 3}, {"method", "device.list"}});
	const auto replies = decode_all(s.session.receive(bad));
	REQUIRE(replies.size() == 4);
	CHECK(error_code(replies[0]) == code(ErrorCode::parse_error));
	CHECK(replies[0]["id"].is_null());
	CHECK(error_code(replies[1]) == code(ErrorCode::unknown_method));
	CHECK(error_code(replies[2]) == code(ErrorCode::invalid_params));
	CHECK(replies[3]["id"] == 3);
	CHECK(replies[3].contains("result"));
	CHECK_FALSE(s.session.closed());
	CHECK(s.log.find("cli pid 42: request failed") != std::string::npos);
}

TEST_CASE("an oversized message gets message_too_large and the connection is closed")
{
	AgentFixture agent;
	LoggedSession s(agent);
	s.session.receive(hello_frame());
	const auto replies = decode_all(s.session.receive(std::string("\xff\xff\xff\xff", 4)));
	REQUIRE(replies.size() == 1);
	CHECK(error_code(replies[0]) == code(ErrorCode::message_too_large));
	CHECK(replies[0]["error"]["errno"] == EMSGSIZE);
	CHECK(s.session.closed());
	CHECK(s.session.receive(hello_frame()).empty());
}

TEST_CASE("a peer that stops mid-message is reported and closed, not waited for")
{
	AgentFixture agent;
	LoggedSession s(agent);
	s.session.receive(hello_frame());
	const std::string frame = request({{"id", 1}, {"method", "device.list"}});
	CHECK(s.session.receive(frame.substr(0, frame.size() / 2)).empty());
	CHECK(s.session.mid_message());
	s.session.end_of_stream();
	CHECK(s.session.closed());
	CHECK(s.log.find("connection closed in the middle of a message; closing") != std::string::npos);
}

TEST_CASE("the client performs hello, calls methods and turns error replies into AgentError")
{
	AgentFixture agent;
	LoggedSession s(agent);
	LoopbackTransport pipe(s.session);
	RpcClient client(pipe, "cli");
	CHECK(client.hello()["host"] == "lender-a");
	CHECK(client.call("device.lend", {{"pci", nvme_address}})["pci"] == nvme_address);
	try {
		client.call("device.lend", {{"pci", nvme_address}});
		FAIL("no error");
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::already_lent);
		CHECK(e.error_number() == EEXIST);
		CHECK(std::string(e.what()) == "0000:01:00.0 is already lent");
	}
}

TEST_CASE("the client reports a connection that closes without an answer")
{
	AgentFixture agent;
	LoggedSession s(agent);
	LoopbackTransport pipe(s.session);
	RpcClient client(pipe, "cli");
	s.session.end_of_stream();
	try {
		client.hello();
		FAIL("no error");
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::peer_unreachable);
	}
}
