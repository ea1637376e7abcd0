#!/bin/bash
# The remote-NVMe test's VFIO client (farpass-client nvme-identify) against a LOCAL vfio-pci device: the
# lender's own QEMU NVMe bound to vfio-pci in the lender L1. The client does what QEMU and a guest's NVMe
# driver do: type1 container, BAR0 mmapped as VFIO allows (sparse areas), two 2 MiB DMA buffers at IOVA
# 1 MiB and 4 GiB, memory space + bus master, MSI-X vector 0 on an eventfd, the admin queue bring-up,
# Identify Controller into the low buffer and Identify Namespace 1 into the high one (SQ0 low, CQ0 high).
# The mdev test (draft_remote_nvme.sh) runs the same client with --mdev: only the transport differs.
#  (a) both commands complete with status 0, each with its MSI-X interrupt (irqs >= 2);
#  (b) Identify Controller: VID 0x1b36 (as the config space says), model "QEMU NVMe Ctrl...";
#  (c) Identify Namespace 1: NSZE = the backing file's size / 512; a wrong --nsze makes the client fail;
#  (d) no DMAR fault on the lender: every DMA went to the IOVAs we mapped;
#  (e) bus master off leaves the controller reachable; VFIO_DEVICE_RESET then resets it (CSTS.RDY 0);
#  (f) --hold-until (the draft's pause before the return) then reads the PCIe Device Control/Status
#      through the config region: a real value here, where a dead borrower's agent gives all-ones.
#  (g) BAR0 mmapped whole (vfio-pci: no sparse areas), or with --no-mmap (QEMU's x-no-mmap) only through
#      pread/pwrite of the region, as on an mdev that offers no mmap: the same results.
# Prints how long the client's run (open, bring-up, two identifies, return, reset) takes, timed on L0.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
[ -e "$FP_CLIENT" ] || { echo "missing $FP_CLIENT: run make build" >&2; exit 1; }

NVME=0000:00:08.0
# Only the lender is used: no NTB needed; rig_up boots one borrower, which stays idle.
export RIG_NO_NTB=1
rig_up --borrowers 1
nsze=$(($(stat -c %s "$(rig_lender_nvme_img)") / 512))

expect "lender: $NVME bound to vfio-pci" fp_bind_vfio lender $NVME
group=/dev/vfio/$(rig_run lender -- "basename \$(readlink /sys/bus/pci/devices/$NVME/iommu_group)")
identify="$FP_CLIENT nvme-identify --group $group --dev $NVME"

echo "# (a)-(f): nvme-identify --hold-until /dev/null --return --reset"
ms=$(rig_time_ms lender "$identify --nsze $nsze --hold-until /dev/null --return --reset >/tmp/identify.out 2>&1")
out=$(rig_run lender -- "cat /tmp/identify.out")
echo "$out"
echo "nvme-identify took $ms ms (L0 clock)"
fp_expect_identify "$out" "$nsze"
expect "(c) a wrong NSZE fails the client" \
	rig_run lender --timeout 60 -- "$identify --nsze $((nsze + 1)) --expect EIO"
expect "(d) no DMAR fault on the lender" rig_run lender -- "! dmesg | grep -i 'DMAR.*fault'"
expect_eq "(e) bus master off" "$(fp_field "$out" return)" ok
csts=$(fp_field "$out" return_csts)
expect "(e) ... the controller still answers, ready: CSTS $csts" test "$csts" = 0x1
expect_eq "(e) VFIO_DEVICE_RESET" "$(fp_field "$out" reset)" ok
csts=$(fp_field "$out" reset_csts)
expect "(e) ... reset the controller: CSTS $csts, RDY 0" test "${csts:0:2}" = 0x -a "$csts" != 0xffffffff -a $((csts & 1)) = 0
held=$(fp_field "$out" held_cfg)
expect "(f) PCIe Device Control/Status after the hold: $held, not all-ones" test "${held:0:2}" = 0x -a "$held" != 0xffffffff
expect_eq "(g) BAR0 mmapped whole" "$(fp_field "$out" mmap)" "1:0+$(fp_field "$out" bar0)"
echo "# (g) --no-mmap"
out=$(rig_run lender --timeout 120 -- "$identify --nsze $nsze --no-mmap")
echo "$out"
fp_expect_identify "$out" "$nsze"
expect_eq "(g) nothing mmapped" "$(fp_field "$out" mmap)" 0
