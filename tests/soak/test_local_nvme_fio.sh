#!/bin/bash
# The rig's baseline for the e2e suite (in make soak: farpass is not in it): the same emulated NVMe model, attached to borrower1's
# own L1 and passed through LOCALLY with vfio-pci, to an L2 guest of 3 GiB (q35 puts 1 GiB of it above
# 4 GiB) whose stock nvme driver runs fio randwrite+verify at 4 KiB and 128 KiB (direct I/O) with a
# per-run pattern that encodes each block's offset. Checks:
#  (a) the guest's fio verify passed and its script exited 0; its NVMe MSI-X queue interrupts counted in
#      /proc/interrupts, at least 90% as many as the requests completed; its kernel logged no nvme
#      timeout, abort or controller reset; its QEMU powered off within 60 s of the script's end, with
#      status 0;
#  (b) the guest has RAM above 4 GiB, and the page frames of each fio job's I/O buffer, sampled from the
#      guest's pagemap while the job ran, were all above 4 GiB;
#  (c) on L0, the device's backing file holds the pattern at every block the guest wrote (the proof),
#      and the checker fails on an unwritten region and with another tag; the canary written over the
#      whole file before the rig booted is intact everywhere else.
# Prints the L2 run's duration (L0 clock).
set -euo pipefail
. "$(dirname "$0")/../e2e/e2e-lib.sh"
e2e_check_setup

NVME=0000:00:08.0
# No NTB: the lender and the link are not used.
export RIG_NO_NTB=1
e2e_borrower_nvme 256M
e2e_canary "$E2E_BORROWER_IMG"
# The L2's 3 GiB are pinned in the L1 for vfio-pci.
rig_up --borrowers 1 --lender-mem 1024 --borrower-mem 4608
expect "borrower1: its own NVMe $NVME bound to vfio-pci" fp_bind_vfio borrower1 "$NVME"

tag=$(e2e_tag)
t0=$SECONDS
E2E_FIO_PFNS=1
e2e_l2_start borrower1 3G "$(e2e_fio_script "$tag")" -device vfio-pci,host=$NVME
e2e_l2_end borrower1
out=$E2E_OUT
echo "L2 boot + fio + power-off: $((SECONDS - t0)) s"
e2e_expect_guest_fio "$out"
e2e_expect_ram_above_4g "$out"
e2e_expect_buffers_above_4g "$out"
e2e_expect_written "$E2E_BORROWER_IMG" "$tag"
