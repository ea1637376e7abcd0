#include "protocol.hpp"

#include "errors.hpp"

#include <algorithm>
#include <system_error>

namespace farpass::agent {

using nlohmann::json;

namespace {

bool has_type(const json &value, ParamType type)
{
	switch (type) {
	case ParamType::string: return value.is_string();
	case ParamType::unsigned_integer: return value.is_number_unsigned();
	case ParamType::boolean: return value.is_boolean();
	}
	return false;
}

const char *type_name(ParamType type)
{
	switch (type) {
	case ParamType::string: return "a string";
	case ParamType::unsigned_integer: return "an unsigned integer";
	case ParamType::boolean: return "a boolean";
	}
	return "?";
}

json error_object(ErrorCode code, int err, const std::string &message)
{
	return {{"code", static_cast<int>(code)}, {"errno", err}, {"message", message}};
}

} // namespace

json parse_json(std::string_view text, bool comments)
{
	// depth: the number of containers around the one starting.
	const auto limit_depth = [](int depth, json::parse_event_t event, json &) {
		if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
		    depth >= max_json_depth)
			throw AgentError(ErrorCode::parse_error,
					 "JSON nested deeper than " + std::to_string(max_json_depth) + " levels");
		return true;
	};
	json value = json::parse(text, limit_depth, false, comments);
	if (value.is_discarded())
		throw AgentError(ErrorCode::parse_error, "not valid JSON");
	return value;
}

Request parse_request(std::string_view payload, json &id)
{
	json message = parse_json(payload);
	if (!message.is_object())
		throw AgentError(ErrorCode::invalid_request, "message is not a JSON object");
	if (const auto found = message.find("id"); found != message.end() && found->is_number_unsigned())
		id = *found;
	else
		throw AgentError(ErrorCode::invalid_request, "request needs an unsigned integer \"id\"");
	const auto method = message.find("method");
	if (method == message.end() || !method->is_string())
		throw AgentError(ErrorCode::invalid_request, "request needs a string \"method\"");
	json params = message.value("params", json::object());
	if (!params.is_object())
		throw AgentError(ErrorCode::invalid_request, "\"params\" must be an object");
	for (const auto &[key, value] : message.items())
		if (key != "id" && key != "method" && key != "params")
			throw AgentError(ErrorCode::invalid_request, "unknown request member \"" + key + "\"");
	return {id, method->get<std::string>(), std::move(params)};
}

void check_params(const ParamSchema &schema, const json &params)
{
	for (const ParamField &field : schema) {
		const auto value = params.find(field.name);
		if (value == params.end()) {
			if (field.required)
				throw AgentError(ErrorCode::invalid_params,
						 "missing parameter \"" + std::string(field.name) + "\"");
		} else if (!has_type(*value, field.type)) {
			throw AgentError(ErrorCode::invalid_params, "parameter \"" + std::string(field.name) +
									    "\" must be " + type_name(field.type));
		} else if (field.type == ParamType::unsigned_integer) {
			decode_uint(*value, field.name, field.min, field.max);
		}
	}
	for (const auto &item : params.items()) {
		const std::string &name = item.key();
		const bool known = std::any_of(schema.begin(), schema.end(),
					       [&name](const ParamField &field) { return field.name == name; });
		if (!known)
			throw AgentError(ErrorCode::invalid_params, "unknown parameter \"" + name + "\"");
	}
}

std::uint64_t decode_uint(const json &value, std::string_view name, std::uint64_t min, std::uint64_t max)
{
	// Parsed JSON holds non-negative integers as unsigned; JSON built in this process may hold them signed.
	if (value.is_number_unsigned() || (value.is_number_integer() && value.get<std::int64_t>() >= 0)) {
		const auto number = value.get<std::uint64_t>();
		if (number >= min && number <= max)
			return number;
	}
	throw AgentError(ErrorCode::invalid_params, "\"" + std::string(name) + "\" must be an unsigned integer from " +
							    std::to_string(min) + " to " + std::to_string(max) +
							    ", not " + dump_message(value));
}

json result_reply(const json &id, json result)
{
	return {{"id", id}, {"result", std::move(result)}};
}

json error_reply(const json &id, std::exception_ptr failure)
{
	json error;
	try {
		std::rethrow_exception(failure);
	} catch (const AgentError &e) {
		error = error_object(e.code(), e.error_number(), e.what());
	} catch (const json::exception &e) {
		error = error_object(ErrorCode::invalid_params, EINVAL, e.what());
	} catch (const std::system_error &e) {
		error = error_object(ErrorCode::system_error, e.code().value(), e.what());
	} catch (const std::exception &e) {
		error = error_object(ErrorCode::internal_error, EIO, e.what());
	} catch (...) {
		error = error_object(ErrorCode::internal_error, EIO, "unknown failure");
	}
	return {{"id", id}, {"error", std::move(error)}};
}

std::string dump_message(const json &message)
{
	return message.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace farpass::agent
