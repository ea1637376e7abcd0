#!/bin/bash
# The lender's QEMU e1000 NIC (82540EM: a device class with legacy INTx only, no MSI or MSI-X; user-mode
# networking on L0) in an L2 guest of borrower1 through the farpass mdev and stock QEMU (-device
# vfio-pci,sysfsdev=...), driven by the guest's stock e1000 driver. The mdev shows the lender's interrupt
# pin and serves VFIO's INTx index as vfio-pci does (automasked, level); the lender's vfio-pci INTx fires
# through the interrupt bridge, and each unmask by the guest's QEMU goes back over it to the lender's
# vfio-pci unmask eventfd (the level-triggered round trip). The guest downloads a per-run random blob from
# an HTTP server the test runs on L0 and uploads it back under a per-run tag. Checks:
#  (a) the guest's stock e1000 driver bound the NIC (8086:100e);
#  (b) its eth0 came up with a link; on L0: the guest's sha256 of what it downloaded is the blob's, and
#      the server stored the guest's upload under this run's tag with exactly the blob's bytes (DMA both
#      ways);
#  (c) the interrupt is INTx: the guest's eth0 line in /proc/interrupts is an IO-APIC level (fasteoi)
#      one, counted during the transfer; the NIC has no msi_irqs; the lender's agent armed the device's
#      INTx (IRQ index 0) for the lease;
#  (d) no software in the data path but QEMU's INTx emulation: over the transfer every farpass counter of
#      the lender and of borrower1 outside an allow-list (lender: irq_posted, doorbell_events,
#      intx_unmasks_signalled; borrower1: doorbell, interrupt delivery and signalling, intx_unmasks_posted
#      and bar_trapped_other, the BAR accesses QEMU traps while an INTx is pending, as with vfio-pci
#      without KVM) kept its value, and no MSI-X table/PBA access was trapped; the round trip:
#      borrower1's irq_signalled grew by as much as the lender's irq_posted (more than 0), irq_dropped,
#      irq_no_eventfd and intx_masked (an interrupt that arrived masked) did not grow; borrower1 posted an
#      unmask for each interrupt it signalled (intx_unmasks_posted within one of irq_signalled: one may be
#      in flight at either end), and the lender signalled as many to vfio-pci (intx_unmasks_signalled
#      within one of them);
#  (e) the guest's shutdown returned the NIC: borrower1's agent gave it back, the lender shows it free on
#      vfio-pci with bus master off; the guest's script exited 0, and its QEMU powered off within 60 s of
#      the script's end, with status 0;
#  (f) the kernel logs of both L1s have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
# Prints the L2 run's duration and the allowed counters' growth.
set -euo pipefail
. "$(dirname "$0")/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e100
AG_LENT=$RIG_NIC_PCI
# The lender's NIC as RIG_NIC_LENDER_EXTRA's, an e1000 instead of the e1000e.
RIG_LENDER_EXTRA=${RIG_NIC_LENDER_EXTRA/e1000e/e1000}
E2E_IO_COUNTERS_LENDER+=' doorbell_events intx_unmasks_signalled'
E2E_IO_COUNTERS_BORROWER+=' intx_unmasks_posted bar_trapped_other'

e2e_http_up 1
# The guest's 512 MiB are pinned in borrower1.
e2e_remote_up $B $U 1024
e2e_nic_transfer $B $U "$(e2e_tag)"
out=$E2E_OUT
s0=$E2E_S0 s1=$E2E_S1

expect "(a) the guest's stock e1000 driver bound the 82540EM" grep -qE '0x8086:0x100e .*driver=e1000$' <<<"$out"
e2e_expect_nic_irqs "(c)"
expect "(c) its line is an IO-APIC level-triggered one (INTx)" grep -qE '^E2E-IRQ-LINE .*IO-APIC.*fasteoi.*eth0' <<<"$out"
expect_eq "(c) the NIC has no MSI/MSI-X vectors (msi_irqs)" "$(grep -c '^E2E-MSI-IRQ' <<<"$out" || true)" 0
expect_eq "(c) the lender's agent armed the device's INTx (IRQ index 0) for the lease" "$E2E_IRQ_INDEX" 0

e2e_expect_irq_relay "$s0" "$s1" "the transfer"
expect_eq "(d) $B: intx_masked growth" "$(e2e_snap_delta $B "$s0" "$s1" intx_masked)" 0
signalled=$(e2e_snap_delta $B "$s0" "$s1" irq_signalled)
posted=$(e2e_snap_delta $B "$s0" "$s1" intx_unmasks_posted)
unmasked=$(e2e_snap_delta lender "$s0" "$s1" intx_unmasks_signalled)
echo "INTx round trips during the transfer: $signalled signalled, $posted unmasks posted, $unmasked signalled on the lender"
expect "(d) $B posted an unmask for each INTx it signalled ($posted, $signalled)" \
	test $((posted - signalled)) -le 1 -a $((signalled - posted)) -le 1
expect "(d) the lender signalled each to vfio-pci ($unmasked, $posted)" \
	test $((unmasked - posted)) -le 1 -a $((posted - unmasked)) -le 1
e2e_expect_no_software_in_path "$s0" "$s1" "the transfer"

ag_expect_returned $B 30 "(e)"
expect_klog_clean $B
expect_klog_clean lender
