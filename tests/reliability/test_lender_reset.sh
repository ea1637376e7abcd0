#!/bin/bash
# Scenario 4 of issue 15, the lender's device reset under the guest: a function-level reset of the lender's
# NVMe (its sysfs reset, on the lender: the controller loses its queues and every command in flight) while
# borrower1's 256 MiB L2 guest writes it through the farpass mdev with fio. The guest's nvme command
# timeouts are 10 s (nvme_core.io_timeout and admin_timeout, 30 and 60 s by default), so its recovery takes
# seconds rather than minutes; its driver takes the same path. Checks:
#  (a) the guest was writing when the device was reset: fio's progress (e2e_fio_progress_job) says N KiB of
#      its sequential region had completed, more than none and less than all of it;
#  (b) the reset reached the controller: the lender's sysfs reset succeeded and the controller then read
#      disabled (CSTS.RDY 0) through its BAR on the lender;
#  (c) the guest saw an error and recovered by itself: its nvme driver logged a command timeout and brought
#      the controller up again after its probe (a reset of its own); once fio's progress grew again (the
#      time from the reset is printed), the controller read enabled again (CSTS.RDY 1) on the lender,
#      which only the guest's driver does; fio's progress reached the whole region; then the guest read the whole region back (fio verify-only, direct I/O: each 4 KiB
#      block holds the pattern of its tag and offset), so no acknowledged write was lost and no read
#      returned stale data;
#  (d) on L0 the lender's backing file holds the region's pattern, and the canary written before the guest
#      started is intact everywhere else;
#  (e) the guest's script exited 0 and its QEMU powered off; that returned the device (the lender has it
#      free and reset); borrower1's agent logged one borrow and one give-back for each time the guest's
#      driver brought the controller up (its probe and each of its resets, counted in the guest's log: a
#      reset turns bus mastering off, which gives the device back, and on again, which borrows it); the
#      lender's and borrower1's resources (e2e_resources) are what they were before the guest started;
#  (f) the kernel logs of the lender and borrower1 have no warning, BUG, oops, RCU stall, hung task or
#      DMAR fault.
# Writes its row of the suite's summary table (rel-lib.sh).
set -euo pipefail
. "$(dirname "$0")/rel-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup
REGION=$REL_REGION
E2E_REGIONS=("$REGION")
E2E_L2_APPEND='nvme_core.io_timeout=10 nvme_core.admin_timeout=10'
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2f4
rel_guest_up $U
rel_row scenario "4: the lender's device reset" outage "function-level reset of the NVMe on the lender during fio"

tag=$(e2e_tag)
e2e_canary "$IMG"
r0=$(e2e_resources $B)
e2e_resources_show "$r0"

e2e_l2_start $B 256M "$(rel_guest_script "$tag" "$REGION" E2E-RESET-VERIFY)" \
	-device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U
log=$E2E_L2_LOG
e2e_wait_done_kb $B "$log" $REL_FAULT_AFTER_KB
IFS=: read -r _ _ size <<<"$REGION"
size_kb=$((size >> 10))

echo "# the lender resets its NVMe"
expect "(b) lender: sysfs reset of $LENDER_NVME" rig_run lender -- "echo 1 >/sys/bus/pci/devices/$LENDER_NVME/reset"
t_reset=$(date +%s.%N)
kb=$(e2e_done_kb "$log")
csts=$(ag_lender_reg32 "$LENDER_NVME" 0 0x1c)
echo "lender: csts=$csts after the reset"
expect "(a) the guest had completed writes when the device was reset: ${kb:-none} KiB" test "${kb:-0}" -gt 0
expect "(a) ... and fio was still writing (less than the region's $size_kb KiB)" test "$kb" -lt $size_kb
expect "(b) lender: the controller is disabled after the reset (CSTS.RDY 0)" test $((csts & 1)) = 0
rel_row 'what the guest saw' "device reset after $((kb / 4)) blocks acknowledged"

t_resume=$(rel_resumed_after $B "$log" "$kb" "$t_reset")
echo "the guest's writes went on ${t_resume:-never (300 s)} s after the reset"
csts=$(ag_lender_reg32 "$LENDER_NVME" 0 0x1c)
echo "lender: csts=$csts after that"
rel_row 'recovery time' "fio went on ${t_resume:-never (300 s)} s after the reset"
e2e_l2_end $B
out=$E2E_OUT
grep -E '^(L2-|E2E-)' <<<"$out" | grep -v '^E2E-DONE-KB' | sed 's/^/    L2> /'
expect "(c) the guest's writes went on after the reset" test -n "$t_resume"
expect_eq "(c) ... and completed the whole region (KiB)" "$(e2e_done_kb "$log")" $size_kb
nvme_log=$(grep '^E2E-NVME-LOG' <<<"$out" || true)
expect "(c) guest: its nvme driver logged a command timeout" grep -q 'timeout' <<<"$nvme_log"
ups=$(rel_nvme_bringups "$out")
expect "(c) ... and brought the controller up again after its probe (up $ups times)" test "$ups" -ge 2
expect "(c) ... and enabled the controller again (CSTS.RDY 1 on the lender once the writes went on)" \
	test $((csts & 1)) = 1
expect_eq "(c) guest: the read-back of the whole region (verify-only)" \
	"$(sed -n 's/^E2E-RESET-VERIFY bs=4096 rc=//p' <<<"$out")" 0
expect_eq "(e) L2's script exited with status" "$(sed -n 's/^L2-SCRIPT-RC //p' <<<"$out")" 0
rel_row 'what the guest saw' "device reset after $((kb / 4)) blocks acknowledged: nvme timeout and controller reset, fio went on" \
	'blocks checked' "$((size_kb / 4)) of 4 KiB, read back in the guest and on L0"
e2e_expect_written "$IMG" "$tag"
e2e_expect_borrows $B "$ups" "(e) borrower1's agent: a borrow and a give-back per controller bring-up ($ups)"
rel_expect_back "$r0"
