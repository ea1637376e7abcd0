// The agent's serving side (lender-agent/server.cpp) on real sockets, with TLS, served by a poll loop in
// a thread as the daemon does: 2000 idle connections and a slow-drip sender do not stop a borrower's
// calls (connections per address and in total are bounded, the TLS handshake and hello have a
// deadline); a message begun must be finished in time; out of descriptors, the server pauses accepting
// instead of spinning, and goes on serving its connections; a request waiting on other agents (an
// off-loop part) does not stop the loop serving other clients.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "client.hpp"
#include "framing.hpp"
#include "pki_fixture.hpp"
#include "server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

using namespace farpass::agent;
using namespace farpass::agent::testing;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr ServerLimits limits{64, 16, 500, 500, 200};

// A TCP socket from @source (a loopback address) to 127.0.0.1:@port, connecting in the background.
int connect_from(const char *source, int port)
{
	const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	REQUIRE(fd >= 0);
	sockaddr_in address{};
	address.sin_family = AF_INET;
	::inet_pton(AF_INET, source, &address.sin_addr);
	REQUIRE(::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0);
	address.sin_port = htons(static_cast<std::uint16_t>(port));
	::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
	const int rc = ::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address));
	REQUIRE((rc == 0 || errno == EINPROGRESS));
	return fd;
}

// True once the server closed @fd (end of stream or reset) within @wait.
bool closed_by_server(int fd, std::chrono::milliseconds wait)
{
	const auto until = std::chrono::steady_clock::now() + wait;
	do {
		pollfd entry{fd, POLLIN, 0};
		if (::poll(&entry, 1, wait.count() ? 20 : 0) > 0) {
			char byte;
			const ssize_t got = ::recv(fd, &byte, 1, MSG_DONTWAIT);
			if (got == 0 || (got < 0 && errno != EAGAIN))
				return true;
		}
	} while (std::chrono::steady_clock::now() < until);
	return false;
}

void set_descriptor_limit(rlim_t soft)
{
	rlimit limit{};
	REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
	limit.rlim_cur = std::min(soft, limit.rlim_max);
	REQUIRE(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
}

// Takes every descriptor left (the process's, so the server's too): returns them, to close.
std::vector<int> exhaust_descriptors()
{
	std::vector<int> taken;
	for (int fd; (fd = ::dup(0)) >= 0;)
		taken.push_back(fd);
	REQUIRE(errno == EMFILE);
	return taken;
}

// The lender-a agent (or another method table) served on 127.0.0.1 by a Server in its own thread.
struct ServedAgent {
	explicit ServedAgent(ServerLimits bounds = limits, const Dispatcher *methods = nullptr)
		: tls(pki().path("lender-a"), "lender-a"),
		  server(methods ? *methods : *agent.dispatcher, clock, "lender-a", &tls,
			 [this](LogLevel, const std::string &line) {
				 const std::lock_guard hold(mutex);
				 log += line + "\n";
			 },
			 bounds)
	{
		agent.lender->lend(nvme_address);
		const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		sockaddr_in address{};
		address.sin_family = AF_INET;
		::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
		socklen_t length = sizeof(address);
		REQUIRE(::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0);
		REQUIRE(::listen(fd, SOMAXCONN) == 0); // as the daemon's
		REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length) == 0);
		port = ntohs(address.sin_port);
		server.listen(fd, Principal::peer);
		loop = std::thread([this] {
			while (!stop) {
				std::vector<pollfd> fds = server.poll_set();
				::poll(fds.data(), fds.size(), std::min(server.poll_timeout_ms(), 20));
				server.serve(fds.data(), fds.size());
			}
		});
	}
	~ServedAgent()
	{
		stop = true;
		loop.join();
	}

	std::string log_text()
	{
		const std::lock_guard hold(mutex);
		return log;
	}

	// borrower-b's connection, after hello; every call must be answered within 3 s (a loaded machine
	// serving 2000 connections ahead of it).
	struct Client {
		explicit Client(const ServedAgent &served)
			: tls(pki().path("borrower-b"), "borrower-b"),
			  transport(tls,
				    std::make_unique<SocketTransport>(
					    SocketTransport::connect_tcp("127.0.0.1:" + std::to_string(served.port), 3000)),
				    "lender-a"),
			  rpc(transport, "borrower-b")
		{
			rpc.hello();
		}
		TlsContext tls;
		TlsTransport transport;
		RpcClient rpc;
	};

	AgentFixture agent;
	SystemClock clock;
	TlsContext tls;
	std::mutex mutex;
	std::string log;
	Server server;
	int port = 0;
	std::atomic<bool> stop = false;
	std::thread loop;
};

