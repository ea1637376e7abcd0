#include "fd_store.hpp"

#include "errors.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace farpass::agent {

namespace {

constexpr int first_listen_fd = 3;	 // SD_LISTEN_FDS_START
constexpr std::uint64_t max_listen_fds = 1024; // far above the unit's FileDescriptorStoreMax

// The variable's value, removed from the environment (nothing the agent starts inherits it).
std::string take_env(const char *name)
{
	const char *value = std::getenv(name);
	std::string taken = value ? value : "";
	::unsetenv(name);
	return taken;
}

bool parse_decimal(const std::string &text, std::uint64_t &value)
{
	const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
	return !text.empty() && error == std::errc() && end == text.data() + text.size();
}

std::vector<std::string> split_names(const std::string &names)
{
	std::vector<std::string> parts;
	std::size_t start = 0;
	for (;;) {
		const std::size_t colon = names.find(':', start);
		parts.push_back(names.substr(start, colon - start));
		if (colon == std::string::npos)
			return parts;
		start = colon + 1;
	}
}

} // namespace

std::string vfio_fd_name(const std::string &pci_address)
{
	std::string name = "vfio." + pci_address;
	std::replace(name.begin(), name.end(), ':', '-');
	return name;
}

NotifyFdStore::NotifyFdStore() : socket_path_(take_env("NOTIFY_SOCKET"))
{
	const std::string pid = take_env("LISTEN_PID"), count = take_env("LISTEN_FDS"),
			  names = take_env("LISTEN_FDNAMES");
	if (count.empty())
		return;
	std::uint64_t listen_pid = 0, n = 0;
	// Another process's descriptors (LISTEN_PID not ours) are not ours to close either.
	if (!parse_decimal(pid, listen_pid) || listen_pid != static_cast<std::uint64_t>(::getpid())) {
		problems_.push_back("LISTEN_PID \"" + pid + "\" is not this process: LISTEN_FDS ignored");
		return;
	}
	if (!parse_decimal(count, n) || n > max_listen_fds) {
		problems_.push_back("LISTEN_FDS \"" + count + "\" is not a count from 0 to " +
				    std::to_string(max_listen_fds) + ": ignored");
		return;
	}
	const std::vector<std::string> split = split_names(names);
	const bool named = split.size() == n;
	if (!named)
		problems_.push_back("LISTEN_FDNAMES names " + std::to_string(split.size()) + " descriptors, LISTEN_FDS " +
				    "has " + std::to_string(n) + ": closing them");
	for (std::uint64_t i = 0; i < n; i++) {
		const int fd = first_listen_fd + static_cast<int>(i);
		if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
			problems_.push_back("LISTEN_FDS descriptor " + std::to_string(fd) + " is not open");
			continue;
		}
		Fd owned(fd);
		if (named)
			received_[split[i]].push_back(std::move(owned));
	}
}

std::map<std::string, std::vector<Fd>> NotifyFdStore::take_received()
{
	return std::exchange(received_, {});
}

void NotifyFdStore::store(const std::string &name, std::span<const int> fds)
{
	send("FDSTORE=1\nFDNAME=" + name, fds);
}

void NotifyFdStore::remove(const std::string &name)
{
	send("FDSTOREREMOVE=1\nFDNAME=" + name, {});
}

void NotifyFdStore::send(const std::string &message, std::span<const int> fds)
{
	if (socket_path_.empty())
		return;
	sockaddr_un address{};
	address.sun_family = AF_UNIX;
	// A path, or '@' for the abstract namespace (sd_notify(3)).
	if ((socket_path_[0] != '/' && socket_path_[0] != '@') || socket_path_.size() >= sizeof(address.sun_path))
		throw AgentError(ErrorCode::system_error, EINVAL, "NOTIFY_SOCKET \"" + socket_path_ + "\" is no socket address");
	std::memcpy(address.sun_path, socket_path_.data(), socket_path_.size());
	if (address.sun_path[0] == '@')
		address.sun_path[0] = '\0';
	const Fd sock(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	if (sock.get() < 0)
		throw_system_error("socket for NOTIFY_SOCKET");
	iovec data{const_cast<char *>(message.data()), message.size()};
	msghdr msg{};
	msg.msg_name = &address;
	msg.msg_namelen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_path_.size());
	msg.msg_iov = &data;
	msg.msg_iovlen = 1;
	std::vector<std::byte> control(CMSG_SPACE(sizeof(int) * fds.size()));
	if (!fds.empty()) {
		msg.msg_control = control.data();
		msg.msg_controllen = control.size();
		cmsghdr *header = CMSG_FIRSTHDR(&msg);
		header->cmsg_level = SOL_SOCKET;
		header->cmsg_type = SCM_RIGHTS;
		header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
		std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
	}
	if (::sendmsg(sock.get(), &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(message.size()))
		throw_system_error("sending \"" + message.substr(0, message.find('\n')) + "\" to NOTIFY_SOCKET " + socket_path_);
}

} // namespace farpass::agent
