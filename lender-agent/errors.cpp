#include "errors.hpp"

#include <cerrno>
#include <cstring>

namespace farpass::agent {

int default_errno(ErrorCode code)
{
	switch (code) {
	case ErrorCode::parse_error: return EBADMSG;
	case ErrorCode::invalid_request: return EINVAL;
	case ErrorCode::version_mismatch: return EPROTONOSUPPORT;
	case ErrorCode::unknown_method: return ENOSYS;
	case ErrorCode::invalid_params: return EINVAL;
	case ErrorCode::permission_denied: return EACCES;
	case ErrorCode::message_too_large: return EMSGSIZE;
	case ErrorCode::authentication_failed: return EKEYREJECTED;
	case ErrorCode::no_such_device: return ENODEV;
	case ErrorCode::device_busy: return EBUSY;
	case ErrorCode::no_such_lease: return ENOENT;
	case ErrorCode::already_lent: return EEXIST;
	case ErrorCode::timed_out: return ETIMEDOUT;
	case ErrorCode::peer_unreachable: return EHOSTUNREACH;
	case ErrorCode::system_error: return EIO;
	case ErrorCode::internal_error: return EIO;
	}
	return EIO;
}

void throw_system_error(const std::string &what)
{
	const int err = errno;
	throw AgentError(ErrorCode::system_error, err, what + ": " + std::strerror(err));
}

} // namespace farpass::agent
