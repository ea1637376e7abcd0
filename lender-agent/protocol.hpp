// Messages: requests {id, method, params}, replies {id, result} or {id, error: {code, errno, message}}.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace farpass::agent {

inline constexpr std::uint64_t protocol_version = 1;
// A lease's time (config "lease_ms", lease.acquire's result): the range both sides accept.
inline constexpr std::uint64_t min_lease_ms = 1'000, max_lease_ms = 3'600'000;

struct Request {
	nlohmann::json id;
	std::string method;
	nlohmann::json params; // always an object
};

// Nothing the agents exchange or keep nests deeper than a few levels; deeper input is refused while it
// is parsed, before it can cost the recursive dump, compare and destroy of nlohmann::json.
inline constexpr int max_json_depth = 16;

// The one JSON parser for what crosses a boundary (messages, replies, state and config files): throws
// AgentError(parse_error) for text that is not JSON or nests containers more than max_json_depth deep.
// comments: allow // and /* */ (the config file).
nlohmann::json parse_json(std::string_view text, bool comments = false);

// Parses and checks the envelope; id is set as soon as it is known so an error reply can carry it.
// Throws AgentError(parse_error or invalid_request).
Request parse_request(std::string_view payload, nlohmann::json &id);

enum class ParamType { string, unsigned_integer, boolean };

struct ParamField {
	std::string_view name;
	ParamType type;
	bool required = true;
	// unsigned_integer only: the accepted range (decode_uint)
	std::uint64_t min = 0;
	std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
};

using ParamSchema = std::vector<ParamField>;

// Missing required fields, fields of the wrong JSON type, numbers out of their range and unknown fields
// are AgentError(invalid_params).
void check_params(const ParamSchema &schema, const nlohmann::json &params);

// The one decoder of a number that crosses a boundary (requests from peers and the CLI, lenders' replies,
// state and config files): `value` as an unsigned integer in [min, max], else AgentError(invalid_params)
// naming it. A negative or fractional number is refused, never converted (get<unsigned>() would make
// -1 into 2^64 - 1).
std::uint64_t decode_uint(const nlohmann::json &value, std::string_view name, std::uint64_t min, std::uint64_t max);

// The same into T, by default over T's whole range.
template <typename T>
T decode_uint(const nlohmann::json &value, std::string_view name, std::uint64_t min = 0,
	      std::uint64_t max = std::numeric_limits<T>::max())
{
	return static_cast<T>(decode_uint(value, name, min, std::min<std::uint64_t>(max, std::numeric_limits<T>::max())));
}

nlohmann::json result_reply(const nlohmann::json &id, nlohmann::json result);

// The error boundary: every failure becomes a numbered protocol error. AgentError keeps its code and
// errno; JSON access errors are invalid_params; system errors keep their errno; anything else is an
// internal_error.
nlohmann::json error_reply(const nlohmann::json &id, std::exception_ptr failure);

// Serialises a message; invalid UTF-8 is replaced rather than thrown on.
std::string dump_message(const nlohmann::json &message);

} // namespace farpass::agent
