#!/bin/bash
# The lender's NVMe in an L2 guest of borrower1 through the farpass mdev and stock QEMU
# (-device vfio-pci,sysfsdev=...), 3 GiB of guest RAM (1 GiB of it above 4 GiB), the guest's stock nvme
# driver running the same fio as test_local_nvme_fio.sh. Checks:
#  (a) the guest's fio verify passed, and the NVMe's MSI-X interrupts reached the guest and counted;
#  (b) the guest has RAM above 4 GiB, and borrower1's DMA window for it (DMA_LAYOUT during fio) has a
#      slot above 4 GiB: the device reaches guest pages there (the layout and pinned pages are printed);
#      its pinned pages cover the guest's RAM (also what QEMU re-mapped after the borrow);
#  (c) on L0, the lender's backing file holds the pattern at every block the guest wrote (the proof), and
#      the checker fails on an unwritten region and with another tag;
#  (d) no software in the data path: over the fio jobs, borrower1's farpass counters show no trapped BAR
#      access outside the MSI-X table/PBA and no agent upcall (the interrupt counters are printed);
#  (e) the guest's shutdown returned the device: borrower1's agent gave it back, the lender shows it free
#      and reset it (bus master off, CSTS.RDY 0); QEMU's reset of the unborrowed mdev at the guest's start
#      succeeded (no "no available reset mechanism").
# Prints the L2 run's duration and the counters' deltas.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/../kernel/kernel-lib.sh"
. "$(dirname "$0")/../agent/agent-lib.sh"
. "$(dirname "$0")/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2e1
# The guest's 3 GiB are pinned in borrower1.
e2e_remote_up $B $U 4608

tag=$(e2e_tag)
t0=$SECONDS
e2e_l2_start $B 3G "$(e2e_fio_script "$tag" --pause)" -device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U
expect "L2 booted and reached its fio jobs" e2e_l2_wait $B fio 900
c0=$(rig_run $B -- "cat $FP_DBG/counters")
layout=$(fp_client $B dma-layout --id "$E2E_DEVICE_ID" || true)
e2e_l2_continue $B
expect "L2 finished its fio jobs" e2e_l2_wait $B fio-done 1200
c1=$(rig_run $B -- "cat $FP_DBG/counters")
e2e_l2_continue $B
out=$(e2e_l2_finish $B) || echo "L2 QEMU: status $?"
echo "L2 boot + fio + power-off: $((SECONDS - t0)) s"

e2e_expect_guest_fio "$out"
e2e_expect_ram_above_4g "$out"
echo "DMA_LAYOUT during fio: $layout"
expect "(b) the DMA window has a slot above 4 GiB" grep -qE 'slots=.*0x[1-9][0-9a-f]{8}\+' <<<"$layout"
echo "counter dma_refilled_pages: $(e2e_counter "$c1" dma_refilled_pages) (pinned again since the borrow)"
e2e_expect_window_full "$layout" "(b)"

e2e_expect_no_software_in_path "$c0" "$c1" fio

e2e_expect_written "$(rig_lender_nvme_img)" "$tag"
ag_expect_returned $B 30 "(e)"
e2e_expect_reset_works $B
expect "no warning or oops on $B" rig_run $B -- "! dmesg | grep -E 'WARNING|BUG|Oops'"
expect "no warning or oops on the lender" rig_run lender -- "! dmesg | grep -E 'WARNING|BUG|Oops'"
