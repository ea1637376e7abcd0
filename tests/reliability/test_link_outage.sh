#!/bin/bash
# Scenario 1 of issue 15, a link outage shorter than the guest's command timeout: link 1 (lender to
# borrower1) runs through a relay on L0 (RIG_LINK_RELAY, tests/rig/link-relay.cpp), which pulls the cable
# out for OUTAGE_S (10) seconds while borrower1's 256 MiB L2 guest writes the lender's NVMe through the
# farpass mdev with fio, then plugs it back. The guest's nvme command timeouts are 20 s (30 and 60 s by
# default): longer than the outage, as the promise needs (docs/mdev.md, "Link outages"), shorter than
# the defaults so that the test takes less time. Checks:
#  (a) the guest was writing when the link went down: fio's progress (e2e_fio_progress_job) says N KiB
#      of its sequential region had completed, more than none and less than all of it;
#  (b) the outage reached both hosts: the lender and borrower1 logged link down and then link up, and
#      the handshake again, once the relay plugged the cable back;
#  (c) the guest recovered by itself: its nvme driver logged a command timeout and brought the controller
#      up again after its probe; fio's progress went on past where it stood when the link came back (the
#      time is printed)
#      and reached the whole region; then the guest read the whole region back (fio verify-only, direct
#      I/O: each 4 KiB block holds the pattern of its tag and offset): no acknowledged write was lost and
#      no read returned stale data;
#  (d) on L0 the lender's backing file holds the region's pattern, and the canary written before the guest
#      started is intact everywhere else;
#  (e) the lease outlived the outage: the lender's agent logged no lease expiry while the link was down; the
#      guest's script exited 0 and its QEMU powered off, which returned the device (the lender has it
#      free and reset); borrower1's agent logged one borrow and one give-back per controller bring-up of
#      the guest's driver; the lender's and borrower1's resources (e2e_resources) are what they were
#      before the guest started;
#  (f) the kernel logs of the lender and borrower1 have no warning, BUG, oops, RCU stall, hung task or
#      DMAR fault.
# Writes its row of the suite's summary table (rel-lib.sh).
set -euo pipefail
export RIG_LINK_RELAY=1
. "$(dirname "$0")/rel-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup
OUTAGE_S=${OUTAGE_S:-10}
REGION=$REL_REGION
E2E_REGIONS=("$REGION")
E2E_L2_APPEND='nvme_core.io_timeout=20 nvme_core.admin_timeout=20'
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2f5
rel_guest_up $U
rel_row scenario "1: a short link outage" outage "link 1 cut for $OUTAGE_S s during fio"
# The link's events in VM's kernel log, one per line ("link down", "link up", "link handshake done: ...").
klog() { rig_run "$1" -- "dmesg | sed -nE 's/^\[[ 0-9.]*\] farpass [0-9a-f:.]+: (link (up|down|handshake done).*)/\1/p'"; }

tag=$(e2e_tag)
e2e_canary "$IMG"
r0=$(e2e_resources $B)
e2e_resources_show "$r0"
declare -A klog0=([lender]=$(klog lender | wc -l) [$B]=$(klog $B | wc -l))

e2e_l2_start $B 256M "$(rel_guest_script "$tag" "$REGION" E2E-OUTAGE-VERIFY)" \
	-device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U
log=$E2E_L2_LOG
e2e_wait_done_kb $B "$log" $REL_FAULT_AFTER_KB
IFS=: read -r _ _ size <<<"$REGION"
size_kb=$((size >> 10))

echo "# link 1 goes down for $OUTAGE_S s"
lender_lines=$(ag_log lender | wc -l)
rig_link_cut 1
kb=$(e2e_done_kb "$log")
sleep "$OUTAGE_S"
rig_link_restore 1
t_back=$(date +%s.%N)
# Where fio stood when the link came back: the writes completing just before the cut are in it.
kb_back=$(e2e_done_kb "$log")
expect "(a) the guest had completed writes when the link went down: ${kb:-none} KiB" test "${kb:-0}" -gt 0
expect "(a) ... and fio was still writing (less than the region's $size_kb KiB)" test "$kb" -lt $size_kb
rel_row 'what the guest saw' "link down after $((kb / 4)) blocks acknowledged"

t_resume=$(rel_resumed_after $B "$log" "$kb_back" "$t_back")
echo "the guest's writes went on ${t_resume:-never (300 s)} s after the link came back"
rel_row 'recovery time' "fio went on ${t_resume:-never (300 s)} s after the link came back"
during=$(ag_log lender | tail -n +$((lender_lines + 1)))
e2e_l2_end $B
out=$E2E_OUT
grep -E '^(L2-|E2E-)' <<<"$out" | grep -v '^E2E-DONE-KB' | sed 's/^/    L2> /'
for vm in lender $B; do
	new=$(klog $vm | tail -n +$((klog0[$vm] + 1)) | tr '\n' '/')
	expect_eq "(b) $vm: the link went down and came back (kernel log)" "$new" "link down/link up/link handshake done: peer protocol 1 roles 0x3/"
done
expect "(c) the guest's writes went on after the link came back" test -n "$t_resume"
expect_eq "(c) ... and completed the whole region (KiB)" "$(e2e_done_kb "$log")" $size_kb
expect "(c) guest: its nvme driver logged a command timeout" grep -q '^E2E-NVME-LOG .*timeout' <<<"$out"
ups=$(rel_nvme_bringups "$out")
expect "(c) ... and brought the controller up again after its probe (up $ups times)" test "$ups" -ge 2
expect_eq "(c) guest: the read-back of the whole region (verify-only)" \
	"$(sed -n 's/^E2E-OUTAGE-VERIFY bs=4096 rc=//p' <<<"$out")" 0
expect_eq "(e) L2's script exited with status" "$(sed -n 's/^L2-SCRIPT-RC //p' <<<"$out")" 0
rel_row 'what the guest saw' "link down after $((kb / 4)) blocks acknowledged: nvme timeout and controller reset, fio went on" \
	'blocks checked' "$((size_kb / 4)) of 4 KiB, read back in the guest and on L0"
e2e_expect_written "$IMG" "$tag"
expect_eq "(e) lender: the lease did not end while the link was down (agent log)" \
	"$(grep 'expired' <<<"$during" || true)" ""
e2e_expect_borrows $B "$ups" "(e) borrower1's agent: a borrow and a give-back per controller bring-up ($ups)"
rel_expect_back "$r0"
