// Agent-to-agent authentication (lender-agent/auth.cpp and its use by sessions and the client): the
// cluster key file, HMAC-SHA256, and the rejection of unauthenticated, tampered, replayed, reordered
// and reflected messages, each of which closes the connection with a log line and no reply.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "auth.hpp"
#include "client.hpp"
#include "errors.hpp"
#include "framing.hpp"

#include <sys/stat.h>

using namespace farpass::agent;
using namespace farpass::agent::testing;
using nlohmann::json;

namespace {

const ClusterKey key(test_key_secret);

std::string rejection(SessionAuth &auth, std::string_view payload)
{
	try {
		auth.open(payload);
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::authentication_failed);
		return e.what();
	}
	FAIL("payload accepted");
	return {};
}

bool starts_with(const std::string &text, std::string_view prefix)
{
	return text.rfind(prefix, 0) == 0;
}

// A client and a server SessionAuth after the hello exchange.
struct EstablishedPair {
	EstablishedPair()
	{
		server.open(client.seal("client hello"));
		client.open(server.seal("server hello"));
		client.establish("client nonce", "server nonce");
		server.establish("client nonce", "server nonce");
	}
	SessionAuth client{key, Role::client};
	SessionAuth server{key, Role::server};
};

// A peer session on the agent, driven by hand-sealed frames from a client SessionAuth.
struct PeerConnection {
	explicit PeerConnection(AgentFixture &agent)
		: session(*agent.dispatcher, {Principal::peer, "lender-a", "10.0.0.2:40000", &key},
			  [this](LogLevel level, const std::string &line) {
				  CHECK(level != LogLevel::error);
				  log += line + "\n";
			  })
	{
	}

	// The hello exchange; returns the server's hello result.
	json greet(SessionAuth &client)
	{
		const std::string client_nonce = random_bytes(nonce_size);
		const json hello = {{"id", 0},
				    {"method", "hello"},
				    {"params", {{"protocol", 1}, {"host", "borrower-b"}, {"nonce", to_hex(client_nonce)}}}};
		const std::string answer = session.receive(encode_frame(client.seal(hello.dump())));
		const json reply = json::parse(client.open(only_frame(answer)));
		client.establish(client_nonce, from_hex(reply["result"]["nonce"].get<std::string>()));
		return reply["result"];
	}

	static std::string only_frame(const std::string &bytes)
	{
		FrameDecoder decoder;
		decoder.feed(bytes);
		const auto payload = decoder.next();
		REQUIRE(payload);
		CHECK_FALSE(decoder.mid_frame());
		return *payload;
	}

	std::string log;
	Session session;
};

std::string device_list_request(std::uint64_t id)
{
	return json{{"id", id}, {"method", "device.list"}}.dump();
}

} // namespace

TEST_CASE("HMAC-SHA256 matches RFC 4231 test case 2")
{
	CHECK(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
	      "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("hex round trip, and malformed hex is invalid_params")
{
	CHECK(from_hex(to_hex(std::string("\x00\xff\x10", 3))) == std::string("\x00\xff\x10", 3));
	CHECK_THROWS_AS(from_hex("abc"), AgentError);
	CHECK_THROWS_AS(from_hex("zz"), AgentError);
}

TEST_CASE("the cluster key file must be private and long enough")
{
	TempDir dir;
	const fs::path file = dir.path() / "cluster.key";
	write_file(file, test_key_secret + "\n");
	::chmod(file.c_str(), 0600);
	CHECK(ClusterKey::load(file).secret() == test_key_secret);

	::chmod(file.c_str(), 0640);
	try {
		ClusterKey::load(file);
		FAIL("group-readable key accepted");
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::permission_denied);
	}

	write_file(file, "short\n");
	::chmod(file.c_str(), 0600);
	CHECK_THROWS_AS(ClusterKey::load(file), AgentError);
	CHECK_THROWS_AS(ClusterKey::load(dir.path() / "missing.key"), AgentError);
}

TEST_CASE("sealed messages open on the other side, in order, in both directions")
{
	EstablishedPair pair;
	for (int i = 0; i < 3; i++) {
		CHECK(pair.server.open(pair.client.seal("request " + std::to_string(i))) == "request " + std::to_string(i));
		CHECK(pair.client.open(pair.server.seal("reply " + std::to_string(i))) == "reply " + std::to_string(i));
	}
}

TEST_CASE("a message without a MAC is rejected as unauthenticated")
{
	EstablishedPair pair;
	CHECK(starts_with(rejection(pair.server, "{\"id\":1}"), "unauthenticated message"));
}

TEST_CASE("a tampered message is rejected: body, sequence or MAC changed")
{
	EstablishedPair pair;
	const std::string sealed = pair.client.seal("{\"id\":1,\"method\":\"device.list\"}");
	for (const std::size_t position : {sealed.size() - 2, mac_size + sequence_size - 1, std::size_t{0}}) {
		CAPTURE(position);
		std::string tampered = sealed;
		tampered[position] ^= 0x01;
		CHECK(starts_with(rejection(pair.server, tampered), "bad MAC"));
	}
	CHECK(pair.server.open(sealed) == "{\"id\":1,\"method\":\"device.list\"}");
}

TEST_CASE("a message sealed with another cluster key is rejected")
{
	SessionAuth intruder(ClusterKey(std::string(32, 'x')), Role::client);
	SessionAuth server(key, Role::server);
	CHECK(starts_with(rejection(server, intruder.seal("hello")), "bad MAC"));
}

TEST_CASE("a replayed message is rejected")
{
	EstablishedPair pair;
	const std::string first = pair.client.seal("first");
	CHECK(pair.server.open(first) == "first");
	CHECK(rejection(pair.server, first) == "replayed message: sequence 1, expected 2");
}

TEST_CASE("a reordered message is rejected")
{
	EstablishedPair pair;
	pair.client.seal("lost or delayed");
	CHECK(rejection(pair.server, pair.client.seal("second")) == "reordered or lost message: sequence 2, expected 1");
}

TEST_CASE("a message reflected back to its sender is rejected")
{
	EstablishedPair pair;
	CHECK(starts_with(rejection(pair.client, pair.client.seal("echo")), "bad MAC"));
}

TEST_CASE("a message recorded in one session is rejected in another")
{
	EstablishedPair recorded;
	const std::string message = recorded.client.seal("from an old session");
	SessionAuth client(key, Role::client), server(key, Role::server);
	server.open(client.seal("hello"));
	client.open(server.seal("hello"));
	client.establish("other client nonce", "other server nonce");
	server.establish("other client nonce", "other server nonce");
	CHECK(starts_with(rejection(server, message), "bad MAC"));
}

TEST_CASE("a peer session serves a client holding the cluster key; the borrower is its hello host")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	PeerConnection connection(agent);
	LoopbackTransport pipe(connection.session);
	RpcClient client(pipe, "borrower-b", &key);
	CHECK(client.hello()["host"] == "lender-a");
	CHECK(client.call("lease.acquire", {{"pci", nvme_address}})["device"]["borrower"] == "borrower-b");
	CHECK(client.call("device.list", json::object())["devices"].size() == 1);
	CHECK_FALSE(connection.session.closed());
}

