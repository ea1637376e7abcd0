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
// The part of a method that waits on other agents: it gets the handler's result, runs off the poll loop
// (server.hpp: the server's worker thread), and returns the result to reply with (or throws).
using OffLoop = std::function<nlohmann::json(nlohmann::json handled)>;

struct Method {
	std::string_view name;
	unsigned access;
	ParamSchema params;
	Handler handler;
	OffLoop off_loop = nullptr;
};

// A request handled on the loop: its reply, or (a method with an off-loop part) the work that makes
// the reply, to run elsewhere; that work never throws.
struct Dispatched {
	nlohmann::json reply;
	std::function<nlohmann::json()> later;
};

class Dispatcher {
public:
	explicit Dispatcher(std::vector<Method> methods) : methods_(std::move(methods)) {}

	// One request payload in, one reply out (an off-loop part run here). Never throws.
	nlohmann::json handle(std::string_view payload, const CallContext &context) const;
	// The same, leaving an off-loop part to the caller. Never throws.
	Dispatched dispatch(std::string_view payload, const CallContext &context) const;

	const std::vector<Method> &methods() const { return methods_; }

private:
	std::vector<Method> methods_;
};

} // namespace farpass::agent
