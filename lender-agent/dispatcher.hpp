// The method table and dispatch: envelope and schema checks, permission, the handler, the error boundary.
#pragma once

#include "protocol.hpp"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace farpass::agent {

// Who is calling: another agent, authenticated by its certificate from the cluster CA, or root on this
// host through the CLI socket (SO_PEERCRED).
enum class Principal { peer, local_admin };

enum Access : unsigned {
	peer_access = 1u << 0,
	local_admin_access = 1u << 1,
	any_access = peer_access | local_admin_access,
};

struct CallContext {
	Principal principal = Principal::local_admin;
	std::string peer_host; // a peer: the host its certificate names (= its hello's); the CLI: its hello's
};

using Handler = std::function<nlohmann::json(const nlohmann::json &params, const CallContext &context)>;

struct Method {
	std::string_view name;
	unsigned access;
	ParamSchema params;
	Handler handler;
};

class Dispatcher {
public:
	explicit Dispatcher(std::vector<Method> methods) : methods_(std::move(methods)) {}

	// One request payload in, one reply out. Never throws.
	nlohmann::json handle(std::string_view payload, const CallContext &context) const;

	const std::vector<Method> &methods() const { return methods_; }

private:
	std::vector<Method> methods_;
};

} // namespace farpass::agent