TEST_CASE("peer sessions reject and log unauthenticated, tampered, replayed and reordered messages")
{
	AgentFixture agent;
	SUBCASE("unauthenticated hello, as from a client without the key")
	{
		PeerConnection connection(agent);
		const json hello = {{"id", 0}, {"method", "hello"}, {"params", {{"protocol", 1}, {"host", "x"}}}};
		CHECK(connection.session.receive(encode_frame(hello.dump())).empty());
		CHECK(connection.session.closed());
		// Plain JSON is read as MAC | sequence | body, and its first 32 bytes are no MAC.
		CHECK(connection.log.find("10.0.0.2:40000: rejected: bad MAC") != std::string::npos);
	}
	SUBCASE("a hello under another key")
	{
		PeerConnection connection(agent);
		SessionAuth intruder(ClusterKey(std::string(32, 'x')), Role::client);
		CHECK(connection.session.receive(encode_frame(intruder.seal("{}"))).empty());
		CHECK(connection.session.closed());
		CHECK(connection.log.find("rejected: bad MAC") != std::string::npos);
	}
	SUBCASE("tampered request")
	{
		PeerConnection connection(agent);
		SessionAuth client(key, Role::client);
		connection.greet(client);
		std::string sealed = client.seal(device_list_request(1));
		sealed.back() = '}' == sealed.back() ? ']' : '}';
		CHECK(connection.session.receive(encode_frame(sealed)).empty());
		CHECK(connection.session.closed());
		CHECK(connection.log.find("rejected: bad MAC") != std::string::npos);
	}
	SUBCASE("replayed request")
	{
		PeerConnection connection(agent);
		SessionAuth client(key, Role::client);
		connection.greet(client);
		const std::string frame = encode_frame(client.seal(device_list_request(1)));
		CHECK_FALSE(connection.session.receive(frame).empty());
		CHECK(connection.session.receive(frame).empty());
		CHECK(connection.session.closed());
		CHECK(connection.log.find("rejected: replayed message") != std::string::npos);
	}
	SUBCASE("reordered requests")
	{
		PeerConnection connection(agent);
		SessionAuth client(key, Role::client);
		connection.greet(client);
		const std::string first = encode_frame(client.seal(device_list_request(1)));
		const std::string second = encode_frame(client.seal(device_list_request(2)));
		CHECK(connection.session.receive(second).empty());
		CHECK(connection.session.closed());
		CHECK(connection.session.receive(first).empty());
		CHECK(connection.log.find("rejected: reordered or lost message") != std::string::npos);
	}
}

TEST_CASE("a peer hello without a proper nonce is refused")
{
	AgentFixture agent;
	PeerConnection connection(agent);
	SessionAuth client(key, Role::client);
	const json hello = {{"id", 0}, {"method", "hello"}, {"params", {{"protocol", 1}, {"host", "b"}, {"nonce", "00"}}}};
	const json reply = json::parse(client.open(
		PeerConnection::only_frame(connection.session.receive(encode_frame(client.seal(hello.dump()))))));
	CHECK(reply["error"]["code"] == static_cast<int>(ErrorCode::invalid_params));
	CHECK(connection.session.closed());
}

TEST_CASE("a client with the wrong key gets no session")
{
	AgentFixture agent;
	PeerConnection connection(agent);
	LoopbackTransport pipe(connection.session);
	const ClusterKey wrong(std::string(32, 'x'));
	RpcClient client(pipe, "borrower-b", &wrong);
	try {
		client.hello();
		FAIL("hello succeeded");
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::peer_unreachable);
	}
}
