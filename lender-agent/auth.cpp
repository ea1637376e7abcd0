#include "auth.hpp"

#include "errors.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace farpass::agent {

namespace {

constexpr std::string_view mac_label = "farpass-v1";
constexpr std::string_view session_label = "farpass-session-v1";
constexpr char client_to_server = 'C';
constexpr char server_to_client = 'S';

std::string encode_sequence(std::uint64_t sequence)
{
	std::string bytes(sequence_size, '\0');
	for (std::size_t i = 0; i < sequence_size; i++)
		bytes[i] = static_cast<char>(sequence >> (8 * (sequence_size - 1 - i)));
	return bytes;
}

std::uint64_t decode_sequence(std::string_view bytes)
{
	std::uint64_t sequence = 0;
	for (std::size_t i = 0; i < sequence_size; i++)
		sequence = sequence << 8 | static_cast<unsigned char>(bytes[i]);
	return sequence;
}

[[noreturn]] void reject(const std::string &why)
{
	throw AgentError(ErrorCode::authentication_failed, why);
}

} // namespace

ClusterKey::ClusterKey(std::string secret) : secret_(std::move(secret))
{
	if (secret_.size() < min_cluster_key_size)
		throw AgentError(ErrorCode::invalid_params, "cluster key is " + std::to_string(secret_.size()) +
								    " bytes, at least " +
								    std::to_string(min_cluster_key_size) + " are needed");
}

ClusterKey ClusterKey::load(const std::filesystem::path &path)
{
	const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		throw_system_error("opening cluster key " + path.string());
	struct stat st {};
	const int rc = ::fstat(fd, &st);
	::close(fd);
	if (rc != 0)
		throw_system_error("checking cluster key " + path.string());
	if (st.st_mode & (S_IRWXG | S_IRWXO))
		throw AgentError(ErrorCode::permission_denied,
				 "cluster key " + path.string() + " is accessible by group or others (chmod 0600)");
	std::ifstream in(path, std::ios::binary);
	std::ostringstream contents;
	contents << in.rdbuf();
	std::string secret = contents.str();
	while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r'))
		secret.pop_back();
	return ClusterKey(std::move(secret));
}

std::string hmac_sha256(std::string_view key, std::string_view data)
{
	std::string digest(EVP_MAX_MD_SIZE, '\0');
	unsigned int length = 0;
	if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
		  reinterpret_cast<const unsigned char *>(data.data()), data.size(),
		  reinterpret_cast<unsigned char *>(digest.data()), &length))
		throw AgentError(ErrorCode::internal_error, "HMAC-SHA256 failed");
	digest.resize(length);
	return digest;
}

std::string random_bytes(std::size_t count)
{
	std::string bytes(count, '\0');
	if (RAND_bytes(reinterpret_cast<unsigned char *>(bytes.data()), static_cast<int>(count)) != 1)
		throw AgentError(ErrorCode::internal_error, "no random bytes from OpenSSL");
	return bytes;
}

std::string to_hex(std::string_view bytes)
{
	static constexpr char digits[] = "0123456789abcdef";
	std::string hex;
	hex.reserve(2 * bytes.size());
	for (const unsigned char c : bytes) {
		hex += digits[c >> 4];
		hex += digits[c & 0xf];
	}
	return hex;
}

std::string from_hex(std::string_view hex)
{
	const auto value = [hex](char c) {
		if (c >= '0' && c <= '9')
			return c - '0';
		if (c >= 'a' && c <= 'f')
			return c - 'a' + 10;
		throw AgentError(ErrorCode::invalid_params, "not lower-case hex: " + std::string(hex));
	};
	if (hex.size() % 2)
		throw AgentError(ErrorCode::invalid_params, "odd number of hex digits: " + std::string(hex));
	std::string bytes;
	for (std::size_t i = 0; i < hex.size(); i += 2)
		bytes += static_cast<char>(value(hex[i]) << 4 | value(hex[i + 1]));
	return bytes;
}

SessionAuth::SessionAuth(const ClusterKey &key, Role role)
	: key_(key.secret()), send_direction_(role == Role::client ? client_to_server : server_to_client),
	  receive_direction_(role == Role::client ? server_to_client : client_to_server)
{
}

std::string SessionAuth::mac(char direction, std::uint64_t sequence, std::string_view body) const
{
	std::string input(mac_label);
	input += direction;
	input += encode_sequence(sequence);
	input += body;
	return hmac_sha256(key_, input);
}

std::string SessionAuth::seal(std::string_view body)
{
	const std::uint64_t sequence = send_sequence_++;
	std::string payload = mac(send_direction_, sequence, body);
	payload += encode_sequence(sequence);
	payload += body;
	return payload;
}

std::string SessionAuth::open(std::string_view payload)
{
	if (payload.size() < mac_size + sequence_size)
		reject("unauthenticated message (" + std::to_string(payload.size()) + " bytes, no MAC)");
	const std::string_view received_mac = payload.substr(0, mac_size);
	const std::uint64_t sequence = decode_sequence(payload.substr(mac_size, sequence_size));
	const std::string_view body = payload.substr(mac_size + sequence_size);
	const std::string expected_mac = mac(receive_direction_, sequence, body);
	if (CRYPTO_memcmp(received_mac.data(), expected_mac.data(), mac_size) != 0)
		reject("bad MAC: message tampered with or sealed with another key");
	if (sequence < receive_sequence_)
		reject("replayed message: sequence " + std::to_string(sequence) + ", expected " +
		       std::to_string(receive_sequence_));
	if (sequence > receive_sequence_)
		reject("reordered or lost message: sequence " + std::to_string(sequence) + ", expected " +
		       std::to_string(receive_sequence_));
	receive_sequence_++;
	return std::string(body);
}

void SessionAuth::establish(std::string_view client_nonce, std::string_view server_nonce)
{
	std::string input(session_label);
	input += client_nonce;
	input += server_nonce;
	key_ = hmac_sha256(key_, input);
}

} // namespace farpass::agent
