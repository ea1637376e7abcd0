#!/bin/bash
# The ntb-epf device (qemu-patches/) against well-behaved and hostile peers: the patched QEMU with no
# guest, one ntb-epf listening and one connecting, and ntb-peer (tests/ntb-peer) as the other half of
# each link. Checks that the device greets a peer as docs/ntb-epf.rst says, answers a read it cannot
# serve with an error completion, drops a peer for each kind of malformed input (for that reason) and
# then serves the next one, and refuses a second peer while it has one.
# Needs the built ntb-peer (meson compile -C build) and the patched QEMU (make setup).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/vm-images/env.sh"
ntb_peer=$top/build/tests/ntb-peer/ntb-peer
for need in "$ntb_peer" "$FARPASS_QEMU"; do
	[ -x "$need" ] || { echo "missing $need: run 'make build'" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/ntb-epf-hostile.XXXXXX)
sock=$dir/server.sock         # the listening ntb-epf
client_sock=$dir/client.sock  # where the connecting ntb-epf looks for its peer
log=$dir/qemu.log
qemu_pid= first_pid= checks=0 failures=0

cleanup() {
	[ -z "$first_pid" ] || kill "$first_pid" 2>/dev/null
	[ -z "$qemu_pid" ] || { kill "$qemu_pid" 2>/dev/null; wait "$qemu_pid" 2>/dev/null; }
	rm -rf "$dir"
}
trap cleanup EXIT
# A peer that failed early closes the FIFO we feed it: that write must fail, not kill this script.
trap '' PIPE

# QMP on QEMU's stdio; the trace of link events and the guest-error log (window accesses outside a
# translation) go to $log, where the checks find why the device dropped each peer.
# shellcheck disable=SC2086 # FARPASS_QEMU_FW is a list of arguments
coproc QEMU { exec "$FARPASS_QEMU" $FARPASS_QEMU_FW -M q35 -accel tcg -nodefaults -display none -S \
	-qmp stdio -trace 'ntb_epf_*' -d guest_errors \
	-device ntb-epf,socket="$sock",server=on \
	-device ntb-epf,socket="$client_sock",server=off 2>"$log"; }
qemu_pid=$QEMU_PID
exec {qmp_in}>&"${QEMU[1]}" {qmp_out}<&"${QEMU[0]}"

# qmp COMMAND: prints its reply, skipping QMP's greeting and events.
qmp() {
	local line
	echo "{\"execute\": \"$1\"}" >&"$qmp_in" || return 1
	while IFS= read -r -t 5 line <&"$qmp_out"; do
		case $line in *'"return"'* | *'"error"'*) echo "$line"; return 0 ;; esac
	done
	echo "no reply to $1 from QMP"
	return 1
}

qemu_running() {
	kill -0 "$qemu_pid" 2>/dev/null || { echo "QEMU has exited"; tail -5 "$log"; return 1; }
	qmp query-status | grep -q '"status": "prelaunch"'
}

# check WHAT COMMAND...: a line per check; the command's output only if it fails.
check() {
	local what=$1 out
	shift
	checks=$((checks + 1))
	if out=$("$@" 2>&1); then
		echo "ok   $what"
	else
		echo "FAIL $what"
		sed 's/^/       /' <<<"$out"
		failures=$((failures + 1))
	fi
}

peer() {
	timeout 20 "$ntb_peer" --connect "$sock" "$@"
}

zeros() { # N bytes of zeros, in hex
	printf '%0*d' $(($1 * 2)) 0
}

# The device's greeting on connect; and ours, then the device's checked (HELLO with magic and version 1,
# LINK down, its 64 scratchpads; a data= may follow, for the scratchpads' values).
greeting='expect hello; expect link; expect spad-sync'
hello='hello; expect hello arg=0x4254544e00000001; expect link arg=0; expect spad-sync arg=0 len=256'
# Half-close and wait for the device to close too, so that its link is free for the next peer.
bye='shutdown; expect-close 2000'

qmp qmp_capabilities >/dev/null || { echo "QEMU did not start:" >&2; cat "$log" >&2; exit 1; }

echo "== a well-behaved peer"
check "after HELLO the peer has the device's HELLO (version 1), LINK (down) and 64 zero scratchpads" \
	peer "$hello data=$(zeros 256); $bye"
check "a read of a window without inbound translation completes with EFAULT, the link stays up" \
	peer "$hello; mw-read 0 0 4 status=EFAULT len=0; mw-read 1 0x1000 65536 status=EFAULT len=0;
		mw-read 0 0 4 status=EFAULT; $bye"

# A 64 KiB payload (the largest) is too long for one argument: the script goes through stdin.
unmapped_writes() {
	printf '%s\n' "$hello" 'mw-write 0 0x10 deadbeef' "mw-write 1 0 $(zeros 65536)" 'doorbell 2' \
		'mw-read 1 0 8 status=EFAULT' "$bye" | peer || return 1
	grep -F 'peer access to window 2 offset 0x0 len 65536 outside the inbound translation' "$log" ||
		{ echo "the dropped write is not in QEMU's guest-error log"; return 1; }
}
check "window writes (up to 64 KiB) without translation and doorbells nobody takes are dropped, the link stays up" \
	unmapped_writes

