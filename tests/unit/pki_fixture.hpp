// Credentials for the TLS tests, made once per test binary by tests/make-pki.sh (openssl) in a temporary
// directory: pki().path(NAME) is a pki directory as farpass-agent reads it.
#pragma once

#include "agent_fakes.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace farpass::agent::testing {

// Credentials made once per run: hosts of the cluster CA, an expired certificate, and another CA's.
struct Pki {
	Pki()
	{
		make("ca " + path("ca"));
		for (const char *host : {"lender-a", "borrower-b", "borrower-c", "lender-x"})
			make("host " + path("ca") + " " + path(host) + " " + host);
		make("host " + path("ca") + " " + path("expired") + " borrower-c -1");
		make("ca " + path("other-ca"));
		make("host " + path("other-ca") + " " + path("other-lender-a") + " lender-a");
		// An intruder's borrower-b that trusts the cluster's CA too, so it gets as far as showing its
		// certificate to the lender.
		make("host " + path("other-ca") + " " + path("intruder") + " borrower-b");
		write_file(path("intruder") + "/cacert.pem",
			   read_file(path("intruder") + "/cacert.pem") + read_file(path("ca") + "/cacert.pem"));
	}
	std::string path(const std::string &name) const { return (dir.path() / name).string(); }

	static void make(const std::string &args)
	{
		const std::string command = "bash " + (source_root() / "tests/make-pki.sh").string() + " " + args;
		if (std::system(command.c_str()) != 0)
			throw std::runtime_error("failed: " + command);
	}

	TempDir dir;
};

inline const Pki &pki()
{
	static const Pki made;
	return made;
}

} // namespace farpass::agent::testing
