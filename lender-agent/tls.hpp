// Agent-to-agent identity (docs/agent-protocol.md, "Authentication"): mutual TLS 1.3 with per-host X.509
// certificates issued by the cluster's CA. A host's credentials sit in a pki directory laid out like
// libvirt's TLS transport: cacert.pem (the cluster CA), hostcert.pem (this host's certificate, its subject
// CN the host name), private/hostkey.pem (its key). The name in the certificate a peer presents is the
// peer's host: what its leases belong to.
//
// TlsChannel is the protocol engine of one connection over memory buffers (bytes in, bytes out, no I/O),
// so the agent's poll loop and a blocking client drive the same code; TlsTransport is the client's
// Transport over it.
#pragma once

#include "transport.hpp"

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <openssl/ssl.h>

namespace farpass::agent {

// A credential file's bytes, read from a descriptor that was checked first: a regular file, owned by
// root, with none of the @forbidden_mode bits set. Throws AgentError(permission_denied) naming what is
// wrong, system_error when it cannot be opened.
std::string read_credential(const std::filesystem::path &path, mode_t forbidden_mode);

// The host a certificate names: its one subject CN. Throws AgentError(authentication_failed) otherwise.
std::string certificate_host(X509 *certificate);

class TlsContext {
public:
	// Loads <pki_dir>/cacert.pem, hostcert.pem (neither writable by group or others) and
	// private/hostkey.pem (no access for group or others), and checks that the key is the certificate's,
	// that the certificate names @host and that the CA verifies it now (an expired one stops the agent
	// at start, not at its peers). Throws AgentError naming the file and the reason.
	TlsContext(const std::filesystem::path &pki_dir, const std::string &host);

	SSL_CTX *get() const { return context_.get(); }

private:
	std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context_;
};

class TlsChannel {
public:
	enum class Side { client, server };

	TlsChannel(const TlsContext &context, Side side);

	// Bytes from the network: handshake, then records. Throws AgentError(authentication_failed) naming
	// why the handshake failed (our verdict on the peer's certificate, or the peer's alert about ours);
	// the alert for the peer is then waiting in take_ciphertext().
	void receive(std::string_view ciphertext);
	// Plaintext for the peer (after the handshake).
	void send(std::string_view plaintext);

	std::string take_plaintext() { return std::exchange(plaintext_, {}); }
	std::string take_ciphertext();

	bool established() const { return !peer_host_.empty(); }
	// Bytes of an incomplete TLS record are waiting for the rest.
	bool mid_record() const;
	// The peer sent close_notify.
	bool peer_closed() const { return peer_closed_; }
	// The host the peer's verified certificate names; empty until established.
	const std::string &peer_host() const { return peer_host_; }

private:
	[[noreturn]] void fail();

	std::unique_ptr<SSL, decltype(&SSL_free)> ssl_;
	BIO *network_in_;  // owned by ssl_
	BIO *network_out_; // owned by ssl_
	std::string plaintext_;
	std::string peer_host_;
	bool peer_closed_ = false;
};

// The client side of a peer connection: TLS over @inner (the handshake bounded by inner's deadline), with
// the server's certificate required to name @expected_host. Throws AgentError(authentication_failed) when
// either side refuses the other, or inner's errors.
class TlsTransport final : public Transport {
public:
	TlsTransport(const TlsContext &context, std::unique_ptr<Transport> inner, const std::string &expected_host);

	void write(std::string_view bytes) override;
	std::string read_some() override;
	void set_deadline(int timeout_ms) override { inner_->set_deadline(timeout_ms); }

private:
	// Reads from inner into the channel; false at end of stream.
	bool pump();

	std::unique_ptr<Transport> inner_;
	TlsChannel channel_;
};

// @count random bytes from OpenSSL, as lower-case hex (lease ids).
std::string random_hex(std::size_t count);

} // namespace farpass::agent
