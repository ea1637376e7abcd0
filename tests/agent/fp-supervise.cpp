// fp-supervise: the rig's stand-in for systemd's service manager, for the one thing the agent needs of it
// across restarts: the file-descriptor store (docs/agent-protocol.md, "Restarts keep the device"). The
// rig's L1 hosts run no systemd.
//
//   fp-supervise --socket PATH --pidfile FILE -- COMMAND [ARGS...]
//
// Runs COMMAND with NOTIFY_SOCKET=PATH (a datagram socket it binds) and, from its second start on,
// LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES with the stored descriptors from 3 on, as systemd does.
// Datagrams from the running child only (NotifyAccess=main): FDSTORE=1 with FDNAME=N keeps the attached
// descriptors under N (at most 64 in all, FileDescriptorStoreMax=64; more are closed), FDSTOREREMOVE=1
// with FDNAME=N closes N's. The child's pid is written to FILE at each start. A child that ends other
// than with exit status 0 is started again after 500 ms (Restart=on-failure), at most 20 times; status 0
// ends the supervisor (and closes the store). SIGTERM or SIGINT is passed on to the child. Every event is
// one line on stderr ("fp-supervise: ...").
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr std::size_t store_max = 64;
constexpr int restart_max = 20;

void say(const std::string &line)
{
	std::fprintf(stderr, "fp-supervise: %s\n", line.c_str());
}

[[noreturn]] void die(const std::string &what)
{
	say(what + ": " + std::strerror(errno));
	std::exit(1);
}

std::map<std::string, std::vector<int>> store;

std::size_t stored_count()
{
	std::size_t n = 0;
	for (const auto &[name, fds] : store)
		n += fds.size();
	return n;
}

void close_all(const std::vector<int> &fds)
{
	for (const int fd : fds)
		::close(fd);
}

// In the child: the stored descriptors at 3, 4, ... (dup2 of a copy above that range, so none is
// overwritten before it is moved), nothing else above 2, then COMMAND.
[[noreturn]] void exec_child(char **command, const std::string &socket_path)
{
	std::vector<int> order;
	std::string names;
	const int first_free = 3 + static_cast<int>(stored_count());
	for (const auto &[name, fds] : store)
		for (const int fd : fds) {
			const int high = ::fcntl(fd, F_DUPFD, first_free);
			if (high < 0)
				die("F_DUPFD");
			order.push_back(high);
			names += (names.empty() ? "" : ":") + name;
		}
	for (std::size_t i = 0; i < order.size(); i++)
		if (::dup2(order[i], 3 + static_cast<int>(i)) < 0)
			die("dup2");
	::close_range(3 + static_cast<unsigned>(order.size()), ~0u, 0);
	::setenv("NOTIFY_SOCKET", socket_path.c_str(), 1);
	if (!order.empty()) {
		::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
		::setenv("LISTEN_FDS", std::to_string(order.size()).c_str(), 1);
		::setenv("LISTEN_FDNAMES", names.c_str(), 1);
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, nullptr);
	::execvp(command[0], command);
	die(std::string("exec ") + command[0]);
}

pid_t start(char **command, const std::string &socket_path, const std::string &pidfile)
{
	const pid_t pid = ::fork();
	if (pid < 0)
		die("fork");
	if (pid == 0)
		exec_child(command, socket_path);
	const std::string tmp = pidfile + ".tmp";
	FILE *f = std::fopen(tmp.c_str(), "w");
	if (!f || std::fprintf(f, "%d\n", pid) < 0 || std::fclose(f) != 0 || std::rename(tmp.c_str(), pidfile.c_str()) != 0)
		die("writing " + pidfile);
	std::string names;
	for (const auto &[name, fds] : store)
		names += " " + name + "(" + std::to_string(fds.size()) + ")";
	say("started " + std::string(command[0]) + " as pid " + std::to_string(pid) + " with " +
	    std::to_string(stored_count()) + " stored descriptors" + names);
	return pid;
}

