// Peer sessions (lender-agent/peer_sessions.cpp): one authenticated session per peer, reused by every
// call, reconnected after an error (with backoff when connecting fails), every call bounded by a deadline.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "peer_sessions.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <cstring>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

using namespace farpass::agent;
using namespace farpass::agent::testing;
using nlohmann::json;

namespace {

const PeerAddress lender_a{"lender-a", "10.0.0.1:7450", "0000:00:0a.0"};

// Counts the hellos a client sends (each one is a new handshake) on top of a loopback pipe.
class CountingTransport final : public Transport {
public:
	CountingTransport(Session &server, int &hellos) : pipe_(server), hellos_(hellos) {}
	void write(std::string_view bytes) override
	{
		if (bytes.find("\"method\":\"hello\"") != std::string_view::npos)
			hellos_++;
		pipe_.write(bytes);
	}
	std::string read_some() override { return pipe_.read_some(); }

private:
	LoopbackTransport pipe_;
	int &hellos_;
};

// borrower-b's sessions to lender-a, an AgentFixture lending its NVMe, through in-memory connections.
struct SessionsFixture {
	explicit SessionsFixture(int call_timeout_ms = 1500)
		: sessions(
			  [this](const PeerAddress &peer, int timeout_ms) -> std::unique_ptr<Transport> {
				  connects++;
				  last_connect_timeout_ms = timeout_ms;
				  if (lender_down)
					  throw AgentError(ErrorCode::peer_unreachable, ECONNREFUSED,
							   "connecting to " + peer.address + ": Connection refused");
				  servers.push_back(std::make_unique<Session>(
					  *lender.dispatcher, SessionConfig{Principal::peer, "lender-a", "10.0.0.2:1", nullptr, "borrower-b"},
					  [](LogLevel, const std::string &) {}));
				  return std::make_unique<CountingTransport>(*servers.back(), hellos);
			  },
			  clock, "borrower-b", call_timeout_ms, [this](LogLevel, const std::string &line) { log.push_back(line); })
	{
		lender.lender->lend(nvme_address);
	}

	json call(std::string_view method, const json &params) { return sessions.call(lender_a, method, params); }

	AgentFixture lender;
	FakeClock clock;
	std::vector<std::unique_ptr<Session>> servers; // the lender's side of every connection made
	int connects = 0, hellos = 0, last_connect_timeout_ms = 0;
	bool lender_down = false;
	std::vector<std::string> log;
	PeerSessions sessions;
};

ErrorCode error_of(const std::function<void()> &call, int *error_number = nullptr)
{
	try {
		call();
	} catch (const AgentError &e) {
		if (error_number)
			*error_number = e.error_number();
		return e.code();
	}
	FAIL("no error");
	return ErrorCode::internal_error;
}

} // namespace

TEST_CASE("a second call reuses the session: no new connection, no new hello")
{
	SessionsFixture f;
	CHECK(f.call("device.list", json::object())["devices"].size() == 1);
	CHECK(f.call("lease.acquire", {{"pci", nvme_address}})["device"]["borrower"] == "borrower-b");
	CHECK(f.call("device.list", json::object())["devices"][0]["borrower"] == "borrower-b");
	CHECK(f.connects == 1);
	CHECK(f.hellos == 1);
	CHECK(f.sessions.connected("lender-a"));
	CHECK(f.last_connect_timeout_ms > 0);
	CHECK(f.last_connect_timeout_ms <= 1500);
}

TEST_CASE("an error reply keeps the session; sequence numbers stay in step over many calls")
{
	SessionsFixture f;
	const std::string lease = f.call("lease.acquire", {{"pci", nvme_address}})["lease"];
	const json read = {{"pci", nvme_address}, {"lease", lease}, {"offset", 0}, {"width", 2}};
	const json value = f.call("device.read_config", read)["value"];
	for (int i = 0; i < 500; i++) {
		CAPTURE(i);
		REQUIRE(f.call("device.read_config", read)["value"] == value);
		if (i % 50 == 0) {
			CHECK(error_of([&] { f.call("lease.renew", {{"pci", nvme_address}, {"lease", "not-a-lease"}}); }) ==
			      ErrorCode::no_such_lease);
			CHECK(error_of([&] { f.call("no.such.method", json::object()); }) == ErrorCode::unknown_method);
		}
	}
	CHECK(f.call("lease.renew", {{"pci", nvme_address}, {"lease", lease}})["lease"] == lease);
	CHECK(f.connects == 1);
	CHECK(f.hellos == 1);
	REQUIRE(f.servers.size() == 1);
	CHECK_FALSE(f.servers[0]->closed()); // the lender never saw a bad MAC, a replay or a reordering
}

