// fp-peer: a tests-only peer client. It speaks the authenticated agent protocol (docs/agent-protocol.md)
// as another host's agent would, so rig tests can act as a borrower without a kernel trigger.
//
//   fp-peer --key FILE --host NAME --address HOST:PORT call METHOD [PARAMS-JSON]
//       one call; prints the result (or {"error": {...}}) as one JSON line; exit 0, or 1 on an error
//   fp-peer --key FILE --host NAME --address HOST:PORT hold PCI
//       lease.acquire, print the result, then lease.renew every lease_ms / 3 until killed (the
//       heartbeat of a borrower); an unreachable lender is retried after 1 s, any error answer ends
//       it (exit 1)
#include "auth.hpp"
#include "client.hpp"
#include "errors.hpp"
#include "transport.hpp"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

using namespace farpass::agent;
using nlohmann::json;

namespace {

json call(const ClusterKey &key, const std::string &host, const std::string &address, const std::string &method,
	  const json &params)
{
	SocketTransport transport = SocketTransport::connect_tcp(address, 5000);
	RpcClient client(transport, host, &key);
	client.hello();
	return client.call(method, params);
}

int usage()
{
	std::cerr << "usage: fp-peer --key FILE --host NAME --address HOST:PORT call METHOD [PARAMS-JSON]\n"
		     "       fp-peer --key FILE --host NAME --address HOST:PORT hold PCI\n";
	return 2;
}

} // namespace

int main(int argc, char **argv)
{
	std::string key_file, host, address;
	int i = 1;
	for (; i + 1 < argc && std::string(argv[i]).rfind("--", 0) == 0; i += 2) {
		const std::string option = argv[i];
		if (option == "--key")
			key_file = argv[i + 1];
		else if (option == "--host")
			host = argv[i + 1];
		else if (option == "--address")
			address = argv[i + 1];
		else
			return usage();
	}
	if (key_file.empty() || host.empty() || address.empty() || i >= argc)
		return usage();
	const std::string command = argv[i++];
	try {
		const ClusterKey key = ClusterKey::load(key_file);
		if (command == "call" && i < argc) {
			const std::string method = argv[i++];
			const json params = i < argc ? json::parse(argv[i]) : json::object();
			std::cout << call(key, host, address, method, params).dump() << std::endl;
			return 0;
		}
		if (command == "hold" && i < argc) {
			const std::string pci = argv[i];
			const json lease = call(key, host, address, "lease.acquire", {{"pci", pci}});
			std::cout << lease.dump() << std::endl;
			const auto period = std::chrono::milliseconds(lease.at("lease_ms").get<std::int64_t>() / 3);
			for (auto wait = period;; ) {
				std::this_thread::sleep_for(wait);
				try {
					const json renewed = call(key, host, address, "lease.renew",
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
