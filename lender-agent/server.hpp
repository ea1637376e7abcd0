// The agent's serving side: its listening sockets (peers on TCP, farpassctl on the Unix socket) and every
// connection they accepted, served by the daemon's one poll loop. Nothing a client does may stop the
// service for the others, so the server bounds what clients hold (docs/agent-protocol.md, "Limits"):
// connections in total and per peer address, the time to finish the TLS handshake and hello, the time to
// finish a frame once begun, and it stops accepting for a while when the process is out of descriptors
// (EMFILE) instead of spinning on a listener it cannot accept from. Nor may a request that waits on
// other agents (cluster.devices): its off-loop part (dispatcher.hpp) runs in the server's worker thread.
#pragma once

#include "clock.hpp"
#include "dispatcher.hpp"
#include "log.hpp"
#include "session.hpp"
#include "tls.hpp"

#include <poll.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace farpass::agent {

struct ServerLimits {
	std::size_t connections = 512;	 // all of them; the unit's LimitNOFILE leaves room above it
	std::size_t per_address = 16;	 // from one peer IP address (a peer agent uses two)
	std::int64_t hello_ms = 5'000;	 // from accept to a finished TLS handshake and hello
	std::int64_t frame_ms = 10'000;	 // from a frame's first byte to its last
	std::int64_t accept_pause_ms = 250; // no accept for this long after it failed for want of resources
};

class Server {
public:
	// tls: peer connections' TLS (null only where tests bypass it with authenticated_host sessions).
	Server(const Dispatcher &dispatcher, const Clock &clock, std::string local_host, const TlsContext *tls,
	       LogSink log, ServerLimits limits = {});
	~Server();
	Server(const Server &) = delete;
	Server &operator=(const Server &) = delete;

	// Takes a listening socket (non-blocking): TCP for peers, the Unix socket (root only) for the CLI.
	void listen(int fd, Principal principal);

	// The descriptors to poll now (the worker's wakeup, listeners not pausing, then every connection),
	// and how long the poll may last at most before serve() has a deadline to enforce.
	std::vector<pollfd> poll_set() const;
	int poll_timeout_ms() const;
	// Serves what poll() reported for poll_set()'s descriptors, then ends connections past a deadline.
	void serve(const pollfd *fds, std::size_t count);

	std::size_t connections() const { return connections_.size(); }

private:
	struct Listener {
		int fd;
		Principal principal;
	};
	struct Connection {
		int fd;
		std::string address; // the peer's IP address ("" on the Unix socket)
		Session session;
		std::string outgoing;
		std::int64_t accepted_ms;
		std::int64_t frame_started_ms = -1; // while a message in or the closing replies out are unfinished
		std::uint64_t id = 0;		    // names it to the worker (it may be gone when its reply is)
	};
	// The off-loop part of a connection's request, and its reply.
	struct Job {
		std::uint64_t connection;
		std::function<nlohmann::json()> work;
	};
	struct Done {
		std::uint64_t connection;
		nlohmann::json reply;
	};

	void accept_from(const Listener &listener);
	void serve(Connection &connection, short revents);
	void enforce_deadlines(Connection &connection);
	void reap();
	void submit(Connection &connection);
	void run_worker();
	void collect_done();

	const Dispatcher &dispatcher_;
	const Clock &clock_;
	std::string local_host_;
	const TlsContext *tls_;
	LogSink log_;
	ServerLimits limits_;
	std::vector<Listener> listeners_;
	std::list<Connection> connections_;
	std::int64_t accept_paused_until_ms_ = 0;
	std::size_t refused_ = 0; // connections refused at a limit since the last log line about it
	std::int64_t refusal_logged_ms_ = -1'000;
	std::uint64_t last_id_ = 0;
	// One worker runs the jobs in turn; a connection has at most one under way (its session waits for
	// it), so the connection limit bounds the queue. The eventfd tells the loop a job is done.
	int wakeup_;
	std::mutex jobs_lock_; // protects jobs_, done_ and stopping_
	std::condition_variable jobs_ready_;
	std::deque<Job> jobs_;
	std::vector<Done> done_;
	bool stopping_ = false;
	std::thread worker_;
};

} // namespace farpass::agent
