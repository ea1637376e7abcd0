#!/bin/bash
# Issue 16, SR-IOV: the two virtual functions of one lender PF lent to two borrowers at once. The lender
# has QEMU's SR-IOV NVMe (RIG_LENDER_SRIOV=1: namespaces 1 and 2, each backed by its own file on L0);
# borrower1's guest gets VF1 through its farpass mdev, borrower2's guest VF2, and both run fio with
# verify at the same time, each with its own tag (both continued before either is waited for). Checks:
#  (a) ag_sriov_up in the lender: both secondary controllers online, nsid K attached to VF K only, the
#      PF and each VF in IOMMU groups of their own, the PF on the lender's nvme driver, the VFs on none;
#      its agent lends both VFs (each then on vfio-pci) and both borrowers' agents announce both;
#  (b) both guests boot, each with its VF on its stock nvme driver, and wait before their fio jobs: the
#      lender lists VF1 borrowed by borrower1 and VF2 by borrower2;
#  (c) both guests' fio verify passed and their scripts exited 0 (e2e_expect_guest_fio), their QEMUs
#      powered off with status 0; while both had finished their fio jobs the PF was still on nvme;
#  (d) on L0, namespace 1's backing file holds guest 1's pattern at every block it wrote, namespace 2's
#      guest 2's, and the canary written over both files before the guests is intact everywhere else
#      (so neither file holds anything of the other guest), the checker failing on the unwritten
#      region and with another tag (e2e_expect_written);
#  (e) the guests' shutdown gave each VF back (its borrower's agent), the lender lists both free, on
#      vfio-pci, bus master off, the controller reset (ag_expect_returned); the PF still on nvme;
#  (f) the kernel logs of the lender and both borrowers have no warning, BUG, oops, RCU stall, hung task
#      or DMAR fault.
set -euo pipefail
export RIG_LENDER_SRIOV=1
. "$(dirname "$0")/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit

VF1=$(rig_lender_sriov_pci 1) VF2=$(rig_lender_sriov_pci 2)
IMG1=$(rig_lender_sriov_img 1) IMG2=$(rig_lender_sriov_img 2)
TAG1=$(e2e_tag) TAG2=$(e2e_tag)
AG_LENT=$VF1
export AG_LENT_ALSO=$VF2
# Short jobs, long bounds: three L1s under TCG share L0's cores.
E2E_L2_TIMEOUT=2400
E2E_REGIONS=(4096:$((16 << 20)):$((512 << 10)) 131072:$((64 << 20)):$((1 << 20)))
U1=8f7c3ab0-5c6e-4e41-9d3e-00000000e5f1
# (a): ag_lender_up runs ag_sriov_up before lending.
e2e_remote_up "borrower1 borrower2" "$U1" 1024
expect_eq "(a) lender: the PF on nvme, both VFs on vfio-pci" "$(ag_lender_drivers)" "nvme vfio-pci vfio-pci"
# e2e_remote_up made an instance of VF1 on both borrowers: borrower2's guest gets VF2 instead.
expect "borrower2: remove its instance of VF1" rig_run borrower2 -- "echo 1 > /sys/bus/mdev/devices/$U1/remove"
ag_extra_mdev borrower2 "$VF2"
U2=$AG_EXTRA_UUID

e2e_canary "$IMG1"
expect "L0: the canary written over $(basename "$IMG2") too" \
	python3 "$E2E_LIB/check-pattern.py" --fill "$IMG2" "$E2E_CANARY"

t0=$SECONDS
E2E_L2_NAME=g1 e2e_l2_start borrower1 256M "$(e2e_fio_script "$TAG1" --pause)" -device "vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U1"
LOG1=$E2E_L2_LOG
E2E_L2_NAME=g2 e2e_l2_start borrower2 256M "$(e2e_fio_script "$TAG2" --pause)" -device "vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U2"
LOG2=$E2E_L2_LOG
E2E_L2_LOG=$LOG1 E2E_L2_NAME=g1 expect "(b) guest 1 booted with VF1 and waits before its fio jobs" \
	e2e_l2_wait borrower1 fio $E2E_L2_TIMEOUT
E2E_L2_LOG=$LOG2 E2E_L2_NAME=g2 expect "(b) guest 2 booted with VF2 and waits before its fio jobs" \
	e2e_l2_wait borrower2 fio $E2E_L2_TIMEOUT
echo "both guests booted in $((SECONDS - t0)) s"
expect_eq "(b) the lender: VF1 borrowed by borrower1, VF2 by borrower2" \
	"$(ag_ctl lender --json list | jq -r '.devices[] | "\(.pci) \(.borrower)"' | sort | paste -sd ' ')" \
	"$VF1 borrower1 $VF2 borrower2"

echo "# (c) both guests run fio at once"
t1=$SECONDS
E2E_L2_NAME=g1 e2e_l2_continue borrower1
E2E_L2_NAME=g2 e2e_l2_continue borrower2
E2E_L2_LOG=$LOG1 E2E_L2_NAME=g1 expect "guest 1 finished its fio jobs" e2e_l2_wait borrower1 fio-done $E2E_L2_TIMEOUT
E2E_L2_LOG=$LOG2 E2E_L2_NAME=g2 expect "guest 2 finished its fio jobs" e2e_l2_wait borrower2 fio-done $E2E_L2_TIMEOUT
echo "both guests' fio jobs took $((SECONDS - t1)) s"
expect_eq "(c) lender: the PF still on nvme while both VFs were in use" "$(ag_lender_drivers)" "nvme vfio-pci vfio-pci"
E2E_L2_NAME=g1 e2e_l2_continue borrower1
E2E_L2_NAME=g2 e2e_l2_continue borrower2
E2E_L2_LOG=$LOG1 E2E_L2_NAME=g1 e2e_l2_end borrower1
OUT1=$E2E_OUT
E2E_L2_LOG=$LOG2 E2E_L2_NAME=g2 e2e_l2_end borrower2
OUT2=$E2E_OUT

echo "# guest 1: VF1 $VF1, tag $TAG1, namespace 1 $(basename "$IMG1")"
e2e_expect_guest_fio "$OUT1"
e2e_expect_written "$IMG1" "$TAG1"
echo "# guest 2: VF2 $VF2, tag $TAG2, namespace 2 $(basename "$IMG2")"
e2e_expect_guest_fio "$OUT2"
e2e_expect_written "$IMG2" "$TAG2"

AG_LENT=$VF1 ag_expect_returned borrower1 30 "(e)"
AG_LENT=$VF2 ag_expect_returned borrower2 30 "(e)"
expect_eq "(e) lender: the PF still on nvme" "$(ag_lender_drivers)" "nvme vfio-pci vfio-pci"
expect_klog_clean lender
expect_klog_clean borrower1
expect_klog_clean borrower2
