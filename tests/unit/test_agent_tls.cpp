// Agent-to-agent identity (lender-agent/tls.cpp and its use by sessions and clients): mutual TLS 1.3 with
// certificates from a cluster CA, made at test time by tests/make-pki.sh (openssl). The credential files'
// checks; a valid pair connects and the peer is the host its certificate names; a certificate from another
// CA, an expired one, a host name other than the certificate's, and a valid host acting on another host's
// lease are each refused with a clear error.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "pki_fixture.hpp"
#include "client.hpp"
#include "errors.hpp"
#include "tls.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <functional>

using namespace farpass::agent;
using namespace farpass::agent::testing;
using nlohmann::json;

namespace {

// The AgentError @call throws, as "<code> <message>".
std::string failure(const std::function<void()> &call)
{
	try {
		call();
	} catch (const AgentError &e) {
		return std::to_string(static_cast<int>(e.code())) + " " + e.what();
	}
	FAIL("no error");
	return {};
}

bool contains(const std::string &text, std::string_view part)
{
	return text.find(part) != std::string::npos;
}

// One connection to the lender-a agent: its TLS session (credentials from pki directory @server_pki,
// whose certificate names @server_host) and a client on it.
struct Connection {
	explicit Connection(AgentFixture &agent, const std::string &server_pki = "lender-a",
			    const std::string &server_host = "lender-a")
		: server_tls(pki().path(server_pki), server_host),
		  session(*agent.dispatcher, {Principal::peer, "lender-a", "10.0.0.2:40000", &server_tls},
			  [this](LogLevel, const std::string &line) { log += line + "\n"; })
	{
	}

	// A client with @client's credentials expecting the lender-a agent; throws the client's refusal.
	std::unique_ptr<TlsTransport> connect(const TlsContext &client)
	{
		return std::make_unique<TlsTransport>(client, std::make_unique<LoopbackTransport>(session), "lender-a");
	}

	// How the lender refuses a client with @client's credentials whose hello names @host (and closes).
	std::string refused_hello(const TlsContext &client, const std::string &host)
	{
		const auto transport = connect(client);
		RpcClient rpc(*transport, host);
		const std::string refusal = failure([&] { rpc.hello(); });
		CHECK(session.closed());
		return refusal;
	}

	// How borrower-b's client refuses this lender.
	std::string refused_by_borrower()
	{
		const TlsContext borrower(pki().path("borrower-b"), "borrower-b");
		return failure([&] { connect(borrower); });
	}

	TlsContext server_tls;
	std::string log;
	Session session;
};

// @host's agent connected to the lender-a agent with its own credentials, after hello.
struct BorrowerAgent {
	BorrowerAgent(AgentFixture &agent, const std::string &host)
		: tls(pki().path(host), host), connection(agent), transport(connection.connect(tls)), client(*transport, host)
	{
		client.hello();
	}
	TlsContext tls;
	Connection connection;
	std::unique_ptr<TlsTransport> transport;
	RpcClient client;
};

} // namespace

TEST_CASE("a valid pair connects: the peer is the host its certificate names")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	Connection lender(agent);
	const TlsContext borrower(pki().path("borrower-b"), "borrower-b");
	const auto transport = lender.connect(borrower);
	RpcClient client(*transport, "borrower-b");
	CHECK(client.hello()["host"] == "lender-a");
	CHECK(client.call("lease.acquire", {{"pci", nvme_address}})["device"]["borrower"] == "borrower-b");
	CHECK(client.call("device.list", json::object())["devices"].size() == 1);
	CHECK(contains(lender.log, "10.0.0.2:40000: TLS with the certificate of borrower-b"));
	CHECK_FALSE(lender.session.closed());
}

TEST_CASE("a certificate from another CA is refused, on either side")
{
	AgentFixture agent;
	SUBCASE("a borrower's: the lender refuses it before any message")
	{
		Connection lender(agent);
		CHECK(lender.refused_hello(TlsContext(pki().path("intruder"), "borrower-b"), "borrower-b") ==
		      "8 TLS: tlsv1 alert unknown ca");
		CHECK(contains(lender.log, "10.0.0.2:40000: rejected: certificate refused: self-signed certificate in "
					   "certificate chain (not issued by this cluster's CA); closing"));
		CHECK_FALSE(contains(lender.log, "hello"));
	}
	SUBCASE("a lender's: the borrower refuses it")
	{
		Connection lender(agent, "other-lender-a", "lender-a");
		CHECK(lender.refused_by_borrower() ==
		      "8 certificate refused: self-signed certificate in certificate chain (not issued by this cluster's CA)");
		CHECK(contains(lender.log, "rejected: TLS: tlsv1 alert unknown ca"));
	}
}

TEST_CASE("an expired certificate is refused: by the lender, and by the agent it belongs to at start")
{
	AgentFixture agent;
	Connection lender(agent);
	// A peer that did not check its own certificate: valid credentials swapped for expired ones.
	const TlsContext expired(pki().path("borrower-c"), "borrower-c");
	REQUIRE(SSL_CTX_use_certificate_file(expired.get(), (pki().path("expired") + "/hostcert.pem").c_str(),
					     SSL_FILETYPE_PEM) == 1);
	REQUIRE(SSL_CTX_use_PrivateKey_file(expired.get(), (pki().path("expired") + "/private/hostkey.pem").c_str(),
					    SSL_FILETYPE_PEM) == 1);
	CHECK(lender.refused_hello(expired, "borrower-c") == "8 TLS: sslv3 alert certificate expired");
	CHECK(contains(lender.log, "rejected: certificate refused: certificate has expired; closing"));

	const std::string at_start = failure([] { TlsContext(pki().path("expired"), "borrower-c"); });
	CHECK(contains(at_start, "5 " + pki().path("expired") + "/hostcert.pem does not verify against "));
	CHECK(contains(at_start, "cacert.pem: certificate has expired"));
}

