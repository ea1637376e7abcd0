// The agent's configuration file (JSON with comments; docs/agent-protocol.md, "Configuration").
#pragma once

#include "methods.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace farpass::agent {

struct AgentConfig {
	std::string host;				// default: the machine's host name
	std::string listen = "0.0.0.0:7450";		// TCP for peer agents
	std::string socket = "/run/farpass/agent.sock"; // Unix socket for farpassctl
	std::filesystem::path state_dir = "/var/lib/farpass";
	std::filesystem::path pki = "/etc/farpass/pki"; // cacert.pem, hostcert.pem, private/hostkey.pem (tls.hpp)
	std::int64_t lease_ms = 10'000;
	std::int64_t poll_ms = 5'000; // how often a borrower asks its lenders for their devices
	std::int64_t call_timeout_ms = 1'500; // bound of one call to a peer (below the kernel's upcall timeout)
	std::string device = "/dev/farpass";
	// The link's BAR window (the NTB's inbound window FARPASS_MW_BAR; its last page is the kernel's):
	// lent device s places its memory BARs in [s * bar_slot_bytes, (s + 1) * bar_slot_bytes).
	std::uint64_t bar_slot_bytes = 4ull << 20;
	std::uint64_t bar_window_bytes = (64ull << 20) - 4096; // ntb_hw_epf's MW1 in the rig
	std::vector<PeerAddress> peers;
};

// Throws AgentError(invalid_params) naming the offending key; unknown keys are errors, not ignored.
AgentConfig parse_config(std::string_view text);
AgentConfig load_config(const std::filesystem::path &path);

} // namespace farpass::agent