TEST_CASE("a dropped connection is connected again, with a new handshake, on the next call")
{
	SessionsFixture f;
	f.call("device.list", json::object());
	f.servers.back()->end_of_stream(); // the lender closed it (say, it restarted)
	CHECK(f.call("device.list", json::object())["devices"].size() == 1);
	CHECK(f.connects == 2);
	CHECK(f.hellos == 2);
	CHECK(f.sessions.connected("lender-a"));
	CHECK(f.call("device.list", json::object())["devices"].size() == 1);
	CHECK(f.connects == 2);
}

TEST_CASE("a lender that cannot be reached is retried with backoff; calls in between fail at once")
{
	SessionsFixture f;
	f.lender_down = true;
	int error_number = 0;
	CHECK(error_of([&] { f.call("device.list", json::object()); }, &error_number) == ErrorCode::peer_unreachable);
	CHECK(error_number == ECONNREFUSED);
	CHECK(f.connects == 1);
	// In the backoff: no connect attempt, EHOSTUNREACH.
	CHECK(error_of([&] { f.call("device.list", json::object()); }, &error_number) == ErrorCode::peer_unreachable);
	CHECK(error_number == EHOSTUNREACH);
	CHECK(f.connects == 1);
	f.clock.now += PeerSessions::first_backoff_ms;
	CHECK(error_of([&] { f.call("device.list", json::object()); }) == ErrorCode::peer_unreachable);
	CHECK(f.connects == 2);
	f.clock.now += PeerSessions::first_backoff_ms; // the backoff doubled
	CHECK(error_of([&] { f.call("device.list", json::object()); }) == ErrorCode::peer_unreachable);
	CHECK(f.connects == 2);
	f.lender_down = false;
	f.clock.now += PeerSessions::max_backoff_ms;
	CHECK(f.call("device.list", json::object())["devices"].size() == 1);
	CHECK(f.connects == 3);
	// Connected again: the backoff is over, a later failure starts from the first step.
	f.servers.back()->end_of_stream();
	f.lender_down = true;
	CHECK(error_of([&] { f.call("device.list", json::object()); }) == ErrorCode::peer_unreachable);
	f.lender_down = false;
	f.clock.now += PeerSessions::first_backoff_ms;
	CHECK(f.call("device.list", json::object())["devices"].size() == 1);
}

// A lender on a real socket (socketpair) served by a thread that answers only the first `answers`
// messages (the hello, then calls) and then falls silent, as a wedged agent would.
struct SilentLender {
	explicit SilentLender(int answers) : answers_left(answers)
	{
		int fds[2];
		REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
		client_fd = fds[0];
		server_fd = fds[1];
		lender.lender->lend(nvme_address);
		server = std::thread([this] {
			Session session(*lender.dispatcher, SessionConfig{Principal::peer, "lender-a", "socketpair", nullptr, "borrower-b"},
					[](LogLevel, const std::string &) {});
			char buffer[65536];
			while (!stop) {
				pollfd entry{server_fd, POLLIN, 0};
				if (::poll(&entry, 1, 20) <= 0)
					continue;
				const ssize_t got = ::recv(server_fd, buffer, sizeof(buffer), 0);
				if (got <= 0)
					break;
				const std::string out = session.receive(std::string_view(buffer, std::size_t(got)));
				if (!out.empty() && answers_left-- > 0)
					(void)!::send(server_fd, out.data(), out.size(), MSG_NOSIGNAL);
			}
		});
	}
	~SilentLender()
	{
		stop = true;
		server.join();
		::close(server_fd);
		if (client_fd >= 0)
			::close(client_fd);
	}
	std::unique_ptr<Transport> connect()
	{
		auto transport = std::make_unique<SocketTransport>(std::exchange(client_fd, -1), 10'000);
		return transport;
	}

	AgentFixture lender;
	int client_fd = -1, server_fd = -1;
	std::atomic<int> answers_left;
	std::atomic<bool> stop = false;
	std::thread server;
};

namespace {

// Calls device.list on lender-a through sessions; returns the error and how
// long the call took.
std::pair<ErrorCode, std::int64_t> timed_call(PeerSessions &sessions, int *error_number)
{
	const auto started = std::chrono::steady_clock::now();
	const ErrorCode code = error_of([&] { sessions.call(lender_a, "device.list", json::object()); }, error_number);
	return {code, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started)
			      .count()};
}

} // namespace

