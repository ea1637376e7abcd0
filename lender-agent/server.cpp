#include "server.hpp"

#include "errors.hpp"

#include <netdb.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace farpass::agent {

Server::Server(const Dispatcher &dispatcher, const Clock &clock, std::string local_host, const TlsContext *tls,
	       LogSink log, ServerLimits limits)
	: dispatcher_(dispatcher), clock_(clock), local_host_(std::move(local_host)), tls_(tls), log_(std::move(log)),
	  limits_(limits), wakeup_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))
{
	if (wakeup_ < 0)
		throw_system_error("eventfd");
	worker_ = std::thread([this] { run_worker(); });
}

Server::~Server()
{
	{
		const std::lock_guard hold(jobs_lock_);
		stopping_ = true;
	}
	jobs_ready_.notify_one();
	worker_.join();
	::close(wakeup_);
	for (const Connection &connection : connections_)
		::close(connection.fd);
	for (const Listener &listener : listeners_)
		::close(listener.fd);
}

void Server::listen(int fd, Principal principal)
{
	listeners_.push_back({fd, principal});
}

std::vector<pollfd> Server::poll_set() const
{
	std::vector<pollfd> fds = {{wakeup_, POLLIN, 0}};
	if (clock_.monotonic_ms() >= accept_paused_until_ms_)
		for (const Listener &listener : listeners_)
			fds.push_back({listener.fd, POLLIN, 0});
	// A client gets its replies before more of its requests are read: one that never reads holds one
	// batch of replies, not a growing buffer. Nor is more read while a request is off the loop.
	for (const Connection &connection : connections_)
		fds.push_back({connection.fd,
			       short(!connection.outgoing.empty() ? POLLOUT : connection.session.waiting() ? 0 : POLLIN), 0});
	return fds;
}

int Server::poll_timeout_ms() const
{
	const std::int64_t now = clock_.monotonic_ms();
	std::int64_t next = accept_paused_until_ms_ > now ? accept_paused_until_ms_ : now + limits_.frame_ms;
	for (const Connection &connection : connections_) {
		if (!connection.session.greeted())
			next = std::min(next, connection.accepted_ms + limits_.hello_ms);
		if (connection.frame_started_ms >= 0)
			next = std::min(next, connection.frame_started_ms + limits_.frame_ms);
	}
	return static_cast<int>(std::clamp<std::int64_t>(next - now + 1, 0, limits_.frame_ms));
}

void Server::serve(const pollfd *fds, std::size_t count)
{
	if (count == 0)
		return;
	if (fds[0].revents) // poll_set()'s first: the worker's wakeup
		collect_done();
	fds++;
	count--;
	const auto listener_of = [this](int fd) {
		return std::find_if(listeners_.begin(), listeners_.end(), [fd](const Listener &l) { return l.fd == fd; });
	};
	std::size_t listeners = 0;
	while (listeners < count && listener_of(fds[listeners].fd) != listeners_.end())
		listeners++;
	auto connection = connections_.begin();
	for (std::size_t i = listeners; i < count && connection != connections_.end(); i++, ++connection)
		serve(*connection, fds[i].revents);
	for (std::size_t i = 0; i < listeners; i++)
		if (fds[i].revents)
			accept_from(*listener_of(fds[i].fd));
	for (Connection &each : connections_)
		enforce_deadlines(each);
	reap();
}

void Server::accept_from(const Listener &listener)
{
	sockaddr_storage address{};
	socklen_t length = sizeof(address);
	const int fd = ::accept4(listener.fd, reinterpret_cast<sockaddr *>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		// Out of descriptors or memory: the pending connection stays queued and poll() would report the
		// listener again at once, so stop polling it for a while rather than spin.
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			accept_paused_until_ms_ = clock_.monotonic_ms() + limits_.accept_pause_ms;
			log_(LogLevel::warning, std::string("accepting: ") + std::strerror(errno) + "; not accepting for " +
							std::to_string(limits_.accept_pause_ms) + " ms");
		}
		return;
	}
	std::string ip, label;
	if (listener.principal == Principal::local_admin) {
		ucred peer{};
		socklen_t size = sizeof(peer);
		if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.uid != 0) {
			log_(LogLevel::warning, "CLI connection from uid " + std::to_string(peer.uid) + " refused");
			::close(fd);
			return;
		}
		label = "cli pid " + std::to_string(peer.pid);
	} else {
		char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
		::getnameinfo(reinterpret_cast<sockaddr *>(&address), length, host, sizeof(host), port, sizeof(port),
			      NI_NUMERICHOST | NI_NUMERICSERV);
		ip = host;
		label = ip + ":" + port;
	}
	const auto from_ip = static_cast<std::size_t>(std::count_if(
		connections_.begin(), connections_.end(), [&ip](const Connection &c) { return c.address == ip; }));
	std::string full;
	if (connections_.size() >= limits_.connections)
		full = std::to_string(connections_.size()) + " connections open";
	else if (!ip.empty() && from_ip >= limits_.per_address)
		full = std::to_string(from_ip) + " connections from " + ip + " open";
	if (!full.empty()) {
		::close(fd);
		// One line per refusal could flood the journal under attack: the first of each second.
		refused_++;
		if (clock_.monotonic_ms() - refusal_logged_ms_ >= 1000) {
			log_(LogLevel::warning, label + ": refused: " + full + " (the limit); " + std::to_string(refused_) +
							" refused since the last such line");
			refusal_logged_ms_ = clock_.monotonic_ms();
			refused_ = 0;
		}
		return;
	}
	const TlsContext *tls = listener.principal == Principal::peer ? tls_ : nullptr; // the CLI: SO_PEERCRED
	connections_.push_back({fd, ip, Session(dispatcher_, {listener.principal, local_host_, label, tls, {}, true}, log_),
				{}, clock_.monotonic_ms()});
	connections_.back().id = ++last_id_;
}

