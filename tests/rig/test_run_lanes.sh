#!/bin/bash
# How tests/run-lanes.sh runs make check's two lanes, without VMs: run-lanes.sh and run-suites.sh, copied
# into a scratch tree, run fake suites. Checks:
#   - the two lanes run at once (each lane's test waits for the other's to have started);
#   - each lane's lines reach the output behind its letter, and its whole output is in rig-out/lane-X.log;
#   - a test failing in one lane fails the run, and the closing part names it with its FAIL line under its
#     lane, with the counts over both lanes;
#   - SUITE@other runs on the other kernel series: FARPASS_KERNEL and the rig directory name it, and so
#     does the suite's line in rig-out/suite-times.tsv;
#   - SUITE/TEST@other runs that one test of the suite, on the other series, named SUITE@SERIES/TEST;
#   - the wall time of both lanes is a "lanes" line of rig-out/suite-times.tsv;
#   - one FLAKY test in each lane (each lane passing) fails the run, saying why; a lane that exits
#     non-zero with no failure in its counts fails it, saying so;
#   - a rig whose directory's LAN ports (rig.sh) are bound by another takes the next free block of eight.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/tests/rig" "$scratch/vm-images" "$scratch/tests/left" "$scratch/tests/right"
cp "$here/../run-suites.sh" "$here/../run-lanes.sh" "$scratch/tests/"
cp "$here/l1-hang.sh" "$scratch/tests/rig/"
cp "$here/../../vm-images/env.sh" "$scratch/vm-images/"
. "$here/ntb-lib.sh"
other=$(. "$here/../../vm-images/env.sh" && echo "$FARPASS_KERNEL_OTHER")

# run_lanes LANE LANE: run-lanes.sh of the scratch tree; its output in OUT (shown indented), its status in RC.
run_lanes() {
	RC=0
	OUT=$(bash "$scratch/tests/run-lanes.sh" "$@" 2>&1) || RC=$?
	printf '%s\n' "$OUT" | sed 's/^/    /'
}

# Each lane's test marks its start and waits (at most 20 s) for the other lane's.
cat >"$scratch/tests/left/test_meet.sh" <<SCRIPT
echo "kernel=\${FARPASS_KERNEL:-} rigdir=\$(basename "\$RIGDIR")"
touch "$scratch/left.started"
for i in \$(seq 200); do [ -e "$scratch/right.started" ] && { echo 'ok   met the other lane'; exit 0; }; sleep 0.1; done
echo 'FAIL the other lane never started'; exit 1
SCRIPT
cat >"$scratch/tests/right/test_meet.sh" <<SCRIPT
touch "$scratch/right.started"
for i in \$(seq 200); do [ -e "$scratch/left.started" ] && break; sleep 0.1; done
printf 'FAIL a check of the right lane; it found:\n  the thing it found\n'; exit 1
SCRIPT
run_lanes 'left@other' 'right'
expect "the lanes ran at once: the left lane's test met the right's" grep -qx 'A| ok   met the other lane' <<<"$OUT"
expect "the right lane's lines behind B" grep -qx 'B| FAIL a check of the right lane; it found:' <<<"$OUT"
expect "... and in rig-out/lane-B.log" grep -qx 'FAIL a check of the right lane; it found:' "$scratch/rig-out/lane-B.log"
expect_eq "a failed test in one lane fails the run: run-lanes' status" "$RC" 1
expect_eq "the closing part names it under its lane, with its FAIL line and what it found" \
	"$(grep -x -A4 '=== lane B (right): its summary' <<<"$OUT")" "=== lane B (right): its summary
failed: right/test_meet
    FAIL a check of the right lane; it found:
        the thing it found
0 passed, 1 failed, 0 FLAKY"
expect "the counts over both lanes" grep -qE '^=== both lanes: 1 passed, 1 failed, 0 FLAKY in [0-9]+ s$' <<<"$OUT"
expect_eq "left@other ran on the other series: FARPASS_KERNEL and the rig directory" \
	"$(sed -n 's/^A| kernel=/kernel=/p' <<<"$OUT")" "kernel=$other rigdir=test_meet@$other"
expect "... and the suite's line in suite-times.tsv names it" \
	grep -qP "^\S+\tleft@$other\t\d+\t1/1\t" "$scratch/rig-out/suite-times.tsv"
expect "the wall time of both lanes is a 'lanes' line of suite-times.tsv" \
	grep -qP '^\S+\tlanes\t\d+\t1/2\t[\d.]+\t[\d.]+\t\S+$' "$scratch/rig-out/suite-times.tsv"

# One test of a suite: the left suite's other test must not run.
echo "echo 'FAIL the left suite ran all its tests'; exit 1" >"$scratch/tests/left/test_not_asked.sh"
run_lanes 'left/test_meet@other' 'right/test_meet'
expect_eq "left/test_meet@other ran that test alone on the other series, named left@$other/test_meet" \
	"$(grep -E '^A\| (kernel=|PASS|FAIL)' <<<"$OUT" | sed -E 's/ \([0-9]+ s\)$//')" \
	"A| kernel=$other rigdir=test_meet@$other
A| PASS left@$other/test_meet"
rm "$scratch/tests/left/test_not_asked.sh"

# One FLAKY test in each lane: a run-suites.sh standing in for the real one ends each lane passing with one.
cat >"$scratch/tests/run-suites.sh" <<'SCRIPT'
echo "=== suite $1: 1 s"
printf 'FLAKY (passed only on a rerun after an L1 kernel hang): %s/test_x\n1 passed, 0 failed, 1 FLAKY\n' "$1"
SCRIPT
run_lanes left right
expect_eq "one FLAKY test in each lane, each lane passing: run-lanes' status" "$RC" 1
expect "... saying why" grep -qx 'FAIL: 2 FLAKY tests over both lanes (at most one is accepted)' <<<"$OUT"

# A lane whose run-suites.sh exits non-zero though its counts show no failure.
cat >"$scratch/tests/run-suites.sh" <<'SCRIPT'
printf '=== suite %s: 1 s\n1 passed, 0 failed, 0 FLAKY\n' "$1"
[ "$1" != right ] || exit 3
SCRIPT
run_lanes left right
expect_eq "a lane exiting 3 with no failure counted: run-lanes' status" "$RC" 1
expect "... saying so" grep -qx 'FAIL lane B: its run-suites.sh exited with status 3' <<<"$OUT"

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
echo "run lanes: all checks passed"
