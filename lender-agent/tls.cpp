#include "tls.hpp"

#include "errors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

namespace farpass::agent {

namespace {

using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;
using Certificate = std::unique_ptr<X509, decltype(&X509_free)>;

[[noreturn]] void refuse(const std::string &why)
{
	throw AgentError(ErrorCode::authentication_failed, why);
}

// The reason of OpenSSL's oldest queued error (and the queue emptied: it is per thread, and a stale
// entry would be blamed on the next failure).
std::string openssl_reason()
{
	const unsigned long error = ERR_get_error();
	ERR_clear_error();
	const char *reason = error ? ERR_reason_error_string(error) : nullptr;
	return reason ? reason : "unknown TLS error";
}

// Reads @bytes in place: they must outlive the BIO.
Bio memory_bio(const std::string &bytes)
{
	Bio bio(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())), BIO_free);
	if (!bio)
		throw AgentError(ErrorCode::internal_error, "out of memory for a BIO");
	return bio;
}

[[noreturn]] void unreadable(const std::filesystem::path &path, const std::string &what)
{
	throw AgentError(ErrorCode::invalid_params, path.string() + ": not " + what + " (" + openssl_reason() + ")");
}

} // namespace

std::string read_credential(const std::filesystem::path &path, mode_t forbidden_mode)
{
	const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK); // a FIFO must not block us
	if (fd < 0)
		throw_system_error("opening " + path.string());
	struct stat st {};
	std::string problem;
	if (::fstat(fd, &st) != 0)
		problem = std::string("fstat: ") + std::strerror(errno);
	else if (!S_ISREG(st.st_mode))
		problem = "not a regular file";
	else if (st.st_uid != 0)
		problem = "owned by uid " + std::to_string(st.st_uid) + ", not root";
	else if (st.st_mode & forbidden_mode)
		problem = "mode " + std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
			  std::to_string(st.st_mode & 7) + " gives group or others access it must not";
	std::string bytes;
	char buffer[4096];
	ssize_t got = 0;
	while (problem.empty() && (got = ::read(fd, buffer, sizeof(buffer))) != 0) {
		if (got > 0)
			bytes.append(buffer, static_cast<std::size_t>(got));
		else if (errno != EINTR)
			problem = std::string("read: ") + std::strerror(errno);
	}
	::close(fd);
	if (!problem.empty())
		throw AgentError(ErrorCode::permission_denied, path.string() + ": " + problem);
	return bytes;
}

std::string certificate_host(X509 *certificate)
{
	X509_NAME *subject = X509_get_subject_name(certificate);
	const int entry = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
	if (entry < 0 || X509_NAME_get_index_by_NID(subject, NID_commonName, entry) >= 0)
		refuse("the certificate's subject must have exactly one CN (the host name)");
	unsigned char *utf8 = nullptr;
	const int length = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, entry)));
	if (length <= 0)
		refuse("the certificate's CN is empty or unreadable");
	std::string host(reinterpret_cast<char *>(utf8), static_cast<std::size_t>(length));
	OPENSSL_free(utf8);
	if (host.find('\0') != std::string::npos)
		refuse("the certificate's CN contains a NUL byte");
	return host;
}

