// Agent-to-agent authentication with a shared cluster key (docs/agent-protocol.md, "Authentication").
//
// Every payload on a peer connection is  MAC (32 bytes) | sequence (8 bytes, big-endian) | JSON body,
// MAC = HMAC-SHA256(key, "farpass-v1" | direction | sequence | body). The two hello messages (sequence 0)
// are keyed with the cluster key and carry one fresh nonce each; everything after them is keyed with
// HMAC-SHA256(cluster key, "farpass-session-v1" | client nonce | server nonce), so a message recorded in
// one session is worthless in any other. Within a session each direction's sequence must grow by exactly
// one: a repeated number is a replay, a jump is a reordered or dropped message. The direction byte stops a
// message from being reflected back to its sender.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace farpass::agent {

inline constexpr std::size_t mac_size = 32;
inline constexpr std::size_t sequence_size = 8;
inline constexpr std::size_t nonce_size = 16;
inline constexpr std::size_t min_cluster_key_size = 32;

class ClusterKey {
public:
	// Throws AgentError(invalid_params) for keys shorter than min_cluster_key_size.
	explicit ClusterKey(std::string secret);

	// Reads a key file: its bytes are the key (trailing newline removed). Refuses a file that group or
	// others may access, like ssh does with private keys.
	static ClusterKey load(const std::filesystem::path &path);

	const std::string &secret() const { return secret_; }

private:
	std::string secret_;
};

std::string hmac_sha256(std::string_view key, std::string_view data);
std::string random_bytes(std::size_t count);
std::string to_hex(std::string_view bytes);
// Throws AgentError(invalid_params) for anything but an even number of hex digits.
std::string from_hex(std::string_view hex);

enum class Role { client, server };

// Seals outgoing and opens incoming payloads of one connection.
class SessionAuth {
public:
	SessionAuth(const ClusterKey &key, Role role);

	std::string seal(std::string_view body);
	// Returns the body, or throws AgentError(authentication_failed) naming why the payload was refused.
	std::string open(std::string_view payload);

	// After both hellos: switches both directions to the session key derived from the two nonces.
	void establish(std::string_view client_nonce, std::string_view server_nonce);

private:
	std::string mac(char direction, std::uint64_t sequence, std::string_view body) const;

	std::string key_;
	char send_direction_;
	char receive_direction_;
	std::uint64_t send_sequence_ = 0;
	std::uint64_t receive_sequence_ = 0;
};

} // namespace farpass::agent
