// farpass-agent: the per-host daemon. The main thread's poll loop serves peer agents on TCP, farpassctl on
// a Unix socket (root only; both through server.hpp, which bounds what clients hold, and whose worker
// thread asks the peers for cluster.devices), lease expiry once a second and SIGTERM/SIGINT for a clean stop. The borrower
// role (the kernel's upcalls, polling the lenders, heartbeats) runs in threads of its own with its own
// peer sessions: its calls wait on other agents, and two agents each waiting in one loop for the other's
// answer would stall both until the call timeout. Its loop only reads upcalls and keeps time; the calls
// run on one worker per lender (borrower.hpp), so one lender that never answers delays no other's.
// State is persisted on every change, so stopping needs no flush and a restart finds every device and
// lease again.
#include "borrower.hpp"
#include "client.hpp"
#include "config.hpp"
#include "errors.hpp"
#include "farpass_device.hpp"
#include "lender.hpp"
#include "methods.hpp"
#include "peer_sessions.hpp"
#include "server.hpp"
#include "state_store.hpp"
#include "sysfs.hpp"
#include "tls.hpp"
#include "transport.hpp"
#include "vfio_linux.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <thread>

using namespace farpass::agent;

namespace {

constexpr int tick_ms = 1000;

void log_line(LogLevel level, const std::string &line)
{
	// "<N>" is the sd-daemon priority prefix journald strips and records. One write per line: two
	// threads log.
	const std::string text = "<" + std::to_string(static_cast<int>(level)) + ">" + escape_for_log(line) + "\n";
	std::cerr.write(text.data(), static_cast<std::streamsize>(text.size()));
	std::cerr.flush();
}

int listen_tcp(const std::string &address)
{
	const auto colon = address.rfind(':');
	if (colon == std::string::npos)
		throw AgentError(ErrorCode::invalid_params, "listen address \"" + address + "\" is not host:port");
	addrinfo hints{};
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	addrinfo *found = nullptr;
	if (::getaddrinfo(address.substr(0, colon).c_str(), address.substr(colon + 1).c_str(), &hints, &found) != 0)
		throw AgentError(ErrorCode::invalid_params, "cannot resolve listen address " + address);
	const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	const int on = 1;
	::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	// A long queue: under a connection flood a peer's connect waits its turn instead of losing its SYN.
	const bool ok = fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0;
	::freeaddrinfo(found);
	if (!ok)
		throw_system_error("listening on " + address);
	return fd;
}

int listen_unix(const std::string &path)
{
	sockaddr_un address{};
	address.sun_family = AF_UNIX;
	if (path.size() >= sizeof(address.sun_path))
		throw AgentError(ErrorCode::invalid_params, "socket path too long: " + path);
	std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
	::unlink(path.c_str()); // a stale socket of a previous run
	const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	// 0600 before anyone can connect: only root reaches the CLI socket; SO_PEERCRED checks again.
	const mode_t old_mask = ::umask(0177);
	const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0 &&
			::listen(fd, 16) == 0;
	::umask(old_mask);
	if (!ok)
		throw_system_error("listening on " + path);
	return fd;
}

// Peer host -> this host's NTB towards it, for the lender role's outbound windows.
std::map<std::string, std::string> ntb_links(const std::vector<PeerAddress> &peers)
{
	std::map<std::string, std::string> links;
	for (const PeerAddress &peer : peers)
		if (!peer.ntb.empty())
			links[peer.host] = peer.ntb;
	return links;
}

class Agent {
public:
	explicit Agent(const AgentConfig &config)
		: config_(config), tls_(config.pki, config.host),
		  kernel_(open_device_path(config.device), ntb_links(config.peers)),
		  sessions_(connect_with_tls(), clock_, config.host, static_cast<int>(config.call_timeout_ms), log_line),
		  borrower_sessions_(connect_with_tls(), clock_, config.host, static_cast<int>(config.call_timeout_ms),
				     log_line),
		  store_(config.state_dir), borrower_store_(config.state_dir, "borrower.json"),
		  lender_(sysfs_, vfio_, kernel_, clock_, store_, fd_store_, config.lease_ms,
			  BarWindow{config.bar_slot_bytes, config.bar_window_bytes}, ntb_links(config.peers)),
		  context_{config.host, lender_, clock_.monotonic_ms(), config.peers,
			   [this](const PeerAddress &peer, std::string_view method, const nlohmann::json &params) {
				   return call_peer(peer, method, params);
			   }},
		  dispatcher_(method_table(context_)),
		  borrower_(kernel_, clock_, borrower_store_, config.peers,
			    [this](const PeerAddress &peer, std::string_view method, const nlohmann::json &params,
				   int timeout_ms) { return borrower_sessions_.call(peer, method, params, timeout_ms); },
			    log_line, config.poll_ms)
	{
		if (borrower_stop_ < 0)
			throw_system_error("eventfd");
		context_.borrower = &borrower_;
		for (const std::string &problem : fd_store_.problems())
			log_line(LogLevel::warning, "descriptor store: " + problem);
		borrower_.restore();
		borrower_.start_workers();
		for (const std::string &gone : lender_.restore())
			log_line(LogLevel::warning, gone + " is no longer on this host; forgotten");
		for (const auto &[address, device] : lender_.devices())
			log_line(LogLevel::info, "restored " + address +
							 (device.lease ? " borrowed by " + device.lease->borrower : ""));
		log_lender_notices();
		server_.listen(listen_tcp(config.listen), Principal::peer);
		server_.listen(listen_unix(config.socket), Principal::local_admin);
		sigset_t signals;
		sigemptyset(&signals);
		sigaddset(&signals, SIGTERM);
		sigaddset(&signals, SIGINT);
		sigprocmask(SIG_BLOCK, &signals, nullptr);
		signals_ = ::signalfd(-1, &signals, SFD_CLOEXEC);
		log_line(LogLevel::info, "farpass-agent " + config.host + ": peers on " + config.listen + ", CLI on " +
						 config.socket + ", lease " + std::to_string(config.lease_ms) + " ms");
	}

