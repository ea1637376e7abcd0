#!/bin/bash
# Baseline of the e2e suite (and of make bench): the same emulated NVMe model, attached to borrower1's
# own L1 and passed through LOCALLY with vfio-pci, to an L2 guest of 3 GiB (q35 puts 1 GiB of it above
# 4 GiB) whose stock nvme driver runs fio randwrite+verify at 4 KiB and 128 KiB (direct I/O) with a
# per-run pattern that encodes each block's offset. Checks:
#  (a) the guest's fio verify passed, and its NVMe MSI-X interrupts counted in /proc/interrupts;
#  (b) the guest has RAM above 4 GiB;
#  (c) on L0, the device's backing file holds the pattern at every block the guest wrote (the proof),
#      and the checker fails on an unwritten region and with another tag.
# Prints the L2 run's duration (L0 clock).
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/../kernel/kernel-lib.sh"
. "$(dirname "$0")/e2e-lib.sh"
e2e_check_setup

NVME=0000:00:08.0
# No NTB: the lender and the link are not used.
export RIG_NO_NTB=1
e2e_borrower_nvme 256M
# The L2's 3 GiB are pinned in the L1 for vfio-pci.
rig_up --borrowers 1 --lender-mem 1024 --borrower-mem 4608
expect "borrower1: its own NVMe $NVME bound to vfio-pci" fp_bind_vfio borrower1 "$NVME"

tag=$(e2e_tag)
t0=$SECONDS
out=$(e2e_l2 borrower1 3G "$(e2e_fio_script "$tag")" -device vfio-pci,host=$NVME) || echo "L2 QEMU: status $?"
echo "L2 boot + fio + power-off: $((SECONDS - t0)) s"
e2e_expect_guest_fio "$out"
e2e_expect_ram_above_4g "$out"
e2e_expect_written "$E2E_BORROWER_IMG" "$tag"