// One datagram: its text, descriptors and sender's pid (SO_PASSCRED).
void receive(int sock, pid_t child)
{
	char text[4096];
	alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 253) + CMSG_SPACE(sizeof(ucred))];
	iovec data{text, sizeof(text) - 1};
	msghdr msg{};
	msg.msg_iov = &data;
	msg.msg_iovlen = 1;
	msg.msg_control = control;
	msg.msg_controllen = sizeof(control);
	const ssize_t n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return;
	std::vector<int> fds;
	pid_t sender = 0;
	for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			for (std::size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int fd;
				std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				fds.push_back(fd);
			}
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
			ucred cred;
			std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
			sender = cred.pid;
		}
	}
	if (sender != child || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		say("datagram from pid " + std::to_string(sender) + " (not the child, or truncated): ignored");
		close_all(fds);
		return;
	}
	text[n] = '\0';
	std::map<std::string, std::string> fields;
	for (char *line = std::strtok(text, "\n"); line; line = std::strtok(nullptr, "\n"))
		if (char *eq = std::strchr(line, '='))
			fields[std::string(line, eq)] = eq + 1;
	const std::string name = fields.count("FDNAME") ? fields["FDNAME"] : "stored";
	if (fields["FDSTORE"] == "1") {
		for (const int fd : fds) {
			if (stored_count() >= store_max) {
				say("store full (" + std::to_string(store_max) + "): descriptor for " + name + " closed");
				::close(fd);
				continue;
			}
			store[name].push_back(fd);
		}
		say("stored " + std::to_string(fds.size()) + " descriptors under " + name);
		return;
	}
	close_all(fds);
	if (fields["FDSTOREREMOVE"] == "1" && store.count(name)) {
		close_all(store[name]);
		store.erase(name);
		say("removed " + name);
	}
}

} // namespace

int main(int argc, char **argv)
{
	std::string socket_path, pidfile;
	int i = 1;
	for (; i + 1 < argc && std::strcmp(argv[i], "--") != 0; i += 2) {
		if (!std::strcmp(argv[i], "--socket"))
			socket_path = argv[i + 1];
		else if (!std::strcmp(argv[i], "--pidfile"))
			pidfile = argv[i + 1];
		else
			break;
	}
	if (socket_path.empty() || pidfile.empty() || i + 1 >= argc || std::strcmp(argv[i], "--") != 0) {
		std::fprintf(stderr, "usage: fp-supervise --socket PATH --pidfile FILE -- COMMAND [ARGS...]\n");
		return 2;
	}
	char **command = argv + i + 1;

	const int sock = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	sockaddr_un address{};
	address.sun_family = AF_UNIX;
	if (sock < 0 || socket_path.size() >= sizeof(address.sun_path))
		die("socket " + socket_path);
	std::memcpy(address.sun_path, socket_path.data(), socket_path.size());
	::unlink(socket_path.c_str());
	const int on = 1;
	if (::bind(sock, reinterpret_cast<sockaddr *>(&address), sizeof(address)) != 0 ||
	    ::setsockopt(sock, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0)
		die("binding " + socket_path);
	sigset_t signals;
	sigemptyset(&signals);
	for (const int s : {SIGCHLD, SIGTERM, SIGINT})
		sigaddset(&signals, s);
	sigprocmask(SIG_BLOCK, &signals, nullptr);
	const int sfd = ::signalfd(-1, &signals, SFD_CLOEXEC);
	if (sfd < 0)
		die("signalfd");

	pid_t child = start(command, socket_path, pidfile);
	int restarts = 0;
	bool stopping = false;
	for (;;) {
		pollfd fds[] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
		if (::poll(fds, 2, -1) < 0 && errno != EINTR)
			die("poll");
		if (fds[0].revents & POLLIN)
			receive(sock, child);
		if (!(fds[1].revents & POLLIN))
			continue;
		signalfd_siginfo info;
		if (::read(sfd, &info, sizeof(info)) != sizeof(info))
			continue;
		if (info.ssi_signo != SIGCHLD) {
			say("signal " + std::to_string(info.ssi_signo) + ": passed on to pid " + std::to_string(child));
			stopping = true;
			::kill(child, static_cast<int>(info.ssi_signo));
			continue;
		}
		int status = 0;
		if (::waitpid(child, &status, WNOHANG) != child)
			continue;
		// What it sent before it ended is still queued: read it before judging the store.
		while (::recv(sock, nullptr, 0, MSG_PEEK | MSG_DONTWAIT) >= 0)
			receive(sock, child);
		const std::string how = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
							   : "killed by signal " + std::to_string(WTERMSIG(status));
		if (stopping || (WIFEXITED(status) && WEXITSTATUS(status) == 0) || restarts >= restart_max) {
			say("pid " + std::to_string(child) + " " + how + ": stopping, the store closed");
			return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
		}
		say("pid " + std::to_string(child) + " " + how + ": starting it again");
		::usleep(500'000);
		restarts++;
		child = start(command, socket_path, pidfile);
	}
}
