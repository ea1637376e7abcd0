#include "dispatcher.hpp"

#include "errors.hpp"

#include <algorithm>

namespace farpass::agent {

using nlohmann::json;

json Dispatcher::handle(std::string_view payload, const CallContext &context) const
{
	json id = nullptr;
	try {
		const Request request = parse_request(payload, id);
		const auto method = std::find_if(methods_.begin(), methods_.end(),
						 [&request](const Method &m) { return m.name == request.method; });
		if (method == methods_.end())
			throw AgentError(ErrorCode::unknown_method, "unknown method \"" + request.method + "\"");
		const unsigned needed = context.principal == Principal::peer ? peer_access : local_admin_access;
		if (!(method->access & needed))
			throw AgentError(ErrorCode::permission_denied,
					 request.method + " is not allowed " +
						 (context.principal == Principal::peer ? "to peers" : "from the CLI"));
		check_params(method->params, request.params);
		return result_reply(id, method->handler(request.params, context));
	} catch (...) {
		return error_reply(id, std::current_exception());
	}
}

} // namespace farpass::agent
