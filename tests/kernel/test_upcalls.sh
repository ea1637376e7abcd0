#!/bin/bash
# The upcall queue and config-space virtualisation, on borrower1, with farpass-client as the agent
# (serving a fake lender's config space: an NVMe-like 1b36:0010) and as a VFIO user acting as QEMU:
#  (a) the queue alone: VERSION announces FARPASS_FEAT_UPCALLS; UPCALL_GET non-blocking -> EAGAIN, with
#      a wait -> ETIMEDOUT; a reply to no request -> ENOENT; a bad reply -> EINVAL;
#  (b) with the agent: vendor/device come through CFG_READ upcalls, BAR0 sizing shows the announced
#      16 KiB 64-bit BAR, VPD and AF are hidden from the capability chain, bus master on/off/reset make
#      BORROW, RETURN, RESET upcalls (in that order); counters by op;
#  (c) a hung agent (SIGSTOP): the first config read returns all-ones after the timeout (timed on L0),
#      then writes/reset fail at once, the ERR eventfd fired (also one set afterwards);
#  (d) a late reply gets ENOENT; (e) an agent killed while holding a request: the VFIO user gets
#      all-ones at once (ENOTCONN), long before a 30 s timeout; no agent at all: at once too;
#  (f) nothing hangs: instance removed, device withdrawn, farpass unloads; borrower1's kernel log has no
#      warning, BUG, oops, RCU stall, hung task, DMAR fault or leak report.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built

rig_up --borrowers 1
B=borrower1
NTB=$(ntb_pci $B)
T=$(echo /sys/class/mdev_bus/$NTB/mdev_supported_types/ntb_hw_epf-farpass-lender-0) # device 7's slot
U=8f7c3ab0-5c6e-4e41-9d3e-0000000000c7
PARAM=/sys/module/farpass/parameters/upcall_timeout_ms
fp_load $B
c() { fp_client $B "$@"; }
# agent_start LOG [ARGS]: an agent in the background of the L1; waits for its "ready" line.
agent_start() {
	rig_run $B -- "rm -f $1; $FP_CLIENT agent --log $1 ${*:2} </dev/null >>$1.out 2>&1 & echo \$! >$1.pid"
	ntb_wait $B 10 "grep -q ready $1"
}
agent_sig() { rig_run $B -- "kill -$2 \$(cat $1.pid)"; }

echo "# (a) the queue alone"
expect_eq "VERSION: features BORROWER|UPCALLS|OUTBOUND|DATA_PATH|LINK_STATUS" "$(c version)" "ok kernel_version=4 max_devices=64 features=0x1f"
expect "UPCALL_GET non-blocking, nothing queued: EAGAIN" c upcall-get --nonblock --expect EAGAIN
expect "UPCALL_GET waiting 300 ms, nothing queued: ETIMEDOUT" c upcall-get --wait-ms 300 --expect ETIMEDOUT
expect "UPCALL_REPLY to no request: ENOENT" c upcall-reply --seq 424242 --expect ENOENT
expect "UPCALL_REPLY with a positive error: EINVAL" c upcall-reply --seq 1 --error 5 --expect EINVAL
expect "UPCALL_REPLY with unknown flags: EINVAL" c upcall-reply --seq 1 --flags 2 --expect EINVAL
expect_eq "timeout parameter default" "$(rig_run $B -- "cat $PARAM")" 2000

echo "# (b) config space through the agent"
c announce --id 7 --lender lender --ntb "$NTB" --bar0 0x4000
rig_run $B -- "echo $U > $T/create"
expect "agent up" agent_start /tmp/a1
out=$(c vfio-cfg $U) || { echo "$out"; rig_run $B -- "cat /tmp/a1; dmesg | tail -20"; false; }
echo "$out"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$out"; }
expect_eq "vendor (via CFG_READ)" "$(field vendor)" 1b36
expect_eq "device (via CFG_READ)" "$(field device)" 0010
expect_eq "BAR0/1 before sizing: 64-bit memory, no address" "$(field bar0)" "0x4/0"
expect_eq "BAR0/1 sized: 16 KiB" "$(field sized)" "0xffffc004/0xffffffff"
expect_eq "the guest's BAR0 address is kept" "$(field addr)" "0xfebf0004"
expect_eq "BAR0 region size" "$(field bar0_region)" "0x4000"
expect_eq "capability chain: PM, MSI-X, PCIe, MSI (VPD 03 and AF 13 hidden)" "$(field caps)" "01,11,10,05"
expect_eq "the 4 KiB region reads in one go" "$(field whole_read)" 1
expect_eq "bus master on" "$(field cmd_on)" "0x6(ok)"
expect_eq "bus master off" "$(field cmd_off)" "0x2(ok)"
expect_eq "reset" "$(field reset)" ok
expect_eq "command after reset" "$(field cmd_after_reset)" 0
expect_eq "no error event" "$(field err_irq)" 0
rig_run $B -- "cat /tmp/a1" | grep -v CFG_READ || true
ops=$(rig_run $B -- "grep -oE '^(BORROW|RETURN|RESET)' /tmp/a1 | tr '\n' ' '")
expect_eq "the agent saw BORROW, RETURN, BORROW, RESET, RETURN" "$ops" "BORROW RETURN BORROW RESET RETURN "
expect "the agent served the vendor/device read" rig_run $B -- "grep -q '^CFG_READ 7 0 4 -> 0x101b36' /tmp/a1"
expect "no CFG_WRITE reached the agent for BARs or command" rig_run $B -- "! grep -qE '^CFG_WRITE 7 0x(4|10|14) ' /tmp/a1"
rig_run $B -- "grep -E 'upcall|cfg_|surprise|resets' $FP_DBG/counters"
expect_eq "counters: upcalls_borrow" "$(fp_counter $B upcalls_borrow)" 2
expect_eq "counters: upcalls_return" "$(fp_counter $B upcalls_return)" 2
expect_eq "counters: upcalls_reset" "$(fp_counter $B upcalls_reset)" 1
expect "counters: upcalls_cfg_read >= 10 (scan + forwarded reads)" test "$(fp_counter $B upcalls_cfg_read)" -ge 10
expect "counters: cfg_reads and cfg_writes trapped" test "$(fp_counter $B cfg_reads)" -ge 10 -a "$(fp_counter $B cfg_writes)" -ge 6
expect_eq "counters: nothing pending, no timeout" "$(fp_counter $B upcalls_pending)/$(fp_counter $B upcall_timeouts)" 0/0

