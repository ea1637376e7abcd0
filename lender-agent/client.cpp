#include "client.hpp"

#include "errors.hpp"
#include "protocol.hpp"

#include <cerrno>

namespace farpass::agent {

using nlohmann::json;

RpcClient::RpcClient(Transport &transport, std::string local_host)
	: transport_(transport), local_host_(std::move(local_host))
{
}

json RpcClient::hello()
{
	return exchange("hello", {{"protocol", protocol_version}, {"host", local_host_}});
}

json RpcClient::call(std::string_view method, const json &params)
{
	return exchange(method, params);
}

json RpcClient::exchange(std::string_view method, const json &params)
{
	if (!usable_)
		throw AgentError(ErrorCode::peer_unreachable, ECONNRESET, "connection unusable after an earlier error");
	usable_ = false; // until the reply is read and checked
	const std::uint64_t id = next_id_++;
	transport_.write(encode_frame(dump_message({{"id", id}, {"method", method}, {"params", params}})));
	std::optional<std::string> payload;
	while (!(payload = decoder_.next(method == "hello" ? max_hello_payload : max_frame_payload))) {
		const std::string bytes = transport_.read_some();
		if (bytes.empty())
			throw AgentError(ErrorCode::peer_unreachable, ECONNRESET, "connection closed by the other agent");
		decoder_.feed(bytes);
	}
	const json reply = parse_json(*payload);
	// A null id is an error about a message the other side could not read at all.
	const json reply_id = reply.is_object() ? reply.value("id", json()) : json();
	if (!reply.is_object() || (reply_id != id && !reply_id.is_null()))
		throw AgentError(ErrorCode::invalid_request, "malformed reply to " + std::string(method));
	usable_ = !reply_id.is_null(); // an id-less reply: the other side could not read our message
	if (const auto error = reply.find("error"); error != reply.end() && error->is_object())
		throw AgentError(static_cast<ErrorCode>(error->value("code", int(ErrorCode::internal_error))),
				 error->value("errno", EIO), error->value("message", "(no message)"));
	const auto result = reply.find("result");
	if (reply_id != id || result == reply.end())
		throw AgentError(ErrorCode::invalid_request, "malformed reply to " + std::string(method));
	return *result;
}

} // namespace farpass::agent
