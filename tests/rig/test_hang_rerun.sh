#!/bin/bash
# How run-suites.sh tells an L1 kernel hang of the emulator from one that may be ours
# (tests/rig/l1-hang.sh), without VMs: run-suites.sh, copied into a scratch tree, runs fake tests that
# leave the console and QEMU logs a rig leaves, with the launcher's boot markers. Checks:
#   - a stall whose stalled CPU has a backtrace with no code of ours: the test runs again, passes, is
#     reported FLAKY (result line and summary), and its first attempt's logs are kept;
#   - a frame of farpass, of an NTB module, of a VFIO module and of the built-in IOMMU code: no rerun;
#   - a frame of ours past the 60th line of a first report, and in a second report: no rerun;
#   - a stalled CPU without a backtrace (NMI backtrace skipped): no rerun;
#   - an ntb-epf read timeout in that VM's QEMU log during the attempt: no rerun;
#   - a failure without a hang: no rerun; a test that fails again after its rerun fails;
#   - a hang in a boot that began before the attempt, or in a boot the launcher ended and booted again
#     after, does not count for a later failure;
#   - one FLAKY test leaves the run passing; two fail it, saying why;
#   - the suite's line in rig-out/suite-times.tsv counts its tests passed and run;
#   - the closing summary lists a failed test with its FAIL line, and the lines a failed check printed
#     after it (up to the next check's line); a test that failed with no failed check, its last lines;
#   - l1_boot_crash_verdict (the launcher's, for a VM whose QEMU exited while it booted): 6.12's #GP in
#     text_poke_early() at boot may be retried (its first line), the same oops with a frame of farpass
#     may not, a boot without a crash or whose crash was in a boot before SINCE has none.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/tests/rig"
cp "$here/../run-suites.sh" "$scratch/tests/"
cp "$here/l1-hang.sh" "$scratch/tests/rig/"
# The assertions (expect).
. "$here/ntb-lib.sh"
. "$here/l1-hang.sh"

# The launcher's boot marker; NOW is replaced by the time the fake test runs.
mark() { l1_boot_marker borrower2 "${2:-NOW}" "${1:-}"; }
# A stall as the 6.1 kernel prints it: CPU 1 stalled, with backtrace frames $1 (none: the NMI backtrace
# was skipped because the CPU idled).
stall() {
	cat <<-REPORT
	[   75.593066] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:
	[   75.593066] rcu: 	1-...!: (0 ticks this GP) idle=5a4/0/0x0 softirq=2316/2316 fqs=0
	[   75.593066] 	(detected by 0, t=21002 jiffies, g=11753, q=12 ncpus=2)
	[   75.593066] Sending NMI from CPU 0 to CPUs 1:
	REPORT
	if [ -z "$1" ]; then
		echo '[   75.593070] NMI backtrace for cpu 1 skipped: idling at default_idle+0x10/0x20'
	else
		printf '%s\n' '[   75.593070] NMI backtrace for cpu 1' \
			'[   75.593070] CPU: 1 PID: 0 Comm: swapper/1 Not tainted 6.1.0-56-amd64 #1  Debian 6.1.192-2' \
			'[   75.593070] Call Trace:' '[   75.593070]  <TASK>'
		printf '[   75.593070]  %s\n' "$@"
		echo '[   75.593070]  </TASK>'
	fi
	echo '[   75.593071] rcu: rcu_preempt kthread starved for 5252 jiffies! g11753 f0x2 RCU_GP_WAIT_FQS(5) ->state=0x0 ->cpu=1'
}
idle='default_idle+0x10/0x20'
filler() { for i in $(seq "$1"); do printf '[   76.%06d] filler line %d\n' "$i" "$i"; done; }

# fake_test NAME CONSOLE FAILS [QEMU-LOG]: a test that leaves CONSOLE (and QEMU-LOG) as borrower2's logs
# and fails the first FAILS times it runs.
fake_test() {
	local name=$1 fails=$3
	printf '%s\n' "$2" >"$scratch/$name.console"
	printf '%s\n' "${4:-$(mark)}" >"$scratch/$name.qemu"
	cat >"$scratch/tests/fake/$name.sh" <<-SCRIPT
	n=\$(cat "$scratch/$name.runs" 2>/dev/null || echo 0); echo \$((n + 1)) >"$scratch/$name.runs"
	mkdir -p "$scratch/rig-out/$name/borrower2"
	now=\$(date +%s.%N)
	sed "s/NOW/\$now/" "$scratch/$name.console" >"$scratch/rig-out/$name/borrower2/console.log"
	sed "s/NOW/\$now/" "$scratch/$name.qemu" >"$scratch/rig-out/$name/borrower2/qemu.log"
	[ "\$n" -ge $fails ] || { echo "FAIL $name's check (attempt \$((n + 1)))"; exit 1; }
	SCRIPT
}

