// farpassctl: the operator's CLI; everything but the socket lives in cli.cpp.
#include "cli.hpp"
#include "client.hpp"
#include "transport.hpp"

#include <unistd.h>

#include <iostream>

using namespace farpass::agent;

namespace {

constexpr int agent_timeout_ms = 10'000; // cluster.devices waits on every peer in turn

nlohmann::json call_agent(const std::string &socket_path, std::string_view method, const nlohmann::json &params)
{
	SocketTransport transport = SocketTransport::connect_unix(socket_path, agent_timeout_ms);
	RpcClient client(transport, "farpassctl");
	client.hello();
	return client.call(method, params);
}

} // namespace

int main(int argc, char **argv)
{
	return run_farpassctl(std::vector<std::string>(argv + 1, argv + argc), call_agent, std::cout, std::cerr);
}
