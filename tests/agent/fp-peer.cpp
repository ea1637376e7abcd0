// fp-peer: a tests-only peer client. It speaks the agent protocol (docs/agent-protocol.md) over TLS as
// another host's agent would, so rig tests can act as a borrower without a kernel trigger.
//
//   fp-peer OPTIONS call METHOD [PARAMS-JSON]
//       one call; prints the result (or {"error": {...}}) as one JSON line; exit 0, or 1 on an error
//   fp-peer OPTIONS hold PCI
//       lease.acquire, print the result, then lease.renew every lease_ms / 3 until killed (the
//       heartbeat of a borrower); an unreachable lender is retried after 1 s, any error answer ends
//       it (exit 1)
// OPTIONS: --pki DIR --host NAME --lender NAME --address HOST:PORT [--claim NAME]: this host's pki
// directory (its certificate names NAME), the lender's host name (its certificate must name it) and
// address; --claim sends another host name in hello than the certificate's (to see it refused).
#include "client.hpp"
#include "errors.hpp"
#include "tls.hpp"
#include "transport.hpp"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

using namespace farpass::agent;
using nlohmann::json;

namespace {

struct Peer {
	std::string pki, host, lender, address, claim;
};

json call(const TlsContext &tls, const Peer &peer, const std::string &method, const json &params)
{
	auto socket = std::make_unique<SocketTransport>(SocketTransport::connect_tcp(peer.address, 5000));
	TlsTransport transport(tls, std::move(socket), peer.lender);
	RpcClient client(transport, peer.claim);
	client.hello();
	return client.call(method, params);
}

int usage()
{
	std::cerr << "usage: fp-peer --pki DIR --host NAME --lender NAME --address HOST:PORT [--claim NAME] call METHOD [PARAMS-JSON]\n"
		     "       fp-peer --pki DIR --host NAME --lender NAME --address HOST:PORT [--claim NAME] hold PCI\n";
	return 2;
}

} // namespace

int main(int argc, char **argv)
{
	Peer peer;
	int i = 1;
	for (; i + 1 < argc && std::string(argv[i]).rfind("--", 0) == 0; i += 2) {
		const std::string option = argv[i];
		if (option == "--pki")
			peer.pki = argv[i + 1];
		else if (option == "--host")
			peer.host = argv[i + 1];
		else if (option == "--lender")
			peer.lender = argv[i + 1];
		else if (option == "--address")
			peer.address = argv[i + 1];
		else if (option == "--claim")
			peer.claim = argv[i + 1];
		else
			return usage();
	}
	if (peer.pki.empty() || peer.host.empty() || peer.lender.empty() || peer.address.empty() || i >= argc)
		return usage();
	if (peer.claim.empty())
		peer.claim = peer.host;
	const std::string command = argv[i++];
	try {
		const TlsContext tls(peer.pki, peer.host);
		if (command == "call" && i < argc) {
			const std::string method = argv[i++];
			const json params = i < argc ? json::parse(argv[i]) : json::object();
			std::cout << call(tls, peer, method, params).dump() << std::endl;
			return 0;
		}
		if (command == "hold" && i < argc) {
			const std::string pci = argv[i];
			const json lease = call(tls, peer, "lease.acquire", {{"pci", pci}});
			std::cout << lease.dump() << std::endl;
			const auto period = std::chrono::milliseconds(lease.at("lease_ms").get<std::int64_t>() / 3);
			for (auto wait = period;; ) {
				std::this_thread::sleep_for(wait);
				try {
					const json renewed = call(tls, peer, "lease.renew",
								  {{"pci", pci}, {"lease", lease.at("lease")}});
					std::cout << "renewed " << renewed.dump() << std::endl;
					wait = period;
				} catch (const AgentError &e) {
					// As the agent does: an unreachable lender (e.g. its agent restarting) is retried
					// after 1 s; any answer but success ends the hold.
					if (e.code() != ErrorCode::peer_unreachable && e.code() != ErrorCode::timed_out)
						throw;
					std::cout << "unreachable, retrying: " << e.what() << std::endl;
					wait = std::chrono::milliseconds(1000);
				}
			}
		}
		return usage();
	} catch (const AgentError &e) {
		std::cout << json{{"error", {{"code", static_cast<int>(e.code())}, {"errno", e.error_number()}, {"message", e.what()}}}}.dump()
			  << std::endl;
		return 1;
	} catch (const std::exception &e) {
		std::cerr << "fp-peer: " << e.what() << "\n";
		return 1;
	}
}
