// Numbered protocol errors and the one exception type that carries them to the error boundary.
#pragma once

#include <string>
#include <stdexcept>

namespace farpass::agent {

// Wire ABI (docs/agent-protocol.md, "Errors"): numbers are never reused or renumbered.
enum class ErrorCode : int {
	parse_error = 1,
	invalid_request = 2,
	version_mismatch = 3,
	unknown_method = 4,
	invalid_params = 5,
	permission_denied = 6,
	message_too_large = 7,
	authentication_failed = 8,
	no_such_device = 10,
	device_busy = 11,
	no_such_lease = 12,
	already_lent = 13,
	timed_out = 14,
	peer_unreachable = 15,
	system_error = 20,
	internal_error = 21,
};

// The errno a code carries unless the failing system call supplied its own.
int default_errno(ErrorCode code);

class AgentError : public std::runtime_error {
public:
	AgentError(ErrorCode code, std::string message) : AgentError(code, default_errno(code), std::move(message)) {}
	AgentError(ErrorCode code, int err, std::string message)
		: std::runtime_error(std::move(message)), code_(code), errno_(err)
	{
	}

	ErrorCode code() const { return code_; }
	int error_number() const { return errno_; }

private:
	ErrorCode code_;
	int errno_;
};

// A failed system call: captures errno and names what was being done.
[[noreturn]] void throw_system_error(const std::string &what);

} // namespace farpass::agent
