#!/bin/bash
# Hostile DMA (issue 13): farpass-client on borrower1 as a malicious guest holding the lender's NVMe
# through the mdev (its RAM: 2 MiB at IOVA 1 MiB and 2 MiB at 4 GiB, filled with 0xa5) issues Identify
# Controller with PRP1 outside its RAM, (a) just past the low 2 MiB (0x300000) and far from both
# (1 GiB); one client per address, each after a correct Identify and followed by VFIO_DEVICE_RESET
# (one address at a time: QEMU's VT-d drops a device's fault while its previous one is pending). For
# each address:
#  (1) the client's RAM is intact byte for byte (0xa5 beyond its queue and identify data pages);
#  (2) the reset succeeds;
#  (3) the lender logs a DMAR write fault at the address (its IOMMU blocked the device's DMA; QEMU's
#      NVMe completes the command with status 0 whatever its DMA did, so the status proves nothing).
# Then (4) the device is recovered: a new client's Identify through the mdev passes fp_expect_identify's
# checks; (5) both kernel logs have no warning, BUG, oops, RCU stall, hung task or DMAR fault but the
# lender's at the addresses of (3), and the lender's no spurious interrupt (a DMA write the IOMMU
# takes for an MSI).
# Not tested: (b) a PRP into another lease's sub-window of the same link (the rig lends one NVMe, and a
# lease's guest addresses are all the device's private IOMMU domain on the lender maps); (c) the MSI
# range 0xfee00000: the rig's lender IOMMU (QEMU 7.2) takes such a write for an interrupt and, in
# compatibility format, delivers it although Linux disabled that format (the lender logged an NMI and
# unhandled vectors), so the rig cannot show it blocked (docs/mdev.md, Isolation).
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
. "$(dirname "$0")/../agent/agent-lib.sh"
ag_check_built && fp_check_built

rig_up --borrowers 1
B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000b0e7
nsze=$(($(stat -c %s "$(rig_lender_nvme_img)") / 512))
ag_remote_mdev $B $U

for addr in 0x300000 0x40000000; do
	echo "# Identify Controller into $addr"
	out=$(rig_run $B -- "$FP_CLIENT nvme-identify --mdev $U --hostile $addr --reset" || true)
	echo "$out"
	expect_eq "(1) the client's RAM is intact" "$(fp_field "$out" canary)" ok
	expect_eq "(2) VFIO_DEVICE_RESET" "$(fp_field "$out" reset)" ok
	expect "(3) lender: DMAR write fault at $addr" \
		ntb_wait lender 20 "dmesg | grep -q 'DMAR: \[DMA Write.* fault addr $addr '"
done

echo "# (4) a correct Identify after the resets"
fp_expect_identify "$(rig_run $B -- "$FP_CLIENT nvme-identify --mdev $U --nsze $nsze" || true)" "$nsze"
expect_klog_clean $B
expect_klog_clean lender --fault 0x300000 --fault 0x40000000 --also 'NMI received|No irq handler'