	~Agent()
	{
		::close(signals_);
		::close(borrower_stop_);
		::unlink(config_.socket.c_str());
	}

	void run()
	{
		std::thread borrower([this] { run_borrower(); });
		serve_requests();
		const std::uint64_t one = 1;
		if (::write(borrower_stop_, &one, sizeof(one)) != sizeof(one))
			throw_system_error("stopping the borrower thread");
		borrower.join();
	}

private:
	void serve_requests()
	{
		while (poll_and_serve(std::min(ms_until(next_tick_ms_), server_.poll_timeout_ms()))) {
			if (clock_.monotonic_ms() >= next_tick_ms_) {
				next_tick_ms_ = clock_.monotonic_ms() + tick_ms;
				// Renewals that arrived while the loop was busy are read before leases expire.
				if (!poll_and_serve(0))
					return;
				for (const ExpiredLease &expired : lender_.expire_due())
					log_line(LogLevel::warning,
						 "lease of " + expired.pci_address + " by " + expired.lease.borrower +
							 (expired.link_down_ms ? " ended, its link down for " +
											 std::to_string(expired.link_down_ms) + " ms"
									       : " expired") +
							 ": device unmapped, reset and free");
			}
			log_lender_notices();
		}
	}

	// One round of the request loop: waits up to timeout_ms, serves what is ready. False on a signal to stop.
	bool poll_and_serve(int timeout_ms)
	{
		std::vector<pollfd> fds = {{signals_, POLLIN, 0}};
		const std::vector<pollfd> served = server_.poll_set();
		fds.insert(fds.end(), served.begin(), served.end());
		if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR)
			throw_system_error("poll");
		if (fds[0].revents) {
			log_line(LogLevel::info, "stopping on signal");
			return false;
		}
		server_.serve(fds.data() + 1, fds.size() - 1);
		return true;
	}

