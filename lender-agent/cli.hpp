// farpassctl's logic, apart from its socket: parse the command line, call the agent, print the result
// as text or JSON, and return an exit code a script can rely on.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace farpass::agent {

// Stable exit codes (docs/agent-protocol.md, "farpassctl").
enum CliExit : int {
	exit_ok = 0,
	exit_failed = 1,      // any other error the agent reported
	exit_usage = 2,	      // bad command line
	exit_unreachable = 3, // agent not running, not answering, or connection lost
	exit_busy = 4,	      // device borrowed (EBUSY)
	exit_not_found = 5,   // no such device or lease
	exit_denied = 6,      // not root / not allowed
	exit_already = 7,     // device already lent
};

inline constexpr const char *default_socket = "/run/farpass/agent.sock";

// Calls one method on the agent behind socket_path; throws AgentError.
using AgentCaller =
	std::function<nlohmann::json(const std::string &socket_path, std::string_view method, const nlohmann::json &params)>;

int run_farpassctl(const std::vector<std::string> &args, const AgentCaller &call, std::ostream &out, std::ostream &err);

std::string farpassctl_usage();

// The UUID of an instance of a farpass mdev type: UUIDv5 of the type's "<lender>-<id>" part, so the
// same remote device has the same UUID on every borrower and domain XML moves between them unchanged
// (the libvirt hook maps it back to the type). Throws AgentError (invalid_params) for other names.
std::string farpass_mdev_uuid(std::string_view type_name);

} // namespace farpass::agent
