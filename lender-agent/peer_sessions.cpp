#include "peer_sessions.hpp"

#include "errors.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>

namespace farpass::agent {

using nlohmann::json;

namespace {

using steady = std::chrono::steady_clock;

int ms_left(steady::time_point deadline)
{
	const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
	return static_cast<int>(std::max<long long>(left, 0));
}

AgentError timed_out(const PeerAddress &peer, std::string_view method, int timeout_ms)
{
	return AgentError(ErrorCode::timed_out, ETIMEDOUT,
			  peer.host + ": " + std::string(method) + ": no answer within " + std::to_string(timeout_ms) + " ms");
}

} // namespace

PeerSessions::PeerSessions(PeerConnector connect, const Clock &clock, std::string local_host, int call_timeout_ms,
			   LogSink log)
	: connect_(std::move(connect)), clock_(clock), local_host_(std::move(local_host)),
	  call_timeout_ms_(call_timeout_ms), log_(std::move(log))
{
}

void PeerSessions::open(const PeerAddress &peer, Peer &state, int timeout_ms)
{
	if (clock_.monotonic_ms() < state.retry_at_ms)
		throw AgentError(ErrorCode::peer_unreachable, EHOSTUNREACH,
				 peer.host + ": not reconnecting for another " +
					 std::to_string(state.retry_at_ms - clock_.monotonic_ms()) + " ms after: " + state.last_error);
	const auto started = steady::now();
	try {
		state.transport = connect_(peer, std::max(timeout_ms, 1));
		state.transport->set_deadline(ms_left(started + std::chrono::milliseconds(timeout_ms)));
		state.client = std::make_unique<RpcClient>(*state.transport, local_host_);
		state.client->hello();
	} catch (const AgentError &e) {
		state.client.reset();
		state.transport.reset();
		state.backoff_ms = state.backoff_ms ? std::min(state.backoff_ms * 2, max_backoff_ms) : first_backoff_ms;
		state.retry_at_ms = clock_.monotonic_ms() + state.backoff_ms;
		if (state.last_error != e.what())
			log_(LogLevel::warning, "session to " + peer.host + " (" + peer.address + "): " + e.what() +
							"; retrying in " + std::to_string(state.backoff_ms) + " ms or more");
		state.last_error = e.what();
		throw;
	}
	state.backoff_ms = 0;
	state.retry_at_ms = 0;
	state.last_error.clear();
	const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - started).count();
	log_(LogLevel::info, "session to " + peer.host + " (" + peer.address + ") open: connect + hello in " +
				     std::to_string(took) + " ms");
}

void PeerSessions::drop(const PeerAddress &peer, Peer &state, const std::string &why)
{
	if (!state.client)
		return;
	state.client.reset();
	state.transport.reset();
	log_(LogLevel::info, "session to " + peer.host + " closed: " + why);
}

json PeerSessions::call(const PeerAddress &peer, std::string_view method, const json &params)
{
	return call(peer, method, params, call_timeout_ms_);
}

json PeerSessions::call(const PeerAddress &peer, std::string_view method, const json &params, int timeout_ms)
{
	timeout_ms = std::clamp(timeout_ms, 0, call_timeout_ms_);
	const auto deadline = steady::now() + std::chrono::milliseconds(timeout_ms);
	const std::shared_ptr<Peer> held = state_of(peer.host);
	Peer &state = *held;
	const std::lock_guard<std::mutex> one_call(state.lock);
	for (int attempt = 0;; attempt++) {
		const bool reused = state.client != nullptr;
		if (!reused)
			open(peer, state, ms_left(deadline));
		const int left = ms_left(deadline);
		if (left <= 0) // the connect took it all: nothing sent, the session stays in step
			throw timed_out(peer, method, timeout_ms);
		state.transport->set_deadline(left);
		try {
			return state.client->call(method, params);
		} catch (const AgentError &e) {
			if (state.client->usable())
				throw; // the peer's error reply: the session is fine
			drop(peer, state, e.what());
			// A session that sat idle may have been closed by the peer (e.g. an agent restart) without
			// our noticing: one more try on a new connection, if the deadline allows.
			if (reused && attempt == 0 && e.code() == ErrorCode::peer_unreachable && ms_left(deadline) > 0)
				continue;
			if (e.code() == ErrorCode::timed_out)
				throw timed_out(peer, method, timeout_ms);
			throw;
		}
	}
}

std::shared_ptr<PeerSessions::Peer> PeerSessions::state_of(const std::string &host)
{
	const std::lock_guard<std::mutex> guard(lock_);
	std::shared_ptr<Peer> &state = peers_[host];
	if (!state)
		state = std::make_shared<Peer>();
	return state;
}

void PeerSessions::close(const std::string &host)
{
	const std::lock_guard<std::mutex> guard(lock_);
	peers_.erase(host);
}

bool PeerSessions::connected(const std::string &host) const
{
	std::shared_ptr<Peer> state;
	{
		const std::lock_guard<std::mutex> guard(lock_);
		const auto found = peers_.find(host);
		if (found == peers_.end())
			return false;
		state = found->second;
	}
	const std::lock_guard<std::mutex> guard(state->lock);
	return state->client != nullptr;
}

} // namespace farpass::agent