spads_written() {
	peer "$hello; spad-set 0 0x11223344; spad-set 63 0xcafef00d; $bye" || return 1
	peer "$hello data=44332211$(zeros 248)0df0feca; $bye"
}
check "scratchpads the peer sets are the device's own, sent in full to the next peer" spads_written

# dropped REASON STEPS: a peer running STEPS is disconnected, and the trace says why; QEMU runs on and
# serves the next peer.
dropped() {
	local reason=$1 steps=$2 before
	before=$(grep -cF "ntb_epf_disconnect $reason" "$log")
	peer "$steps; expect-close 2000" || return 1
	[ "$(grep -cF "ntb_epf_disconnect $reason" "$log")" -gt "$before" ] ||
		{ echo "QEMU's trace does not say '$reason':"; tail -3 "$log"; return 1; }
	qemu_running || return 1
	peer "$hello; mw-read 0 0 4 status=EFAULT; $bye"
}
# hostile WHAT REASON STEPS
hostile() {
	check "$1: link closed ($2), QEMU up, next peer served" dropped "$2" "$3"
}

echo "== hostile peers"
http=$(printf 'GET / HTTP/1.1\r\nHost: ntb\r\n\r\n' | od -An -tx1 | tr -d ' \n')
# A header's fields: type, mw, le16 status, le32 len, le64 arg, le64 tag.
oversized_header=05000000''01000100''$(zeros 16)
hostile "garbage (an HTTP request)" "message too large" "$greeting; raw $http"
hostile "a message before HELLO" "message before HELLO" "$greeting; link up"
hostile "a HELLO of version 2" "unsupported peer version" "$greeting; hello 2"
hostile "a HELLO with the wrong magic" "unsupported peer version" "$greeting; send hello arg=0x4254544f00000001"
hostile "a payload length of 64 KiB + 1" "message too large" "$hello; raw $oversized_header"
hostile "MW_WRITE to window index 2" "no such memory window" "$hello; mw-write 2 0 00"
hostile "MW_READ of window index 255" "no such memory window" "$hello; send mw-read mw=255 data=04000000"
hostile "SPAD_SET of scratchpad 64" "scratchpad index out of range" "$hello; spad-set 64 1"
hostile "SPAD_SYNC running past scratchpad 63" "scratchpad index out of range" \
	"$hello; send spad-sync arg=63 data=0100000002000000"
hostile "SPAD_SET of a partial scratchpad" "scratchpad index out of range" "$hello; send spad-set data=010203"
hostile "MW_READ of 0 bytes" "read request too large" "$hello; send mw-read data=00000000"
hostile "MW_READ of 64 KiB + 1" "read request too large" "$hello; send mw-read data=01000100"
hostile "DOORBELL of vector 32" "doorbell vector out of range" "$hello; doorbell 32"
hostile "an unknown type (9)" "unknown message type" "$hello; send 9"
hostile "an unknown type (0)" "unknown message type" "$hello; send 0"
hostile "a truncated message, then the end of the stream" "peer closed the link" \
	"$hello; raw 0200000000000000000000; shutdown"

echo "== one peer at a time"
# The first peer takes its steps from a FIFO, so that it stays connected while the second one tries.
mkfifo "$dir/first.in"
"$ntb_peer" --connect "$sock" <"$dir/first.in" >"$dir/first.out" 2>&1 &
first_pid=$!
exec {first}>"$dir/first.in"
echo "$hello" >&"$first"
first_greeted() {
	for _ in $(seq 100); do
		grep -q '^ok expect spad-sync' "$dir/first.out" && return 0
		kill -0 "$first_pid" 2>/dev/null || break
		sleep 0.05
	done
	cat "$dir/first.out"
	return 1
}
check "a first peer connects" first_greeted
check "a second peer is closed at once while the first is connected" peer 'expect-close 2000'
echo "mw-read 0 0 4 status=EFAULT; $bye" >&"$first"
exec {first}>&-
wait "$first_pid"
first_rc=$? first_pid=
first_unaffected() {
	[ "$first_rc" -eq 0 ] || { cat "$dir/first.out"; return 1; }
}
check "the first peer's link still works" first_unaffected

echo "== the connecting ntb-epf (server=off)"
listen() {
	timeout 20 "$ntb_peer" --listen "$client_sock" --timeout 3000 "$@"
}
reconnects() {
	listen "$hello; doorbell 99; expect-close 2000" || return 1
	grep -qF 'ntb_epf_disconnect doorbell vector out of range' "$log" ||
		{ echo "QEMU's trace does not say 'doorbell vector out of range'"; return 1; }
	listen "$hello; mw-read 1 0 4 status=EFAULT; $bye"
}
check "it connects to a listening peer, and reconnects after dropping a hostile one" reconnects

check "QEMU is still running" qemu_running
echo "$checks checks, $failures failed"
[ "$failures" -eq 0 ] || { echo "QEMU's log ends:"; tail -20 "$log"; exit 1; }