	// The borrower role's loop: upcalls as they come, lenders polled and leases renewed every tick, each
	// queued on its lender's worker. Stopping it leaves the workers to ~Borrower, which waits for a call
	// in flight (at most call_timeout_ms).
	void run_borrower()
	{
		std::int64_t next_tick_ms = 0;
		for (;;) {
			pollfd fds[] = {{borrower_stop_, POLLIN, 0}, {kernel_.upcall_fd(), POLLIN, 0}}; // -1: ignored
			if (::poll(fds, 2, ms_until(next_tick_ms)) < 0 && errno != EINTR)
				throw_system_error("poll");
			if (fds[0].revents)
				return;
			try {
				if (fds[1].revents & POLLIN)
					borrower_.serve_upcalls();
				if (clock_.monotonic_ms() >= next_tick_ms) {
					next_tick_ms = clock_.monotonic_ms() + tick_ms;
					borrower_.tick();
				}
			} catch (const std::exception &e) {
				log_line(LogLevel::error, std::string("borrower: ") + e.what());
			}
		}
	}

	void log_lender_notices()
	{
		for (const std::string &notice : lender_.take_notices())
			log_line(LogLevel::warning, notice);
	}

	// poll(2)'s timeout until a loop's next tick at @tick_at_ms.
	int ms_until(std::int64_t tick_at_ms) const
	{
		return static_cast<int>(std::clamp<std::int64_t>(tick_at_ms - clock_.monotonic_ms(), 0, tick_ms));
	}

	// TCP, then the TLS handshake, within one deadline; the peer must show the certificate of peer.host.
	PeerConnector connect_with_tls() const
	{
		return [this](const PeerAddress &peer, int timeout_ms) -> std::unique_ptr<Transport> {
			auto socket = std::make_unique<SocketTransport>(SocketTransport::connect_tcp(peer.address, timeout_ms));
			socket->set_deadline(timeout_ms);
			return std::make_unique<TlsTransport>(tls_, std::move(socket), peer.host);
		};
	}

	nlohmann::json call_peer(const PeerAddress &peer, std::string_view method, const nlohmann::json &params)
	{
		return sessions_.call(peer, method, params);
	}

	AgentConfig config_;
	TlsContext tls_;
	SystemClock clock_;
	Sysfs sysfs_;
	LinuxVfio vfio_;
	NotifyFdStore fd_store_; // before anything that could start a process: it takes LISTEN_* out of the environment
	FarpassKernelPort kernel_;
	PeerSessions sessions_;		 // cluster.devices' (the server's worker thread): one session per peer, reused
	PeerSessions borrower_sessions_; // the borrower's workers' (each calls its own lender)
	StateStore store_;
	StateStore borrower_store_;
	Lender lender_;
	AgentContext context_;
	Dispatcher dispatcher_;
	Borrower borrower_;
	std::int64_t next_tick_ms_ = 0;
	Server server_{dispatcher_, clock_, config_.host, &tls_, log_line};
	int signals_ = -1;
	int borrower_stop_ = ::eventfd(0, EFD_CLOEXEC); // written once: the borrower thread returns
};

} // namespace

int main(int argc, char **argv)
{
	std::string config_path = "/etc/farpass/agent.conf";
	for (int i = 1; i < argc; i++) {
		const std::string arg = argv[i];
		if (arg == "--config" && i + 1 < argc) {
			config_path = argv[++i];
		} else {
			std::cerr << "usage: farpass-agent [--config PATH]   (default /etc/farpass/agent.conf)\n";
			return arg == "--help" ? 0 : 2;
		}
	}
	try {
		Agent agent(load_config(config_path));
		agent.run();
		return 0;
	} catch (const std::exception &e) { // a bad config or state file, a failed system call, a bug
		log_line(LogLevel::error, std::string("fatal: ") + e.what());
		return 1;
	} catch (...) {
		log_line(LogLevel::error, "fatal: unknown failure");
		return 1;
	}
}
