#include "session.hpp"

#include "errors.hpp"
#include "protocol.hpp"

namespace farpass::agent {

using nlohmann::json;

namespace {

const ParamSchema hello_schema = {
	{"protocol", ParamType::unsigned_integer},
	{"host", ParamType::string},
	{"nonce", ParamType::string, false},
};

} // namespace

Session::Session(const Dispatcher &dispatcher, SessionConfig config, LogSink log)
	: dispatcher_(dispatcher), config_(std::move(config)), log_(std::move(log))
{
	if (config_.principal == Principal::peer) {
		if (!config_.key)
			throw AgentError(ErrorCode::internal_error, "a peer session needs the cluster key");
		auth_.emplace(*config_.key, Role::server);
	}
	context_.principal = config_.principal;
}

std::string Session::receive(std::string_view bytes)
{
	std::string out;
	if (closed_)
		return out;
	decoder_.feed(bytes);
	try {
		while (!closed_) {
			const auto payload = decoder_.next(greeted_ ? max_frame_payload : max_hello_payload);
			if (!payload)
				break;
			out += handle_payload(*payload);
		}
	} catch (const AgentError &e) { // only framing throws here: the stream cannot be resynchronised
		out += send(error_reply(nullptr, std::current_exception()));
		close(LogLevel::warning, e.what());
	}
	return out;
}

void Session::end_of_stream()
{
	if (closed_)
		return;
	if (decoder_.mid_frame())
		close(LogLevel::warning, "connection closed in the middle of a message");
	else
		close(LogLevel::info, "connection closed");
}

std::string Session::handle_payload(std::string_view payload)
{
	std::string body;
	if (auth_) {
		try {
			body = auth_->open(payload);
		} catch (const AgentError &e) {
			// No reply: the sender has not shown it holds the key.
			close(LogLevel::warning, std::string("rejected: ") + e.what());
			return {};
		}
	} else {
		body = payload;
	}
	if (!greeted_)
		return handshake(body);
	const json reply = dispatcher_.handle(body, context_);
	if (const auto error = reply.find("error"); error != reply.end())
		log_(LogLevel::info, config_.peer_label + ": request failed: " + dump_message(*error));
	return send(reply);
}

std::string Session::handshake(std::string_view body)
{
	json id = nullptr;
	try {
		const Request request = parse_request(body, id);
		if (request.method != "hello")
			throw AgentError(ErrorCode::invalid_request, "the first message must be hello, not " + request.method);
		check_params(hello_schema, request.params);
		const std::uint64_t version = request.params.at("protocol");
		if (version != protocol_version)
			throw AgentError(ErrorCode::version_mismatch, "protocol version " + std::to_string(version) +
									      " is not supported; this agent speaks " +
									      std::to_string(protocol_version));
		json result = {{"protocol", protocol_version}, {"host", config_.local_host}};
		std::string client_nonce, server_nonce;
		if (auth_) {
			client_nonce = from_hex(request.params.value("nonce", ""));
			if (client_nonce.size() != nonce_size)
				throw AgentError(ErrorCode::invalid_params,
						 "hello needs a " + std::to_string(nonce_size) + "-byte hex nonce");
			server_nonce = random_bytes(nonce_size);
			result["nonce"] = to_hex(server_nonce);
		}
		context_.peer_host = request.params.at("host");
		std::string out = send(result_reply(id, result));
		if (auth_)
			auth_->establish(client_nonce, server_nonce);
		greeted_ = true;
		log_(LogLevel::info, config_.peer_label + ": hello from " + context_.peer_host);
		return out;
	} catch (const AgentError &e) {
		std::string out = send(error_reply(id, std::current_exception()));
		close(LogLevel::warning, std::string("hello refused: ") + e.what());
		return out;
	}
}

std::string Session::send(const json &message)
{
	const std::string body = dump_message(message);
	return encode_frame(auth_ ? auth_->seal(body) : body);
}

void Session::close(LogLevel level, const std::string &why)
{
	closed_ = true;
	log_(level, config_.peer_label + ": " + why + "; closing");
}

} // namespace farpass::agent