run() {
	rm -f "$scratch"/*.runs
	RC=0
	OUT=$(bash "$scratch/tests/run-suites.sh" fake 2>&1) || RC=$?
	printf '%s\n' "$OUT" | sed 's/^/    /'
}
runs() { [ "$(cat "$scratch/$1.runs")" = "$2" ]; }
fresh() { rm -rf "$scratch/tests/fake" && mkdir -p "$scratch/tests/fake"; }

fresh
fake_test test_a_hang "$(mark)
$(stall $idle)" 1
fake_test test_b_farpass "$(mark)
$(stall 'fp_cfg_replay+0x42/0x90 [farpass]' $idle)" 1
fake_test test_c_ntb "$(mark)
$(stall 'ntb_epf_peer_spad_read+0x1c/0x40 [ntb_hw_epf]')" 1
fake_test test_d_vfio "$(mark)
$(stall 'vaddr_get_pfns+0x1c/0x40 [vfio_iommu_type1]')" 1
fake_test test_e_iommu "$(mark)
$(stall 'intel_iommu_map_pages+0x9c/0x140' $idle)" 1
fake_test test_f_deep "$(mark)
$(stall $idle)
$(filler 70)
[   80.000000]  ? fp_dma_refill+0x10/0x90 [farpass]" 1
fake_test test_g_second "$(mark)
$(stall $idle)
$(filler 5)
$(stall 'fp_bar_rw+0x1c/0x40 [farpass]')" 1
fake_test test_h_nobt "$(mark)
$(stall '')" 1
fake_test test_i_ntbread "$(mark)
$(stall $idle)" 1 "$(mark)
qemu-system-x86_64: warning: ntb-epf rig-out/link1.sock: read of window 2 timed out after 2000 ms; returning all-ones"
fake_test test_j_plain "$(mark)
[   12.000000] virtio_net virtio0 eth0: renamed" 1
fake_test test_k_twice "$(mark)
$(stall $idle)" 2
fake_test test_l_stale "$(mark '' 1000.5)
$(stall $idle)
$(mark)
[   12.000000] virtio_net virtio0 eth0: renamed" 1
fake_test test_m_rebooted "$(mark)
$(stall $idle)
$(mark "$L1_HANG_REBOOT_MARK")
[   12.000000] virtio_net virtio0 eth0: renamed" 1
run

expect "a stall of an emulated CPU with a backtrace and no code of ours: run again, passed" runs test_a_hang 2
expect "its result line says why it ran twice, and FLAKY" \
	grep -q '^PASS fake/test_a_hang (.*after a rerun: .*borrower2: .*rcu: INFO: rcu_preempt detected stall.*FLAKY' <<<"$OUT"
expect "its first attempt's logs are kept in rig-out/<test>.hang" test -s "$scratch/rig-out/test_a_hang.hang/borrower2/console.log"
expect "a farpass frame: no rerun" runs test_b_farpass 1
expect "an NTB driver frame: no rerun" runs test_c_ntb 1
expect "a VFIO module frame: no rerun" runs test_d_vfio 1
expect "a frame of the built-in IOMMU code: no rerun" runs test_e_iommu 1
expect "a frame of ours past line 60 of the report: no rerun" runs test_f_deep 1
expect "a frame of ours in a second report: no rerun" runs test_g_second 1
expect "a stalled CPU without a backtrace: no rerun" runs test_h_nobt 1
expect "... and the output says why" grep -q 'may be ours: stalled CPU 1 shows no backtrace' <<<"$OUT"
expect "an ntb-epf read timeout in the VM's QEMU log: no rerun" runs test_i_ntbread 1
expect "a failure without a hang: no rerun" runs test_j_plain 1
expect "a test that fails again after the rerun fails" grep -q '^FAIL fake/test_k_twice' <<<"$OUT"
expect "a hang in a boot before the attempt does not count" runs test_l_stale 1
expect "a hang in a boot the launcher booted again after does not count" runs test_m_rebooted 1
expect "the summary lists the FLAKY test and counts it" \
	grep -qx '1 passed, 12 failed, 1 FLAKY' <<<"$OUT"
expect_eq "the closing summary lists a failed test with its FAIL line" \
	"$(grep -x -A1 'failed: fake/test_j_plain' <<<"$OUT")" "failed: fake/test_j_plain
    FAIL test_j_plain's check (attempt 1)"
expect "... by name" grep -qx 'FLAKY (passed only on a rerun after an L1 kernel hang): fake/test_a_hang' <<<"$OUT"
expect "the suite's line in rig-out/suite-times.tsv: 1 of its 13 tests passed" \
	grep -qP '^\d{4}-[\d-]+T[\d:]+Z\tfake\t\d+\t1/13\t[\d.]+\t[\d.]+\t\S+$' "$scratch/rig-out/suite-times.tsv"

# A check that prints what it found after its FAIL line, as expect_klog_clean does.
fresh
cat >"$scratch/tests/fake/test_n_found.sh" <<'SCRIPT'
echo 'ok   a check that passed'
printf 'FAIL lender: kernel log is clean; it has:\n%s\n%s\n' '[    1.0] WARNING: one' '[    2.0] two'
echo 'ok   a later check'
exit 1
SCRIPT
run
expect_eq "the closing summary gives the lines a failed check printed after its FAIL line, not the next check's" \
	"$(grep -x -A4 'failed: fake/test_n_found' <<<"$OUT")" "failed: fake/test_n_found
    FAIL lender: kernel log is clean; it has:
      [    1.0] WARNING: one
      [    2.0] two
0 passed, 1 failed, 0 FLAKY"

# A test that stops before any check, as one whose module is not built does.
fresh
printf '%s\n' "echo 'ok   a check that passed'" "echo 'build/mdev/farpass-6.12.ko is older than mdev/dmawin.c: run make build'" \
	'exit 1' >"$scratch/tests/fake/test_o_early.sh"
run
expect_eq "the closing summary gives a test that failed with no failed check its last lines" \
	"$(grep -x -A3 'failed: fake/test_o_early' <<<"$OUT")" "failed: fake/test_o_early
    ok   a check that passed
    build/mdev/farpass-6.12.ko is older than mdev/dmawin.c: run make build
0 passed, 1 failed, 0 FLAKY"

# One FLAKY test in a run that otherwise passes: the run passes; two FLAKY tests fail it.
fresh
fake_test test_a_hang "$(mark)
$(stall $idle)" 1
run
expect_eq "a run with one FLAKY test: run-suites' status" "$RC" 0
fake_test test_b_hang "$(mark)
$(stall $idle)" 1
run
expect_eq "a run with two FLAKY tests: run-suites' status" "$RC" 1
expect "... saying why" grep -q '^FAIL: 2 FLAKY tests in one run' <<<"$OUT"
# The boot crash seen on 2026-11-29 (6.12, one TCG thread), cut to its first and last lines.
boot_oops() {
	printf '%s\n' '[    0.624646] Oops: general protection fault, maybe for address 0x10: 0000 [#1] PREEMPT SMP NOPTI' \
		"[    0.624646] RIP: 0010:$1" '[    0.624646]  start_kernel+0x5f4/0x8d0' \
		'[    0.624646] Kernel panic - not syncing: Attempted to kill the idle task!'
}
since=$(date +%s.%N)
crash_verdict() {
	printf '%s\n' "$1" >"$scratch/crash.console"
	VERDICT=$(l1_boot_crash_verdict "$scratch/crash.console" "$since") && RCV=0 || RCV=$?
}
crash_verdict "$(mark '' "$since")
$(boot_oops text_poke_early+0x68/0xa0)"
expect_eq "a boot crash in text_poke_early(): may be retried, named by its first line" "$RCV $VERDICT" \
	"0 [    0.624646] Oops: general protection fault, maybe for address 0x10: 0000 [#1] PREEMPT SMP NOPTI"
crash_verdict "$(mark '' "$since")
$(boot_oops 'fp_link_probe+0x68/0xa0 [farpass]')"
expect_eq "the same crash in a frame of farpass: not retried" "$RCV $VERDICT" "2 a frame of ours: fp_link_probe+0x68/0xa0"
crash_verdict "$(mark '' "$since")
[    1.000000] rig-init: start at uptime 1.00"
expect_eq "a boot without a crash report" "$RCV" 1
crash_verdict "$(mark '' 1)
$(boot_oops text_poke_early+0x68/0xa0)
$(mark '' "$since")
[    1.000000] rig-init: start at uptime 1.00"
expect_eq "a crash in a boot before SINCE does not count" "$RCV" 1

echo "hang rerun: all checks passed"
