// libFuzzer target: the agent's message decoder and dispatcher, on an agent core built from fakes.
// The first input byte picks the entry point, the rest is the message or byte stream:
//   0  one payload to the dispatcher as the CLI        1  the same as a peer
//   2  a byte stream into a CLI session after hello    3  a byte stream into a peer session
// Any crash, sanitizer report or uncaught exception is a bug: every input must end in a reply or a
// closed session.
#include "agent_fakes.hpp"
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

const ClusterKey key(test_key_secret);

void ignore_log(LogLevel, const std::string &) {}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
	if (size == 0)
		return 0;
	const std::string_view input(reinterpret_cast<const char *>(data) + 1, size - 1);
	AgentFixture &fixture = agent();
	switch (data[0] % 4) {
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
		Session session(*fixture.dispatcher, {Principal::peer, "lender-a", "fuzz", &key}, ignore_log);
		session.receive(input);
		session.end_of_stream();
		break;
	}
	}
	return 0;
}
