#include "dispatcher.hpp"

#include "errors.hpp"

#include <algorithm>

namespace farpass::agent {

using nlohmann::json;

json Dispatcher::handle(std::string_view payload, const CallContext &context) const
{
	Dispatched dispatched = dispatch(payload, context);
	return dispatched.later ? dispatched.later() : std::move(dispatched.reply);
}

Dispatched Dispatcher::dispatch(std::string_view payload, const CallContext &context) const
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
		json handled = method->handler(request.params, context);
		if (!method->off_loop)
			return {result_reply(id, std::move(handled)), nullptr};
		return {nullptr, [id, off_loop = method->off_loop, handled = std::move(handled)] {
				try {
					return result_reply(id, off_loop(handled));
				} catch (...) {
					return error_reply(id, std::current_exception());
				}
			}};
	} catch (...) {
		return {error_reply(id, std::current_exception()), nullptr};
	}
}

} // namespace farpass::agent
