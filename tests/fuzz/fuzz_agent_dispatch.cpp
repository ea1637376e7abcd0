// libFuzzer target: the agent's message decoder and dispatcher, on an agent core built from fakes.
// The first input byte picks the entry point, the rest is the message or byte stream:
//   0  one payload to the dispatcher as the CLI        1  the same as a peer
//   2  a byte stream into a CLI session after hello    3  a byte stream into a peer session
//   4  payloads (split at newlines) framed into a peer session after a valid hello: past
//      authentication, so every method's decoding is reached as a peer's
// Peer sessions bypass TLS (the seam: SessionConfig::authenticated_host, the peer "borrower-b" whose
// certificate TLS would have checked); the handshake itself is OpenSSL's, tested in test_agent_tls.cpp.
//   5  a hostile lender: the rest is the JSON reply to every call of a borrower (device.list, then
//      lease.acquire, dma.map, device.read_config for a borrow and a config read)
//   6  the state file (state.json) a restarting lender reads   7  borrower.json   8  the config file
// Any crash, sanitizer report or uncaught exception is a bug: every input must end in a reply, a
// closed session or an AgentError.
#include "agent_fakes.hpp"
#include "borrower.hpp"
#include "config.hpp"
#include "framing.hpp"

#include <cstddef>
#include <cstdint>

using namespace farpass::agent;
using namespace farpass::agent::testing;

namespace {

// One agent for the whole run (its temporary tree lives under $TMPDIR, which the runner removes).
AgentFixture &agent()
{
	static AgentFixture *const fixture = [] {
		auto *created = new AgentFixture;
		created->lender->lend(nvme_address);
		return created;
	}();
	return *fixture;
}

void ignore_log(LogLevel, const std::string &) {}

const SessionConfig peer_session = {Principal::peer, "lender-a", "fuzz", nullptr, "borrower-b"};

// A peer session past a valid hello; then the payloads, one frame each.
void authenticated_stream(AgentFixture &fixture, std::string_view input)
{
	Session session(*fixture.dispatcher, peer_session, ignore_log);
	const nlohmann::json hello = {{"id", 0}, {"method", "hello"}, {"params", {{"protocol", 1}, {"host", "borrower-b"}}}};
	FrameDecoder replies;
	replies.feed(session.receive(encode_frame(hello.dump())));
	// Throws (a crash) unless the harness's own hello passed: nothing past it would be fuzzed.
	(void)parse_json(*replies.next()).at("result");
	for (std::size_t start = 0; start <= input.size() && !session.closed();) {
		const std::size_t end = std::min(input.find('\n', start), input.size());
		session.receive(encode_frame(input.substr(start, end - start)));
		start = end + 1;
	}
	session.end_of_stream();
}

// A borrower whose lender answers every call with the same (hostile) reply.
void hostile_lender(std::string_view input)
{
	TempDir dir;
	StateStore store(dir.path(), "borrower.json");
	FakeKernelPort kernel;
	FakeClock clock;
	const nlohmann::json reply = parse_json(input); // an unreadable reply never reaches the borrower
	Borrower borrower(
		kernel, clock, store, {{"lender-a", "10.0.0.1:7450", "0000:00:0a.0"}},
		[&](const PeerAddress &, std::string_view, const nlohmann::json &, int) { return reply; }, ignore_log, 5'000);
	borrower.refresh();
	for (const auto &[id, device] : kernel.announced)
		for (const UpcallOp op : {UpcallOp::borrow, UpcallOp::config_read}) {
			Upcall upcall;
			upcall.seq = kernel.upcalls.size() + 1;
			upcall.op = static_cast<std::uint32_t>(op);
			upcall.device_id = id;
			upcall.timeout_ms = 2000;
			upcall.args = {0, 4};
			kernel.upcalls.push_back(upcall);
		}
	borrower.serve_upcalls();
	clock.now += 10'000;
	borrower.tick();
}

// Loads @input as a state or config file; refusing it with AgentError is the expected outcome.
void load_file(std::uint8_t which, std::string_view input)
{
	try {
		if (which == 8) {
			parse_config(input);
			return;
		}
		AgentFixture fixture;
		const fs::path state_dir = fixture.dir.path() / "state";
		write_file(state_dir / (which == 6 ? "state.json" : "borrower.json"), std::string(input));
		if (which == 6) {
			fixture.lender->restore();
		} else {
			FakeKernelPort kernel;
			Borrower(kernel, fixture.clock, StateStore(state_dir, "borrower.json"), {}, {}, ignore_log, 5'000).restore();
		}
	} catch (const AgentError &) {
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
	if (size == 0)
		return 0;
	const std::string_view input(reinterpret_cast<const char *>(data) + 1, size - 1);
	AgentFixture &fixture = agent();
	switch (data[0] % 9) {
	case 0:
		fixture.dispatcher->handle(input, {Principal::local_admin, ""});
		break;
	case 1:
		fixture.dispatcher->handle(input, {Principal::peer, "borrower-b"});
		break;
	case 2: {
		Session session(*fixture.dispatcher, {Principal::local_admin, "lender-a", "fuzz", nullptr}, ignore_log);
		const nlohmann::json hello = {{"id", 0}, {"method", "hello"}, {"params", {{"protocol", 1}, {"host", "fuzz"}}}};
		session.receive(encode_frame(hello.dump()));
		session.receive(input);
		session.end_of_stream();
		break;
	}
	case 3: {
		Session session(*fixture.dispatcher, peer_session, ignore_log);
		session.receive(input);
		session.end_of_stream();
		break;
	}
	case 4:
		authenticated_stream(fixture, input);
		break;
	case 5:
		try {
			hostile_lender(input);
		} catch (const AgentError &) { // a reply that is not JSON, or refresh refusing the list
		}
		break;
	default:
		load_file(data[0] % 9, input);
		break;
	}
	return 0;
}
