#include "session.hpp"

#include "errors.hpp"
#include "protocol.hpp"

namespace farpass::agent {

using nlohmann::json;

namespace {

const ParamSchema hello_schema = {
	{"protocol", ParamType::unsigned_integer},
	{"host", ParamType::string},
};

} // namespace

Session::Session(const Dispatcher &dispatcher, SessionConfig config, LogSink log)
	: dispatcher_(dispatcher), config_(std::move(config)), log_(std::move(log))
{
	context_.principal = config_.principal;
	if (config_.principal != Principal::peer)
		return;
	if (config_.tls)
		tls_ = std::make_unique<TlsChannel>(*config_.tls, TlsChannel::Side::server);
	else if (config_.authenticated_host.empty())
		throw AgentError(ErrorCode::internal_error, "a peer session needs TLS or an authenticated host");
	context_.peer_host = config_.authenticated_host;
}

std::string Session::receive(std::string_view bytes)
{
	if (closed_)
		return {};
	if (!tls_)
		return receive_plaintext(bytes);
	try {
		tls_->receive(bytes);
		if (tls_->established() && context_.peer_host.empty()) {
			context_.peer_host = tls_->peer_host();
			log_(LogLevel::info, config_.peer_label + ": TLS with the certificate of " + context_.peer_host);
		}
		tls_->send(receive_plaintext(tls_->take_plaintext()));
		if (tls_->peer_closed())
			end_of_stream();
	} catch (const AgentError &e) {
		// No reply, only TLS's alert: the peer has not shown a certificate of the cluster.
		close(LogLevel::warning, std::string("rejected: ") + e.what());
	}
	return tls_->take_ciphertext();
}

std::string Session::receive_plaintext(std::string_view bytes)
{
	std::string out;
	decoder_.feed(bytes);
	try {
		while (!closed_ && !waiting_) {
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

void Session::cut(const std::string &why)
{
	if (!closed_)
		close(LogLevel::warning, why);
}

std::string Session::handle_payload(std::string_view payload)
{
	if (!greeted_)
		return handshake(payload);
	Dispatched dispatched = dispatcher_.dispatch(payload, context_);
	if (dispatched.later && config_.defer) {
		work_ = std::move(dispatched.later);
		waiting_ = true;
		return {};
	}
	return reply(dispatched.later ? dispatched.later() : dispatched.reply);
}

std::string Session::reply(const json &message)
{
	if (const auto error = message.find("error"); error != message.end())
		log_(LogLevel::info, config_.peer_label + ": request failed: " + dump_message(*error));
	return send(message);
}

std::string Session::resume(const json &message)
{
	if (closed_)
		return {};
	waiting_ = false;
	std::string out = reply(message) + receive_plaintext({});
	if (!tls_)
		return out;
	tls_->send(out);
	return tls_->take_ciphertext();
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
		const std::string host = request.params.at("host");
		// A peer is the host its certificate names, whatever its hello says.
		if (config_.principal == Principal::peer && host != context_.peer_host)
			throw AgentError(ErrorCode::permission_denied, "hello names host \"" + host +
									       "\", but the peer's certificate is for \"" +
									       context_.peer_host + "\"");
		context_.peer_host = host;
		std::string out = send(result_reply(id, {{"protocol", protocol_version}, {"host", config_.local_host}}));
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
	return encode_frame(dump_message(message));
}

void Session::close(LogLevel level, const std::string &why)
{
	closed_ = true;
	log_(level, config_.peer_label + ": " + why + "; closing");
}

} // namespace farpass::agent
