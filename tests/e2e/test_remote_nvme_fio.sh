#!/bin/bash
# The lender's NVMe in an L2 guest of borrower1 through the farpass mdev and stock QEMU
# (-device vfio-pci,sysfsdev=...), 3 GiB of guest RAM (1 GiB of it above 4 GiB), the guest's stock nvme
# driver running the same fio as tests/soak/test_local_nvme_fio.sh (the same model passed through locally). Checks:
#  (a) the guest's fio verify passed and its script exited 0; the NVMe's MSI-X queue interrupts reached
#      the guest, at least 90% as many as the requests completed; its kernel logged no nvme timeout,
#      abort or controller reset; its QEMU powered off within 60 s of the script's end, with status 0;
#  (b) the guest has RAM above 4 GiB, and the page frames of each fio job's I/O buffer, sampled from the
#      guest's pagemap while the job ran, were all above 4 GiB; borrower1's DMA window (DMA_LAYOUT during
#      fio) has a slot above 4 GiB (the layout and pinned pages are printed); its pinned pages cover the
#      guest's RAM (also what QEMU re-mapped after the borrow);
#  (c) on L0, the lender's backing file holds the pattern at every block the guest wrote (the proof), and
#      the checker fails on an unwritten region and with another tag; the canary written over the whole
#      file before the guest booted is intact everywhere else;
#  (d) no software in the data path: over the fio jobs, every farpass counter of the lender and of
#      borrower1 outside an allow-list (lender: irq_posted; borrower1: doorbell, interrupt delivery and
#      signalling, MSI-X table/PBA traps) kept its value, and no MSI-X table/PBA access was trapped
#      (E2E_MSIX_TRAPS_MAX); the interrupt relay: borrower1's irq_signalled grew by as much as the
#      lender's irq_posted, irq_dropped and irq_no_eventfd did not grow;
#  (e) the guest's shutdown returned the device: borrower1's agent gave it back, the lender shows it free
#      and reset it (bus master off, CSTS.RDY 0); QEMU's reset of the unborrowed mdev at the guest's start
#      succeeded (no "no available reset mechanism");
#  (f) the kernel logs of both L1s have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
# Prints the L2 run's duration and the allowed counters' growth.
set -euo pipefail
. "$(dirname "$0")/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2e1
# The guest's 3 GiB are pinned in borrower1.
e2e_remote_up $B $U 4608

tag=$(e2e_tag)
e2e_canary "$(rig_lender_nvme_img)"
t0=$SECONDS
E2E_FIO_PFNS=1
e2e_l2_start $B 3G "$(e2e_fio_script "$tag" --pause)" -device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U
expect "L2 booted and reached its fio jobs" e2e_l2_wait $B fio 900
s0=$(e2e_snapshot $B --hold)
layout=$(fp_client $B dma-layout --id "$E2E_DEVICE_ID" || true)
e2e_l2_continue $B
expect "L2 finished its fio jobs" e2e_l2_wait $B fio-done 1200
s1=$(e2e_snapshot $B --hold)
printf '%s\n' "$s0" >"$RIGDIR/snapshot-0.txt"
printf '%s\n' "$s1" >"$RIGDIR/snapshot-1.txt"
e2e_l2_continue $B
e2e_l2_end $B
out=$E2E_OUT
echo "L2 boot + fio + power-off: $((SECONDS - t0)) s"

e2e_expect_guest_fio "$out"
e2e_expect_ram_above_4g "$out"
e2e_expect_buffers_above_4g "$out"
echo "DMA_LAYOUT during fio: $layout"
expect "(b) the DMA window has a slot above 4 GiB" grep -qE 'slots=.*0x[1-9][0-9a-f]{8}\+' <<<"$layout"
echo "counter dma_refilled_pages: $(e2e_snap $B "$s1" dma_refilled_pages) (pinned again since the borrow)"
e2e_expect_window_full "$layout" "(b)"

e2e_expect_no_software_in_path "$s0" "$s1" fio
e2e_expect_irq_relay "$s0" "$s1" fio

e2e_expect_written "$(rig_lender_nvme_img)" "$tag"
ag_expect_returned $B 30 "(e)"
e2e_expect_reset_works $B
expect_klog_clean $B
expect_klog_clean lender