TEST_CASE("a host name other than the certificate's is refused")
{
	AgentFixture agent;
	SUBCASE("a hello claiming another host")
	{
		Connection lender(agent);
		CHECK(lender.refused_hello(TlsContext(pki().path("borrower-c"), "borrower-c"), "borrower-b") ==
		      "6 hello names host \"borrower-b\", but the peer's certificate is for \"borrower-c\"");
		CHECK(contains(lender.log, "hello refused: hello names host \"borrower-b\""));
	}
	SUBCASE("a lender whose certificate names another host")
	{
		CHECK(Connection(agent, "lender-x", "lender-x").refused_by_borrower() ==
		      "8 the peer's certificate is for \"lender-x\", not \"lender-a\"");
	}
	SUBCASE("an agent configured as another host than its certificate's does not start")
	{
		CHECK(failure([] { TlsContext(pki().path("borrower-b"), "borrower-c"); }) ==
		      "5 " + pki().path("borrower-b") +
			      "/hostcert.pem is the certificate of \"borrower-b\", not of this host \"borrower-c\"");
	}
}

TEST_CASE("a valid host cannot act on another host's lease")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	BorrowerAgent b(agent, "borrower-b"), c(agent, "borrower-c");
	const std::string lease = b.client.call("lease.acquire", {{"pci", nvme_address}})["lease"];

	CHECK(failure([&] { c.client.call("lease.acquire", {{"pci", nvme_address}}); }) ==
	      "11 " + std::string(nvme_address) + " is borrowed by borrower-b");
	const json with_lease = {{"pci", nvme_address}, {"lease", lease}};
	const json config_access = {{"pci", nvme_address}, {"lease", lease}, {"offset", 4}, {"width", 2}};
	for (const auto &[method, params] :
	     std::vector<std::pair<std::string, json>>{{"lease.renew", with_lease},
						      {"lease.release", with_lease},
						      {"device.reset", with_lease},
						      {"device.read_config", config_access},
						      {"device.write_config", {{"pci", nvme_address}, {"lease", lease}, {"offset", 4}, {"width", 2}, {"value", 0}}},
						      {"dma.map", {{"pci", nvme_address}, {"lease", lease}, {"iova", 0}, {"size", 4096}, {"window_offset", 0}}},
						      {"irq.set", {{"pci", nvme_address}, {"lease", lease}, {"index", 2}, {"count", 0}}}}) {
		CAPTURE(method);
		CHECK(failure([&] { c.client.call(method, params); }) ==
		      "12 no live lease " + lease + " of borrower-c on " + nvme_address);
	}
	// Not even a config read without a lease while borrower-b holds it.
	CHECK(failure([&] { c.client.call("device.read_config", {{"pci", nvme_address}, {"offset", 0}, {"width", 2}}); }) ==
	      "11 " + std::string(nvme_address) + " is borrowed by borrower-b");
	CHECK(b.client.call("lease.renew", with_lease)["lease"] == lease);
	CHECK(agent.lender->devices().at(nvme_address).lease->borrower == "borrower-b");
}

TEST_CASE("credential files: regular files owned by root, the key private, the certificates not writable by others")
{
	TempDir dir;
	const fs::path copy = dir.path() / "pki";
	fs::copy(pki().path("borrower-b"), copy, fs::copy_options::recursive);
	const fs::path ca = copy / "cacert.pem", certificate = copy / "hostcert.pem", key = copy / "private/hostkey.pem";
	CHECK_NOTHROW(TlsContext(copy, "borrower-b"));
	const auto refusal = [&] { return failure([&] { TlsContext(copy, "borrower-b"); }); };

	::chmod(key.c_str(), 0640);
	CHECK(refusal() == "6 " + key.string() + ": mode 640 gives group or others access it must not");
	::chmod(key.c_str(), 0604);
	CHECK(refusal() == "6 " + key.string() + ": mode 604 gives group or others access it must not");
	::chmod(key.c_str(), 0600);
	::chmod(certificate.c_str(), 0664);
	CHECK(refusal() == "6 " + certificate.string() + ": mode 664 gives group or others access it must not");
	::chmod(certificate.c_str(), 0644);
	::chmod(ca.c_str(), 0646);
	CHECK(refusal() == "6 " + ca.string() + ": mode 646 gives group or others access it must not");
	::chmod(ca.c_str(), 0644);
	REQUIRE(::chown(ca.c_str(), 1, 0) == 0);
	CHECK(refusal() == "6 " + ca.string() + ": owned by uid 1, not root");
	REQUIRE(::chown(ca.c_str(), 0, 0) == 0);
	CHECK_NOTHROW(TlsContext(copy, "borrower-b"));

	const std::string key_pem = read_credential(key, 077);
	fs::remove(key);
	CHECK(refusal() == "20 opening " + key.string() + ": No such file or directory");
	REQUIRE(::mkfifo(key.c_str(), 0600) == 0);
	CHECK(refusal() == "6 " + key.string() + ": not a regular file");
	fs::remove(key);
	fs::create_symlink(pki().path("borrower-c") + "/private/hostkey.pem", key); // followed, then checked
	CHECK(contains(refusal(), "5 " + key.string() + " is not the key of " + certificate.string()));
	fs::remove(key);
	write_file(key, "not a key\n");
	::chmod(key.c_str(), 0600);
	CHECK(contains(refusal(), "5 " + key.string() + ": not an unencrypted PEM private key"));
	write_file(key, key_pem);
	CHECK_NOTHROW(TlsContext(copy, "borrower-b"));
}