TlsContext::TlsContext(const std::filesystem::path &pki_dir, const std::string &host)
	: context_(SSL_CTX_new(TLS_method()), SSL_CTX_free)
{
	if (!context_)
		throw AgentError(ErrorCode::internal_error, "SSL_CTX_new: " + openssl_reason());
	SSL_CTX *context = context_.get();
	const auto ca_path = pki_dir / "cacert.pem", certificate_path = pki_dir / "hostcert.pem",
		   key_path = pki_dir / "private" / "hostkey.pem";

	// Anyone who could write the CA or the certificate could make the agent trust another CA or be
	// another host; anyone who could read the key could be this host.
	const std::string ca_pem = read_credential(ca_path, S_IWGRP | S_IWOTH);
	const Bio ca_bio = memory_bio(ca_pem);
	STACK_OF(X509_INFO) *cas = PEM_X509_INFO_read_bio(ca_bio.get(), nullptr, nullptr, nullptr);
	int ca_count = 0;
	for (int i = 0; cas && i < sk_X509_INFO_num(cas); i++)
		if (X509 *ca = sk_X509_INFO_value(cas, i)->x509)
			ca_count += X509_STORE_add_cert(SSL_CTX_get_cert_store(context), ca) == 1;
	sk_X509_INFO_pop_free(cas, X509_INFO_free);
	if (ca_count == 0)
		unreadable(ca_path, "a PEM CA certificate");

	const std::string certificate_pem = read_credential(certificate_path, S_IWGRP | S_IWOTH);
	const Bio certificate_bio = memory_bio(certificate_pem);
	const Certificate certificate(PEM_read_bio_X509(certificate_bio.get(), nullptr, nullptr, nullptr), X509_free);
	if (!certificate)
		unreadable(certificate_path, "a PEM certificate");
	const std::string key_pem = read_credential(key_path, S_IRWXG | S_IRWXO);
	const Bio key_bio = memory_bio(key_pem);
	const std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
		PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
	if (!key)
		unreadable(key_path, "an unencrypted PEM private key");
	if (SSL_CTX_use_certificate(context, certificate.get()) != 1 || SSL_CTX_use_PrivateKey(context, key.get()) != 1 ||
	    SSL_CTX_check_private_key(context) != 1)
		throw AgentError(ErrorCode::invalid_params, key_path.string() + " is not the key of " +
								    certificate_path.string() + " (" + openssl_reason() + ")");
	std::string named;
	try {
		named = certificate_host(certificate.get());
	} catch (const AgentError &e) {
		throw AgentError(ErrorCode::invalid_params, certificate_path.string() + ": " + e.what());
	}
	if (named != host)
		throw AgentError(ErrorCode::invalid_params, certificate_path.string() + " is the certificate of \"" + named +
								    "\", not of this host \"" + host + "\"");
	const std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> check(X509_STORE_CTX_new(),
										       X509_STORE_CTX_free);
	if (!check || X509_STORE_CTX_init(check.get(), SSL_CTX_get_cert_store(context), certificate.get(), nullptr) != 1)
		throw AgentError(ErrorCode::internal_error, "X509_STORE_CTX_init: " + openssl_reason());
	if (X509_verify_cert(check.get()) != 1)
		throw AgentError(ErrorCode::invalid_params,
				 certificate_path.string() + " does not verify against " + ca_path.string() + ": " +
					 X509_verify_cert_error_string(X509_STORE_CTX_get_error(check.get())));

	SSL_CTX_set_min_proto_version(context, TLS1_3_VERSION);
	// Both sides present a certificate from the CA: a peer without one never reaches the protocol.
	SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
	// No resumption: every connection shows its certificate again (and nothing is sent after the
	// client's Finished, so a client that wrote its last handshake flight needs no read to be done).
	SSL_CTX_set_num_tickets(context, 0);
	SSL_CTX_set_session_cache_mode(context, SSL_SESS_CACHE_OFF);
}

TlsChannel::TlsChannel(const TlsContext &context, Side side)
	: ssl_(SSL_new(context.get()), SSL_free), network_in_(BIO_new(BIO_s_mem())), network_out_(BIO_new(BIO_s_mem()))
{
	if (!ssl_ || !network_in_ || !network_out_) {
		BIO_free(network_in_);
		BIO_free(network_out_);
		throw AgentError(ErrorCode::internal_error, "out of memory for a TLS connection");
	}
	BIO_set_mem_eof_return(network_in_, -1); // an empty buffer means "more to come", not end of stream
	SSL_set_bio(ssl_.get(), network_in_, network_out_);
	if (side == Side::client)
		SSL_set_connect_state(ssl_.get());
	else
		SSL_set_accept_state(ssl_.get());
}

void TlsChannel::fail()
{
	const long verdict = SSL_get_verify_result(ssl_.get());
	if (verdict == X509_V_OK)
		refuse("TLS: " + openssl_reason()); // e.g. the peer's alert refusing our certificate
	ERR_clear_error();
	// OpenSSL's words for a certificate of another CA are about a missing issuer: say what it means.
	const bool foreign = verdict == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
			     verdict == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT ||
			     verdict == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT ||
			     verdict == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN || verdict == X509_V_ERR_CERT_SIGNATURE_FAILURE;
	refuse(std::string("certificate refused: ") + X509_verify_cert_error_string(verdict) +
	       (foreign ? " (not issued by this cluster's CA)" : ""));
}

