// Messages: requests {id, method, params}, replies {id, result} or {id, error: {code, errno, message}}.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace farpass::agent {

inline constexpr std::uint64_t protocol_version = 1;

struct Request {
	nlohmann::json id;
	std::string method;
	nlohmann::json params; // always an object
};

// Parses and checks the envelope; id is set as soon as it is known so an error reply can carry it.
// Throws AgentError(parse_error or invalid_request).
Request parse_request(std::string_view payload, nlohmann::json &id);

enum class ParamType { string, unsigned_integer, boolean };

struct ParamField {
	std::string_view name;
	ParamType type;
	bool required = true;
};

using ParamSchema = std::vector<ParamField>;

// Missing required fields, fields of the wrong JSON type and unknown fields are AgentError(invalid_params).
void check_params(const ParamSchema &schema, const nlohmann::json &params);

nlohmann::json result_reply(const nlohmann::json &id, nlohmann::json result);

// The error boundary: every failure becomes a numbered protocol error. AgentError keeps its code and
// errno; JSON access errors are invalid_params; system errors keep their errno; anything else is an
// internal_error.
nlohmann::json error_reply(const nlohmann::json &id, std::exception_ptr failure);

// Serialises a message; invalid UTF-8 is replaced rather than thrown on.
std::string dump_message(const nlohmann::json &message);

} // namespace farpass::agent
