// lan-hub: the rig's management LAN, an Ethernet hub made of one UDP socket on 127.0.0.1.
//
// Each L1 QEMU has `-netdev socket,udp=127.0.0.1:HUB,localaddr=127.0.0.1:PORT`: it sends every Ethernet
// frame as one datagram to HUB and receives frames on PORT. The hub repeats each frame to every other VM
// port. Only loopback unicast: no multicast group, no tap device, no privileges, nothing leaves the
// machine.
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>

namespace {

constexpr std::string_view usage = R"(usage: lan-hub --tag RIGDIR HUB_PORT VM_PORT...
Repeats every UDP datagram received on 127.0.0.1:HUB_PORT to 127.0.0.1:VM_PORT for every VM_PORT but
the sender's. --tag only names the rig in the process list (rig.sh finds its hub by it).
)";

// A port number, or 0 when S is not one.
std::uint16_t port(std::string_view s)
{
	unsigned v = 0;
	const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
	if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || v > 65535)
		return 0;
	return static_cast<std::uint16_t>(v);
}

sockaddr_in loopback(std::uint16_t port)
{
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

[[noreturn]] void fail(const char *what)
{
	throw std::system_error(errno, std::generic_category(), what);
}

[[noreturn]] void run_hub(std::uint16_t hub_port, std::span<const std::uint16_t> vm_ports)
{
	const int sock = socket(AF_INET, SOCK_DGRAM, 0);
	if (sock < 0)
		fail("socket");
	const sockaddr_in hub = loopback(hub_port);
	if (bind(sock, reinterpret_cast<const sockaddr *>(&hub), sizeof hub) < 0) {
		const int err = errno; // before building the message, which may allocate
		throw std::system_error(err, std::generic_category(), "bind 127.0.0.1:" + std::to_string(hub_port));
	}
	std::vector<char> frame(65536);
	for (;;) {
		sockaddr_in src{};
		socklen_t src_len = sizeof src;
		const ssize_t n = recvfrom(sock, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr *>(&src),
			&src_len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			fail("recvfrom");
		}
		for (const std::uint16_t p : vm_ports) {
			if (htons(p) == src.sin_port)
				continue;
			const sockaddr_in dst = loopback(p);
			// Errors ignored: that VM is down (rig_kill), so drop, as a hub port with no cable would.
			sendto(sock, frame.data(), static_cast<std::size_t>(n), 0, reinterpret_cast<const sockaddr *>(&dst),
				sizeof dst);
		}
	}
}

} // namespace

int main(int argc, char **argv)
{
	const std::vector<std::string_view> args(argv + 1, argv + argc);
	if (args.size() < 4 || args[0] != "--tag") {
		std::cerr << usage;
		return 2;
	}
	std::vector<std::uint16_t> ports;
	for (const std::string_view a : std::span(args).subspan(2)) {
		ports.push_back(port(a));
		if (ports.back() == 0) {
			std::cerr << "lan-hub: bad port '" << a << "' (1 to 65535)\n" << usage;
			return 2;
		}
	}
	try {
		run_hub(ports[0], std::span(ports).subspan(1));
	} catch (const std::exception &e) {
		std::cerr << "lan-hub: " << e.what() << std::endl;
		return 1;
	}
}