bool contains(const std::string &text, std::string_view part)
{
	return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("2000 idle connections and a slow-drip sender do not stop a borrower's calls")
{
	set_descriptor_limit(8192);
	ServedAgent served;
	std::vector<int> idle;
	for (int i = 0; i < 2000; i++)
		idle.push_back(connect_from("127.0.0.2", served.port));
	// A real ClientHello, one byte every 50 ms: it would take seconds.
	std::string hello;
	{
		TlsChannel channel(served.tls, TlsChannel::Side::client);
		channel.receive({});
		hello = channel.take_ciphertext();
	}
	const int drip = connect_from("127.0.0.3", served.port), silent = connect_from("127.0.0.4", served.port);
	std::atomic<bool> dripping = true;
	std::thread dripper([&] {
		for (std::size_t i = 0; dripping && i < hello.size(); i++) {
			(void)!::send(drip, &hello[i], 1, MSG_NOSIGNAL);
			std::this_thread::sleep_for(50ms);
		}
	});
	for (int i = 0; i < 10; i++) {
		CAPTURE(i);
		const auto started = std::chrono::steady_clock::now();
		std::string answer;
		try {
			ServedAgent::Client borrower(served);
			answer = borrower.rpc.call("device.list", json::object())["devices"][0]["pci"];
		} catch (const AgentError &e) {
			answer = e.what();
		}
		CHECK(answer == nvme_address);
		CHECK(std::chrono::steady_clock::now() - started < 3s);
		std::this_thread::sleep_for(100ms);
	}
	CHECK(closed_by_server(drip, 1s));
	CHECK(closed_by_server(silent, 1s));
	dripping = false;
	dripper.join();
	const std::string log = served.log_text();
	CHECK(contains(log, "refused: 16 connections from 127.0.0.2 open (the limit)"));
	CHECK(contains(log, "no TLS handshake and hello within 500 ms; closing"));
	CHECK(contains(log, "127.0.0.4:"));
	for (const int fd : idle)
		::close(fd);
	::close(drip);
	::close(silent);
}

TEST_CASE("connections in total are bounded, from any number of addresses")
{
	ServerLimits patient = limits;
	patient.hello_ms = 10'000; // none is cut for its silence while they are counted
	ServedAgent served(patient);
	std::vector<int> idle;
	for (int source = 2; source < 12; source++)
		for (int i = 0; i < 10; i++)
			idle.push_back(connect_from(("127.0.0." + std::to_string(source)).c_str(), served.port));
	std::vector<int> open = idle;
	for (int round = 0; round < 100 && open.size() > limits.connections; round++) {
		std::erase_if(open, [](int fd) { return closed_by_server(fd, 0ms); });
		std::this_thread::sleep_for(50ms);
	}
	std::this_thread::sleep_for(200ms);
	std::erase_if(open, [](int fd) { return closed_by_server(fd, 0ms); });
	CHECK(open.size() == limits.connections);
	CHECK(contains(served.log_text(), "refused: 64 connections open (the limit)"));
	for (const int fd : idle)
		::close(fd);
}

TEST_CASE("a message begun must be finished within the frame deadline")
{
	ServedAgent served;
	ServedAgent::Client borrower(served);
	const std::string request = encode_frame(json{{"id", 1}, {"method", "device.list"}}.dump());
	bool cut = false;
	for (std::size_t i = 0; i < request.size() && !cut; i++) {
		try {
			borrower.transport.write(request.substr(i, 1));
		} catch (const AgentError &) {
			cut = true; // the server closed it
		}
		std::this_thread::sleep_for(50ms);
		cut = cut || contains(served.log_text(), "a message unfinished 500 ms after it began; closing");
	}
	CHECK(cut);
}

TEST_CASE("out of descriptors, the server pauses accepting and goes on serving its connections")
{
	ServedAgent served;
	ServedAgent::Client borrower(served);
	const int waiting = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	set_descriptor_limit(1024);
	const std::vector<int> taken = exhaust_descriptors();
	sockaddr_in address{};
	address.sin_family = AF_INET;
	address.sin_port = htons(static_cast<std::uint16_t>(served.port));
	::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
	REQUIRE(::connect(waiting, reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0);
	const auto started = std::chrono::steady_clock::now();
	while (std::chrono::steady_clock::now() - started < 1s)
		CHECK(borrower.rpc.call("device.list", json::object())["devices"].size() == 1);
	for (const int fd : taken)
		::close(fd);
	const std::string log = served.log_text();
	std::size_t pauses = 0;
	for (std::size_t at = 0; (at = log.find("accepting: Too many open files; not accepting for 200 ms", at)) !=
				 std::string::npos;
	     at++)
		pauses++;
	CHECK(pauses >= 1);
	CHECK(pauses <= 7); // at most one per 200 ms: no busy loop on the listener
	// The connection that waited is accepted now: the hello deadline ends it.
	CHECK(closed_by_server(waiting, 2s));
	::close(waiting);
}

TEST_CASE("a request waiting on other agents (its off-loop part) does not stop the loop serving others; an error there is its reply")
{
	std::promise<void> asking, peers_answer;
	const std::shared_future<void> answered = peers_answer.get_future().share();
	const auto local = [](const json &, const CallContext &) { return json{{"local", 1}}; };
	const Dispatcher methods({
		{"cluster.devices", any_access, {}, local,
		 [&asking, answered](json handled) {
			 asking.set_value();
			 answered.wait(); // a peer that takes its time
			 handled["peers"] = 2;
			 return handled;
		 }},
		{"cluster.fails", any_access, {}, local,
		 [](json) -> json { throw AgentError(ErrorCode::peer_unreachable, EHOSTUNREACH, "lender-b: unreachable"); }},
		{"device.list", any_access, {}, [](const json &, const CallContext &) { return json{{"devices", json::array()}}; }},
	});
	ServedAgent served(limits, &methods);
	ServedAgent::Client waiting(served), other(served);
	json listed, then_listed;
	std::thread caller([&] {
		listed = waiting.rpc.call("cluster.devices", json::object());
		then_listed = waiting.rpc.call("device.list", json::object());
	});
	asking.get_future().wait();
	std::string answer;
	try { // while the peer has not answered (the client's 3 s timeout, were the loop stuck)
		answer = other.rpc.call("device.list", json::object())["devices"].dump();
	} catch (const AgentError &e) {
		answer = e.what();
	}
	peers_answer.set_value();
	caller.join();
	CHECK(answer == "[]");
	CHECK(listed == json{{"local", 1}, {"peers", 2}});
	CHECK(then_listed == json{{"devices", json::array()}});
	std::string error;
	try {
		other.rpc.call("cluster.fails", json::object());
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::peer_unreachable);
		error = e.what();
	}
	CHECK(error == "lender-b: unreachable");
	CHECK(other.rpc.call("device.list", json::object())["devices"] == json::array());
}