echo "# (c) a hung agent: all-ones within the timeout"
agent_sig /tmp/a1 STOP
ms=$(rig_time_ms $B "$FP_CLIENT vfio-dead $U >/tmp/dead1.out 2>&1")
rig_run $B -- "cat /tmp/dead1.out"
expect "surprise-removed: all-ones, writes and reset ENODEV, ERR eventfd fired" rig_run $B -- "grep -q '^ok ' /tmp/dead1.out"
echo "L0: the VFIO user's whole run took $ms ms (timeout 2000 ms)"
expect "... it waited for the timeout, not forever (2000 ms <= $ms ms < 15000 ms)" test "$ms" -ge 2000 -a "$ms" -lt 15000
expect "... then failed fast: after_ms < 1000" rig_run $B -- "awk '{ for (i = 1; i <= NF; i++) if (\$i ~ /^after_ms=/) { split(\$i, a, \"=\"); exit !(a[2] < 1000) } }' /tmp/dead1.out"
expect_eq "counters: one timeout, one surprise removal" "$(fp_counter $B upcall_timeouts)/$(fp_counter $B surprise_removed)" 1/1

echo "# (d) a late reply gets ENOENT"
agent_sig /tmp/a1 KILL
expect "agent with 2.5 s reply delay" agent_start /tmp/a2 --delay-ms 2500
expect "the VFIO user sees the device surprise-removed" c vfio-dead $U
expect "the agent's late reply failed with ENOENT" ntb_wait $B 10 "grep -q 'ENOENT' /tmp/a2"
rig_run $B -- "cat /tmp/a2"
expect "counters: upcall_late_replies >= 1" test "$(fp_counter $B upcall_late_replies)" -ge 1
agent_sig /tmp/a2 KILL

echo "# (e) an agent killed while it holds a request; no agent at all"
rig_run $B -- "echo 30000 > $PARAM"
expect "agent that never answers" agent_start /tmp/a3 --delay-ms 100000
t0=$(date +%s%N)
rig_run $B -- "$FP_CLIENT vfio-dead $U </dev/null >/tmp/dead3.out 2>&1 & echo \$! >/tmp/dead3.pid"
expect "the agent took the request" ntb_wait $B 20 "grep -q '^CFG_READ' /tmp/a3"
agent_sig /tmp/a3 KILL
expect "the VFIO user finishes" ntb_wait $B 20 "! kill -0 \$(cat /tmp/dead3.pid)"
ms=$((($(date +%s%N) - t0) / 1000000))
rig_run $B -- "cat /tmp/dead3.out"
expect "... surprise-removed (ENOTCONN), not a timeout" rig_run $B -- "grep -q '^ok ' /tmp/dead3.out"
expect "... in $ms ms, well before the 30 s timeout (< 20000)" test "$ms" -lt 20000
ms=$(rig_time_ms $B "$FP_CLIENT vfio-dead $U >/tmp/dead4.out 2>&1")
expect "no agent at all: surprise-removed at once ($ms ms on L0 < 8000)" rig_run $B -- "grep -q '^ok ' /tmp/dead4.out && test $ms -lt 8000"
expect "counters: upcall_notconn >= 2" test "$(fp_counter $B upcall_notconn)" -ge 2
rig_run $B -- "echo 2000 > $PARAM"

echo "# (f) teardown"
expect "remove the instance" rig_run $B --timeout 20 -- "echo 1 > /sys/bus/mdev/devices/$U/remove"
expect "withdraw" c withdraw --id 7
rig_run $B -- "cat $FP_DBG/counters"
for n in upcalls_pending agent_files instances vfio_open devices; do
	expect_eq "counters: $n" "$(fp_counter $B $n)" 0
done
expect "rmmod farpass at once" rig_run $B --timeout 20 -- "rmmod farpass"
expect_klog_clean $B --also leak
