// link-relay: a cable between the two halves of an emulated NTB link that the rig can pull out.
//
// The lender's ntb-epf listens on UPSTREAM (server=on); the borrower's connects to LISTEN instead
// (server=off). For each borrower connection the relay connects to UPSTREAM and copies bytes both ways
// unchanged. SIGUSR1 pulls the cable: both connections are closed (each QEMU sees its peer gone: link
// down) and any new borrower connection is closed at once. SIGUSR2 plugs it back: the borrower's next
// reconnect (ntb-epf retries on a timer) is relayed again. Each event is logged with the monotonic time.
#include <array>
#include <cerrno>
#include <cstdio>
#include <csignal>
#include <cstring>
#include <ctime>
#include <iostream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace {

constexpr std::string_view usage = R"(usage: link-relay --tag RIGDIR LISTEN UPSTREAM
Relays each connection to the UNIX socket LISTEN to a new connection to the UNIX socket UPSTREAM.
SIGUSR1 cuts the link (closes both, refuses new ones), SIGUSR2 restores it. --tag only names the rig in
the process list (rig.sh finds its relay by it).
)";

// A direction stops reading while this much is still to be written: a stalled peer bounds our memory.
constexpr std::size_t max_backlog = 8 << 20;

[[noreturn]] void fail(const std::string &what)
{
	throw std::system_error(errno, std::generic_category(), what);
}

void log(const std::string &what)
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	char stamp[32];
	std::snprintf(stamp, sizeof stamp, "%lld.%03ld", static_cast<long long>(ts.tv_sec), ts.tv_nsec / 1000000);
	std::cerr << "link-relay [" << stamp << "] " << what << std::endl;
}

sockaddr_un unix_address(const std::string &path)
{
	sockaddr_un a{};
	a.sun_family = AF_UNIX;
	if (path.size() >= sizeof a.sun_path)
		throw std::runtime_error("socket path too long: " + path);
	std::memcpy(a.sun_path, path.data(), path.size());
	return a;
}

void set_nonblock(int fd)
{
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
		fail("fcntl");
}

// Bytes read from one end and not yet written to the other.
struct Direction {
	std::vector<char> pending;
	std::size_t sent = 0;

	bool full() const { return pending.size() - sent >= max_backlog; }
	bool empty() const { return sent == pending.size(); }
};

class Relay {
public:
	Relay(const std::string &listen_path, const std::string &upstream) : upstream_(unix_address(upstream))
	{
		const sockaddr_un a = unix_address(listen_path);
		listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (listen_fd_ < 0)
			fail("socket");
		unlink(listen_path.c_str());
		if (bind(listen_fd_, reinterpret_cast<const sockaddr *>(&a), sizeof a) < 0)
			fail("bind " + listen_path);
		if (listen(listen_fd_, 4) < 0)
			fail("listen");
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, SIGUSR1);
		sigaddset(&set, SIGUSR2);
		if (sigprocmask(SIG_BLOCK, &set, nullptr) < 0)
			fail("sigprocmask");
		signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC);
		if (signal_fd_ < 0)
			fail("signalfd");
	}

	[[noreturn]] void run()
	{
		for (;;) {
			std::array<pollfd, 4> p{};
			p[0] = {signal_fd_, POLLIN, 0};
			p[1] = {listen_fd_, POLLIN, 0};
			p[2] = {-1, 0, 0};
			p[3] = {-1, 0, 0};
			if (connected()) {
				p[2] = {fd_[0], events(0), 0};
				p[3] = {fd_[1], events(1), 0};
			}
			if (poll(p.data(), p.size(), -1) < 0) {
				if (errno == EINTR)
					continue;
				fail("poll");
			}
			if (p[0].revents)
				on_signal();
			else if (connected() && !(receive(0, p[2].revents) && receive(1, p[3].revents) && flush(0) &&
						   flush(1)))
				drop("a peer closed or failed");
			if (p[1].revents & POLLIN)
				on_accept();
		}
	}

private:
	bool connected() const { return fd_[0] >= 0; }

	// End I reads into dir_[I] and writes dir_[1 - I].
	short events(int i) const
	{
		return static_cast<short>((dir_[i].full() ? 0 : POLLIN) | (dir_[1 - i].empty() ? 0 : POLLOUT));
	}

	// Reads what end I has ready; false once it closed or failed.
	bool receive(int i, short revents)
	{
		if (revents & POLLIN) {
			char buf[65536];
			const ssize_t n = read(fd_[i], buf, sizeof buf);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
				return false;
			if (n > 0)
				dir_[i].pending.insert(dir_[i].pending.end(), buf, buf + n);
		} else if (revents & (POLLERR | POLLHUP | POLLNVAL)) {
			return false;
		}
		return true;
	}

	// Writes what direction I holds to the end it goes to (end 1 - I); false on a write error.
	bool flush(int i)
	{
		Direction &d = dir_[i];
		while (!d.empty()) {
			const ssize_t n = write(fd_[1 - i], d.pending.data() + d.sent, d.pending.size() - d.sent);
			if (n < 0)
				return errno == EAGAIN || errno == EINTR;
			d.sent += static_cast<std::size_t>(n);
		}
		d.pending.clear();
		d.sent = 0;
		return true;
	}

	void drop(const std::string &why)
	{
		for (int &fd : fd_) {
			if (fd >= 0)
				close(fd);
			fd = -1;
		}
		dir_ = {};
		log("link down: " + why);
	}

	void on_signal()
	{
		signalfd_siginfo si{};
		if (read(signal_fd_, &si, sizeof si) != sizeof si)
			fail("read signalfd");
		if (si.ssi_signo == SIGUSR1 && !cut_) {
			cut_ = true;
			log("cut");
			if (connected())
				drop("cut");
		} else if (si.ssi_signo == SIGUSR2 && cut_) {
			cut_ = false;
			log("restored: the next borrower connection is relayed");
		}
	}

	void on_accept()
	{
		const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		// An NTB has exactly one peer; while cut, the borrower's retries find no cable.
		if (cut_ || connected()) {
			close(fd);
			return;
		}
		const int up = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (up < 0)
			fail("socket");
		if (connect(up, reinterpret_cast<const sockaddr *>(&upstream_), sizeof upstream_) < 0) {
			// The lender is not (yet) listening: the borrower retries.
			close(up);
			close(fd);
			return;
		}
		set_nonblock(up);
		fd_ = {fd, up};
		log("link relayed");
	}

	sockaddr_un upstream_;
	int listen_fd_ = -1;
	int signal_fd_ = -1;
	std::array<int, 2> fd_{-1, -1}; // the borrower's end, the lender's end
	std::array<Direction, 2> dir_{};
	bool cut_ = false;
};

} // namespace

int main(int argc, char **argv)
{
	const std::vector<std::string_view> args(argv + 1, argv + argc);
	if (args.size() != 4 || args[0] != "--tag") {
		std::cerr << usage;
		return 2;
	}
	try {
		Relay(std::string(args[2]), std::string(args[3])).run();
	} catch (const std::exception &e) {
		std::cerr << "link-relay: " << e.what() << std::endl;
		return 1;
	}
}