TEST_CASE("a call past its deadline fails with ETIMEDOUT without blocking longer than the deadline")
{
	FakeClock clock;
	std::vector<std::string> log;
	SUBCASE("the lender never answers the hello")
	{
		SilentLender silent(0);
		PeerSessions sessions([&](const PeerAddress &, int) { return silent.connect(); }, clock, "borrower-b", 300,
				      [&](LogLevel, const std::string &line) { log.push_back(line); });
		int error_number = 0;
		const auto [code, took] = timed_call(sessions, &error_number);
		CHECK(code == ErrorCode::timed_out);
		CHECK(error_number == ETIMEDOUT);
		CHECK(took >= 250);
		CHECK(took < 600); // the transport's own 10 s timeout is not what ended it
		CHECK_FALSE(sessions.connected("lender-a"));
	}
	SUBCASE("the lender answers the hello and one call, then falls silent")
	{
		SilentLender silent(2);
		int connects = 0;
		PeerSessions sessions(
			[&](const PeerAddress &, int) {
				connects++;
				return silent.connect();
			},
			clock, "borrower-b", 300, [&](LogLevel, const std::string &line) { log.push_back(line); });
		CHECK(sessions.call(lender_a, "device.list", json::object())["devices"].size() == 1);
		int error_number = 0;
		const auto [code, took] = timed_call(sessions, &error_number);
		CHECK(code == ErrorCode::timed_out);
		CHECK(error_number == ETIMEDOUT);
		CHECK(took >= 250);
		CHECK(took < 600);
		CHECK(connects == 1); // a timeout is not retried on a new connection: the deadline is spent
		CHECK_FALSE(sessions.connected("lender-a")); // the reply may still come: the stream is out of step
	}
}

TEST_CASE("farpassctl's Unix-socket connect has a deadline: an agent that stopped accepting")
{
	TempDir dir;
	const std::string path = (dir.path() / "agent.sock").string();
	const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sockaddr_un address{};
	address.sun_family = AF_UNIX;
	std::strcpy(address.sun_path, path.c_str());
	REQUIRE(::bind(listener, reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0);
	REQUIRE(::listen(listener, 0) == 0);
	// Never accepted: the first connection fills the listen queue, the next one has to wait.
	SocketTransport first = SocketTransport::connect_unix(path, 300);
	const auto started = std::chrono::steady_clock::now();
	try {
		SocketTransport::connect_unix(path, 300);
		FAIL("connected to a full listen queue");
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::peer_unreachable);
		CHECK(e.error_number() == ETIMEDOUT);
	}
	const auto waited = std::chrono::steady_clock::now() - started;
	CHECK(waited >= std::chrono::milliseconds(250));
	CHECK(waited < std::chrono::milliseconds(2000));
	::close(listener);
}

TEST_CASE("a call given less time than call_timeout_ms (an upcall's time left) is bounded by that")
{
	FakeClock clock;
	SilentLender silent(0);
	int connect_timeout_ms = 0;
	PeerSessions sessions(
		[&](const PeerAddress &, int timeout_ms) {
			connect_timeout_ms = timeout_ms;
			return silent.connect();
		},
		clock, "borrower-b", 60'000, [](LogLevel, const std::string &) {});
	CHECK(error_of([&] { sessions.call(lender_a, "device.list", json::object(), 50); }) == ErrorCode::timed_out);
	CHECK(connect_timeout_ms > 0);
	CHECK(connect_timeout_ms <= 50); // connect, TLS and hello included
}
