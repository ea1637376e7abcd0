#!/bin/bash
# Restarts lose nothing, with a guest (issue 14): the lender's NVMe in an L2 guest of borrower1 through the
# farpass mdev (as test_remote_nvme_fio.sh), both agents under fp-supervise (systemd's file-descriptor
# store, Restart=on-failure). While the guest's fio writes and verifies, the lender's agent and then
# borrower1's are killed with SIGKILL and started again. Checks:
#  (a) both restarts happened during the fio jobs (the guest had not reached their end); the lender's
#      new agent adopted the NVMe's VFIO descriptors (logged); the lease id is the same on both sides after
#      each restart;
#  (b) the guest's fio verify passed, its NVMe interrupts kept coming and its kernel logged no nvme
#      timeout, abort or controller reset (e2e_expect_guest_fio);
#  (c) on L0, the lender's backing file holds the pattern at every block the guest wrote, and the canary
#      everywhere else;
#  (d) the guest's shutdown returned the device: the lender shows it free and reset it;
#  (e) the kernel logs of both L1s have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit
export AG_FDSTORE=1
# 8 MiB of 4 KiB random writes (2048 requests, then verified): long enough under TCG for two restarts.
E2E_REGIONS=(4096:$((16 << 20)):$((8 << 20)) 131072:$((64 << 20)):$((16 << 20)))

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2e5
e2e_remote_up $B $U 2048

tag=$(e2e_tag)
e2e_canary "$(rig_lender_nvme_img)"
t0=$SECONDS
e2e_l2_start $B 1G "$(e2e_fio_script "$tag" --pause)" -device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U
expect "L2 booted and reached its fio jobs" e2e_l2_wait $B fio 900
ids=$(ag_lease_ids $B)
echo "lease ids (lender, $B): $ids"
expect "a lease is held on both sides" test "$(wc -w <<<"$ids")" = 2
e2e_l2_continue $B

echo "# the lender's agent is killed during fio"
sleep 5 # into the jobs
expect "lender: SIGKILL the agent; the supervisor starts it again" ag_kill_restart lender
expect "(a) lender: it adopted the NVMe's VFIO descriptors" \
	ag_wait_log lender 10 "adopted $LENDER_NVME's VFIO descriptors: not reset"
expect_eq "(a) the same lease on both sides" "$(ag_lease_ids $B)" "$ids"
echo "# borrower1's agent is killed during fio"
expect "$B: SIGKILL the agent; the supervisor starts it again" ag_kill_restart $B
expect_eq "(a) the same lease on both sides" "$(ag_lease_ids $B)" "$ids"
expect "(a) both restarts happened while the fio jobs ran" not grep -q "^E2E-WAIT fio-done" "$E2E_L2_LOG"
expect "L2 finished its fio jobs" e2e_l2_wait $B fio-done 1200
expect_eq "(a) the same lease at the end of the jobs" "$(ag_lease_ids $B)" "$ids"
e2e_l2_continue $B
e2e_l2_end $B
out=$E2E_OUT
echo "L2 boot + fio + power-off: $((SECONDS - t0)) s"

e2e_expect_guest_fio "$out"
e2e_expect_written "$(rig_lender_nvme_img)" "$tag"
ag_expect_returned $B 30 "(d)"
expect_klog_clean $B
expect_klog_clean lender
