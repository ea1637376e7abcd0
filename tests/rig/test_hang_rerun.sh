#!/bin/bash
# Test of how an L1 kernel hang is told apart from a bug of ours (tests/rig/l1-hang.sh), without VMs:
# run-suites.sh, copied into a scratch tree, runs fake tests that leave console logs behind. A failure
# with an RCU stall that shows no farpass or NTB code runs once more; one whose report has a farpass
# frame, or whose console has no hang, or an old console from an earlier run, is a plain failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/tests/rig" "$scratch/tests/fake"
cp "$here/../run-suites.sh" "$scratch/tests/"
cp "$here/l1-hang.sh" "$scratch/tests/rig/"
# The assertions (expect).
. "$here/ntb-lib.sh"

# A stall as the 6.1 kernel prints it, with one extra frame line ($1).
stall() {
	cat <<-REPORT
	[   12.000000] virtio_net virtio0 eth0: renamed
	[   75.593066] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:
	[   75.593066] rcu: 	1-...!: (0 ticks this GP) idle=5a4/0/0x0 softirq=2316/2316 fqs=0
	[   75.593066] rcu: rcu_preempt kthread starved for 5252 jiffies! g11753 f0x2 RCU_GP_WAIT_FQS(5) ->state=0x0 ->cpu=1
	[   75.593066]  $1
	REPORT
}

# fake_test NAME CONSOLE-TEXT FAILS: a test that writes its rig's console log and fails the first
# FAILS times it runs.
fake_test() {
	local name=$1 console=$2 fails=$3
	printf '%s\n' "$console" >"$scratch/$name.console"
	cat >"$scratch/tests/fake/$name.sh" <<-SCRIPT
	n=\$(cat "$scratch/$name.runs" 2>/dev/null || echo 0); echo \$((n + 1)) >"$scratch/$name.runs"
	mkdir -p "$scratch/rig-out/$name/borrower2"
	cp "$scratch/$name.console" "$scratch/rig-out/$name/borrower2/console.log"
	[ "\$n" -ge $fails ]
	SCRIPT
}

run() {
	OUT=$(bash "$scratch/tests/run-suites.sh" fake 2>&1) || true
	printf '%s\n' "$OUT" | sed 's/^/    /'
}
runs() { [ "$(cat "$scratch/$1.runs")" = "$2" ]; }

fake_test test_a_hang "$(stall 'default_idle+0x10/0x20')" 1
fake_test test_b_ours "$(stall 'fp_cfg_replay+0x42/0x90 [farpass]')" 1
fake_test test_c_ntb "$(stall 'ntb_epf_peer_spad_read+0x1c/0x40 [ntb_hw_epf]')" 1
fake_test test_d_plain "[   12.000000] virtio_net virtio0 eth0: renamed" 1
fake_test test_e_twice "$(stall 'default_idle+0x10/0x20')" 2
run

expect "a test that failed with a hang of the emulator ran again and passed" runs test_a_hang 2
expect "its result line says why it ran twice" grep -q '^PASS fake/test_a_hang (.*after a rerun: .*borrower2: .*rcu: INFO: rcu_preempt detected stall' <<<"$OUT"
expect "its first attempt's logs are kept in rig-out/<test>.hang" test -s "$scratch/rig-out/test_a_hang.hang/borrower2/console.log"
expect "a hang with a farpass frame is a failure, not run again" runs test_b_ours 1
expect "a hang with an NTB driver frame is a failure, not run again" runs test_c_ntb 1
expect "a failure without a hang is not run again" runs test_d_plain 1
expect "a test that fails again after the rerun fails" grep -q '^FAIL fake/test_e_twice' <<<"$OUT"
expect "the summary counts the reruns" grep -qx '1 passed, 4 failed, 2 run again after an L1 kernel hang' <<<"$OUT"

# An earlier run's console (older than this run) does not make a failure a hang: test_a_hang's rerun
# left a console with a stall; now it fails without writing one.
rm -f "$scratch"/tests/fake/test_[b-e]*.sh
echo 'exit 1' >"$scratch/tests/fake/test_a_hang.sh"
touch -d '1 hour ago' "$scratch/rig-out/test_a_hang/borrower2/console.log"
run
expect "a stale console log from an earlier run is not taken for this run's hang" \
	grep -qx 'FAIL fake/test_a_hang (.*rc=1)' <<<"$OUT"
echo "hang rerun: all checks passed"
