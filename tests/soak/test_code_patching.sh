#!/bin/bash
# The L1 kernels survive run-time code patching under TCG (docs/rig.md, "One TCG thread per L1"): in
# the lender and a borrower at once, 100 rounds enable and disable three static keys (sched_schedstats,
# the sched_switch and kmalloc tracepoints: text_poke_bp() patches each call site through an int3) while
# a pipe and a /proc reader keep the other vCPU in those very paths. Checks, per VM:
# (a) all 100 rounds complete within 400 s (6.1 hung there, both vCPUs in soft lockups at a patched site);
# (b) the kernel log has no warning, BUG, oops, RCU stall or hung task (6.12 panicked: "Oops: int3").
# No NTB: this is the emulated CPU's fidelity.
set -euo pipefail
export RIG_NO_NTB=1
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"

FLIPS=100
rig_up --borrowers 1
VMS=(lender borrower1)
LOAD='mountpoint -q /sys/kernel/tracing || mount -t tracefs none /sys/kernel/tracing
( while :; do yes | head -c 200M >/dev/null; done ) </dev/null >/dev/null 2>&1 &
( while :; do cat /proc/self/stat >/dev/null; done ) </dev/null >/dev/null 2>&1 &'
FLIP="T=/sys/kernel/tracing/events
for i in \$(seq $FLIPS); do
	for v in 1 0; do
		echo \$v >/proc/sys/kernel/sched_schedstats
		echo \$v >\$T/sched/sched_switch/enable
		echo \$v >\$T/kmem/kmalloc/enable
	done
done
echo \$i"
for vm in "${VMS[@]}"; do
	rig_run "$vm" -- "$LOAD"
done
declare -A PID
for vm in "${VMS[@]}"; do
	rig_run "$vm" --timeout 400 -- "$FLIP" >"$(rig_vm_dir "$vm")/flips.out" &
	PID[$vm]=$!
done
rc=0
for vm in "${VMS[@]}"; do
	wait "${PID[$vm]}" || true
	expect_eq "$vm: (a) rounds of three static key flips completed" "$(cat "$(rig_vm_dir "$vm")/flips.out")" "$FLIPS" || rc=1
done
for vm in "${VMS[@]}"; do
	if rig_vm_alive "$vm"; then
		expect_klog_clean "$vm" || rc=1
	else
		# A panic: its report is on the console (the kernel log went with the VM).
		printf 'FAIL %s: (b) the VM died; its console has:\n' "$vm"
		grep -E -A12 "$KLOG_BAD_RE" "$(rig_vm_dir "$vm")/console.log" | head -n 40
		rc=1
	fi
done
exit $rc
