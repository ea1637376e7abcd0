#!/bin/bash
# How tests/run-suites.sh names and reports what it runs, without VMs: run-suites.sh, copied into a scratch
# tree, runs fake suites. Checks:
#   - a failing test fails the run, and the closing part names it with its FAIL line and what that check
#     found, then the counts;
#   - SUITE@other runs on the other kernel series: FARPASS_KERNEL and the rig directory name it, and so
#     does the suite's line in rig-out/suite-times.tsv;
#   - SUITE/TEST@other runs that one test of the suite, on the other series, named SUITE@SERIES/TEST;
#   - a suite that does not exist fails the run, saying so;
#   - a rig whose directory's LAN ports (rig.sh) are bound by another takes the next free block of eight.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/tests/rig" "$scratch/vm-images" "$scratch/tests/left" "$scratch/tests/right"
cp "$here/../run-suites.sh" "$scratch/tests/"
cp "$here/l1-hang.sh" "$scratch/tests/rig/"
cp "$here/../../vm-images/env.sh" "$scratch/vm-images/"
. "$here/ntb-lib.sh"
other=$(. "$here/../../vm-images/env.sh" && echo "$FARPASS_KERNEL_OTHER")

# run_suites SPEC...: run-suites.sh of the scratch tree; its output in OUT (shown indented), its status in RC.
run_suites() {
	RC=0
	OUT=$(bash "$scratch/tests/run-suites.sh" "$@" 2>&1) || RC=$?
	printf '%s\n' "$OUT" | sed 's/^/    /'
}

cat >"$scratch/tests/left/test_pass.sh" <<'SCRIPT'
echo "kernel=${FARPASS_KERNEL:-} rigdir=$(basename "$RIGDIR")"
echo 'ok   a check of the left suite'
SCRIPT
cat >"$scratch/tests/right/test_fail.sh" <<'SCRIPT'
printf 'FAIL a check of the right suite; it found:\n  the thing it found\n'; exit 1
SCRIPT
run_suites 'left@other' 'right'
expect_eq "a failed test fails the run: run-suites' status" "$RC" 1
expect_eq "the closing part names it, with its FAIL line and what it found, then the counts" \
	"$(grep -x -A4 'failed: right/test_fail' <<<"$OUT" | paste -sd ';')" \
	"failed: right/test_fail;    FAIL a check of the right suite; it found:;        the thing it found;1 passed, 1 failed, 0 FLAKY"
expect_eq "left@other ran on the other series: FARPASS_KERNEL and the rig directory" \
	"$(grep '^kernel=' <<<"$OUT")" "kernel=$other rigdir=test_pass@$other"
expect "... and the suite's line in suite-times.tsv names it" \
	grep -qP "^\S+\tleft@$other\t\d+\t1/1\t" "$scratch/rig-out/suite-times.tsv"

# One test of a suite: the left suite's other test must not run.
echo "echo 'FAIL the left suite ran all its tests'; exit 1" >"$scratch/tests/left/test_not_asked.sh"
run_suites 'left/test_pass@other'
expect_eq "left/test_pass@other ran that test alone on the other series, named left@$other/test_pass" \
	"$(grep -E '^(kernel=|PASS|FAIL)' <<<"$OUT" | sed -E 's/ \([0-9]+ s\)$//' | paste -sd ';')" \
	"kernel=$other rigdir=test_pass@$other;PASS left@$other/test_pass"
expect_eq "... and the run passed" "$RC" 0

run_suites 'nowhere'
expect_eq "a suite that does not exist fails the run" "$RC" 1
expect "... saying so" grep -qx 'FAIL nowhere: no such suite or test (no tests/nowhere/test_\*.sh)' <<<"$OUT"

# The ports RIGDIR hashes to, held by a stand-in for another rig's hub.
. "$here/rig.sh"
# shellcheck disable=SC2034 # read by _rig_lan_ports
RIGDIR=$scratch/rig-a
_rig_lan_ports
first=$RIG_HUB_PORT
python3 -c '
import socket, sys, time
s = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(8)]
for i, so in enumerate(s):
    so.bind(("127.0.0.1", int(sys.argv[1]) + i))
print("bound", flush=True)
time.sleep(30)' "$first" >"$scratch/held" &
holder=$!
for _ in $(seq 100); do grep -q bound "$scratch/held" && break; sleep 0.1; done
_rig_lan_ports
kill "$holder"
expect "a rig whose LAN ports another holds takes the next block: $first -> $RIG_HUB_PORT" \
	test "$RIG_HUB_PORT" -ge $((first + 8)) -o "$RIG_HUB_PORT" -lt "$first"
echo "run suites: all checks passed"
