// The fd store's client (lender-agent/fd_store.cpp) against a real datagram socket, as systemd's
// $NOTIFY_SOCKET or the rig's fp-supervise: what it sends to store and remove descriptors, and what it
// takes from LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES at start (in a child process, whose descriptors
// 3 and up are the test's to set).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "fd_store.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

using namespace farpass::agent;
using namespace farpass::agent::testing;

namespace {

struct Datagram {
	std::string text;
	std::vector<Fd> fds;
};

Datagram receive(int sock)
{
	char text[256];
	alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
	iovec data{text, sizeof(text)};
	msghdr msg{};
	msg.msg_iov = &data;
	msg.msg_iovlen = 1;
	msg.msg_control = control;
	msg.msg_controllen = sizeof(control);
	const ssize_t n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	REQUIRE(n >= 0);
	Datagram got{std::string(text, static_cast<std::size_t>(n)), {}};
	for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
		for (std::size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int fd;
			std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			got.fds.emplace_back(fd);
		}
	return got;
}

// Runs check in a child whose descriptors 3 and 4 are an eventfd and a pipe's read end, with the given
// LISTEN_* environment; its exit status is check's result (0: passed).
int in_child(const char *pid, const char *count, const char *names, int (*check)())
{
	const pid_t child = ::fork();
	if (child == 0) {
		const int efd = ::eventfd(0, 0);
		int pipe_fds[2];
		if (::pipe(pipe_fds) != 0 || ::dup2(efd, 3) != 3 || ::dup2(pipe_fds[0], 4) != 4)
			::_exit(100);
		::setenv("LISTEN_PID", pid ? pid : std::to_string(::getpid()).c_str(), 1);
		::setenv("LISTEN_FDS", count, 1);
		::setenv("LISTEN_FDNAMES", names, 1);
		::unsetenv("NOTIFY_SOCKET");
		::_exit(check());
	}
	int status = 0;
	::waitpid(child, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) >= 0; }

} // namespace

TEST_CASE("store and remove are FDSTORE and FDSTOREREMOVE datagrams to $NOTIFY_SOCKET, with the fds")
{
	TempDir dir;
	const std::string path = (dir.path() / "notify").string();
	const Fd sock(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	sockaddr_un address{};
	address.sun_family = AF_UNIX;
	std::strcpy(address.sun_path, path.c_str());
	REQUIRE(::bind(sock.get(), reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0);
	::setenv("NOTIFY_SOCKET", path.c_str(), 1);
	NotifyFdStore store;
	CHECK(std::getenv("NOTIFY_SOCKET") == nullptr); // nothing the agent starts inherits it
	const Fd eventfd(::eventfd(0, EFD_CLOEXEC));
	const int fds[] = {eventfd.get(), eventfd.get()};
	store.store(vfio_fd_name("0000:00:08.0"), fds);
	Datagram got = receive(sock.get());
	CHECK(got.text == "FDSTORE=1\nFDNAME=vfio.0000-00-08.0");
	REQUIRE(got.fds.size() == 2);
	CHECK(is_eventfd(got.fds[0].get()));
	store.remove("vfio.0000-00-08.0");
	got = receive(sock.get());
	CHECK(got.text == "FDSTOREREMOVE=1\nFDNAME=vfio.0000-00-08.0");
	CHECK(got.fds.empty());
	CHECK(store.take_received().empty());
}

TEST_CASE("without $NOTIFY_SOCKET nothing is stored and nothing fails")
{
	::unsetenv("NOTIFY_SOCKET");
	NotifyFdStore store;
	const int fds[] = {0};
	store.store("vfio.x", fds);
	store.remove("vfio.x");
	CHECK(store.problems().empty());
}

TEST_CASE("LISTEN_FDS from 3 on are taken by name, close-on-exec, and the variables removed")
{
	CHECK(in_child(nullptr, "2", "vfio.a:vfio.b", [] {
		      NotifyFdStore store;
		      auto received = store.take_received();
		      const bool ok = received.size() == 2 && received.at("vfio.a").size() == 1 &&
				      received.at("vfio.a")[0].get() == 3 && received.at("vfio.b")[0].get() == 4 &&
				      ::fcntl(3, F_GETFD) == FD_CLOEXEC && !std::getenv("LISTEN_FDS") &&
				      !std::getenv("LISTEN_PID") && !std::getenv("LISTEN_FDNAMES") &&
				      store.problems().empty() && store.take_received().empty();
		      received.clear();
		      return ok && !is_open(3) && !is_open(4) ? 0 : 1;
	      }) == 0);
	// Several fds under one name (a device's container, group and device).
	CHECK(in_child(nullptr, "2", "vfio.a:vfio.a", [] {
		      NotifyFdStore store;
		      return NotifyFdStore().take_received().empty() && store.take_received().at("vfio.a").size() == 2 ? 0 : 1;
	      }) == 0);
}

TEST_CASE("LISTEN_FDS of another process is left alone; a count or names that do not fit close them")
{
	CHECK(in_child("1", "2", "vfio.a:vfio.b", [] {
		      NotifyFdStore store;
		      return store.take_received().empty() && is_open(3) && is_open(4) &&
					     store.problems() == std::vector<std::string>{"LISTEN_PID \"1\" is not this process: LISTEN_FDS ignored"}
			     ? 0
			     : 1;
	      }) == 0);
	CHECK(in_child(nullptr, "1025", "", [] {
		      NotifyFdStore store;
		      return store.take_received().empty() && is_open(3) && store.problems().size() == 1 ? 0 : 1;
	      }) == 0);
	CHECK(in_child(nullptr, "2", "vfio.a", [] {
		      NotifyFdStore store;
		      return store.take_received().empty() && !is_open(3) && !is_open(4) &&
					     store.problems() == std::vector<std::string>{"LISTEN_FDNAMES names 1 descriptors, "
											  "LISTEN_FDS has 2: closing them"}
			     ? 0
			     : 1;
	      }) == 0);
}