void Server::serve(Connection &connection, short revents)
{
	if (revents & (POLLIN | POLLHUP | POLLERR)) {
		char buffer[65536];
		const ssize_t received = ::recv(connection.fd, buffer, sizeof(buffer), 0);
		if (received > 0) {
			connection.outgoing += connection.session.receive(std::string_view(buffer, std::size_t(received)));
			submit(connection);
		} else if (received == 0 || (errno != EAGAIN && errno != EINTR)) {
			connection.session.end_of_stream();
			connection.outgoing.clear();
		}
	}
	if (!connection.outgoing.empty()) {
		const ssize_t sent =
			::send(connection.fd, connection.outgoing.data(), connection.outgoing.size(), MSG_NOSIGNAL);
		if (sent > 0)
			connection.outgoing.erase(0, static_cast<std::size_t>(sent));
		else if (errno != EAGAIN && errno != EINTR)
			connection.session.end_of_stream(), connection.outgoing.clear();
	}
	// Unfinished: a message coming in, or the last replies of a closed session going out.
	if (!connection.session.mid_message() && !(connection.session.closed() && !connection.outgoing.empty()))
		connection.frame_started_ms = -1;
	else if (connection.frame_started_ms < 0)
		connection.frame_started_ms = clock_.monotonic_ms();
}

void Server::enforce_deadlines(Connection &connection)
{
	const std::int64_t now = clock_.monotonic_ms();
	if (!connection.session.greeted() && now - connection.accepted_ms > limits_.hello_ms)
		connection.session.cut("no TLS handshake and hello within " + std::to_string(limits_.hello_ms) + " ms");
	else if (connection.frame_started_ms >= 0 && now - connection.frame_started_ms > limits_.frame_ms)
		connection.session.cut("a message unfinished " + std::to_string(limits_.frame_ms) + " ms after it began");
	else
		return;
	connection.outgoing.clear(); // nothing more for a client that stalls
}

void Server::reap()
{
	for (auto connection = connections_.begin(); connection != connections_.end();) {
		if (connection->session.closed() && connection->outgoing.empty()) {
			::close(connection->fd);
			connection = connections_.erase(connection);
		} else {
			++connection;
		}
	}
}

void Server::submit(Connection &connection)
{
	auto work = connection.session.take_work();
	if (!work)
		return;
	{
		const std::lock_guard hold(jobs_lock_);
		jobs_.push_back({connection.id, std::move(work)});
	}
	jobs_ready_.notify_one();
}

void Server::run_worker()
{
	std::unique_lock hold(jobs_lock_);
	for (;;) {
		jobs_ready_.wait(hold, [this] { return stopping_ || !jobs_.empty(); });
		if (stopping_)
			return;
		Job job = std::move(jobs_.front());
		jobs_.pop_front();
		hold.unlock();
		nlohmann::json reply = job.work(); // never throws: the dispatcher's error boundary is inside
		hold.lock();
		done_.push_back({job.connection, std::move(reply)});
		const std::uint64_t one = 1;
		(void)!::write(wakeup_, &one, sizeof(one));
	}
}

void Server::collect_done()
{
	std::uint64_t count;
	(void)!::read(wakeup_, &count, sizeof(count));
	std::vector<Done> done;
	{
		const std::lock_guard hold(jobs_lock_);
		done.swap(done_);
	}
	for (Done &each : done) {
		const auto connection = std::find_if(connections_.begin(), connections_.end(),
						     [&each](const Connection &c) { return c.id == each.connection; });
		if (connection == connections_.end())
			continue; // closed meanwhile
		connection->outgoing += connection->session.resume(each.reply);
		submit(*connection); // a request received meanwhile may have its own off-loop part
	}
}

} // namespace farpass::agent
