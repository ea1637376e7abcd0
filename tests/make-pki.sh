#!/bin/bash
# Makes a cluster CA and hosts' credentials with openssl, laid out as farpass-agent reads them (the
# same commands as docs/install.md, "Certificates"). For the rig (tests/agent/agent-lib.sh) and the
# unit tests (tests/unit/test_agent_tls.cpp), which make their own per run.
#
#   make-pki.sh ca CA_DIR                       a new CA: CA_DIR/cacert.pem, CA_DIR/cakey.pem
#   make-pki.sh host CA_DIR PKI_DIR HOST [DAYS]  HOST's credentials from that CA, valid DAYS days (default
#                                               30; -1: expired yesterday): PKI_DIR/cacert.pem,
#                                               PKI_DIR/hostcert.pem, PKI_DIR/private/hostkey.pem
set -euo pipefail

# openssl chats on stderr even when it succeeds: show it only when it fails.
quiet() {
	local out
	out=$("$@" 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
}

case ${1:-} in
ca)
	mkdir -p "$2"
	(umask 077 && quiet openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$2/cakey.pem")
	quiet openssl req -new -x509 -key "$2/cakey.pem" -subj "/CN=farpass cluster CA" -days 3650 \
		-out "$2/cacert.pem"
	;;
host)
	ca=$2 pki=$3 host=$4 days=${5:-30}
	mkdir -p "$pki/private"
	chmod 0700 "$pki/private"
	(umask 077 && quiet openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
		-out "$pki/private/hostkey.pem")
	quiet openssl req -new -key "$pki/private/hostkey.pem" -subj "/CN=$host" -out "$pki/host.csr"
	quiet openssl x509 -req -in "$pki/host.csr" -CA "$ca/cacert.pem" -CAkey "$ca/cakey.pem" -days "$days" \
		-extfile <(printf 'subjectAltName = DNS:%s\nextendedKeyUsage = serverAuth, clientAuth\n' "$host") \
		-out "$pki/hostcert.pem"
	rm "$pki/host.csr"
	chmod 0644 "$pki/hostcert.pem"
	install -m 0644 "$ca/cacert.pem" "$pki/cacert.pem"
	;;
*)
	sed -n 's/^#   //p' "$0" >&2
	exit 2
	;;
esac