void TlsChannel::receive(std::string_view ciphertext)
{
	if (!ciphertext.empty() && BIO_write(network_in_, ciphertext.data(), static_cast<int>(ciphertext.size())) <= 0)
		throw AgentError(ErrorCode::internal_error, "out of memory for TLS input");
	if (!SSL_is_init_finished(ssl_.get())) {
		const int rc = SSL_do_handshake(ssl_.get());
		if (rc <= 0) {
			const int error = SSL_get_error(ssl_.get(), rc);
			if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE)
				return;
			fail();
		}
		X509 *certificate = SSL_get0_peer_certificate(ssl_.get());
		if (!certificate) // SSL_VERIFY_FAIL_IF_NO_PEER_CERT makes this unreachable; never trust that alone
			refuse("the peer presented no certificate");
		peer_host_ = certificate_host(certificate);
	}
	char buffer[16384];
	for (;;) {
		const int got = SSL_read(ssl_.get(), buffer, sizeof(buffer));
		if (got > 0) {
			plaintext_.append(buffer, static_cast<std::size_t>(got));
			continue;
		}
		const int error = SSL_get_error(ssl_.get(), got);
		if (error == SSL_ERROR_WANT_READ)
			return;
		if (error == SSL_ERROR_ZERO_RETURN) {
			peer_closed_ = true;
			return;
		}
		fail();
	}
}

void TlsChannel::send(std::string_view plaintext)
{
	// Into a memory BIO: written whole, or not at all.
	if (!plaintext.empty() && SSL_write(ssl_.get(), plaintext.data(), static_cast<int>(plaintext.size())) <= 0)
		fail();
}

bool TlsChannel::mid_record() const
{
	// Part of a record may sit in the input buffer or already inside OpenSSL's own.
	return BIO_ctrl_pending(network_in_) > 0 || SSL_has_pending(ssl_.get());
}

std::string TlsChannel::take_ciphertext()
{
	std::string bytes(BIO_ctrl_pending(network_out_), '\0');
	if (bytes.empty())
		return bytes;
	const int got = BIO_read(network_out_, bytes.data(), static_cast<int>(bytes.size()));
	bytes.resize(static_cast<std::size_t>(std::max(got, 0)));
	return bytes;
}

TlsTransport::TlsTransport(const TlsContext &context, std::unique_ptr<Transport> inner,
			   const std::string &expected_host)
	: inner_(std::move(inner)), channel_(context, TlsChannel::Side::client)
{
	channel_.receive({}); // the ClientHello
	while (!channel_.established())
		if (!pump())
			throw AgentError(ErrorCode::peer_unreachable, ECONNRESET, "connection closed during the TLS handshake");
	if (channel_.peer_host() != expected_host)
		refuse("the peer's certificate is for \"" + channel_.peer_host() + "\", not \"" + expected_host + "\"");
}

bool TlsTransport::pump()
{
	inner_->write(channel_.take_ciphertext());
	const std::string bytes = inner_->read_some();
	if (bytes.empty())
		return false;
	try {
		channel_.receive(bytes);
	} catch (const AgentError &) {
		inner_->write(channel_.take_ciphertext()); // our alert: the peer logs why it was refused
		throw;
	}
	return true;
}

void TlsTransport::write(std::string_view bytes)
{
	channel_.send(bytes);
	inner_->write(channel_.take_ciphertext());
}

std::string TlsTransport::read_some()
{
	for (;;) {
		if (std::string plaintext = channel_.take_plaintext(); !plaintext.empty())
			return plaintext;
		if (channel_.peer_closed() || !pump())
			return {};
	}
}

std::string random_hex(std::size_t count)
{
	std::string bytes(count, '\0');
	if (RAND_bytes(reinterpret_cast<unsigned char *>(bytes.data()), static_cast<int>(count)) != 1)
		throw AgentError(ErrorCode::internal_error, "no random bytes from OpenSSL");
	static constexpr char digits[] = "0123456789abcdef";
	std::string hex;
	for (const unsigned char c : bytes) {
		hex += digits[c >> 4];
		hex += digits[c & 0xf];
	}
	return hex;
}

} // namespace farpass::agent
