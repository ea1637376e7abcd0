#!/bin/bash
# Plain MSI: the lender's QEMU e1000e NIC in an L2 guest of borrower1 through the farpass mdev and stock
# QEMU (-device vfio-pci,sysfsdev=...), its stock e1000e driver told to use MSI (e1000e.IntMode=1: the
# device's one-vector MSI capability, not its MSI-X; user-mode networking on L0). The mdev virtualises the
# MSI capability and serves VFIO's MSI index; the lender's agent arms the device's MSI with vfio-pci and
# the interrupt bridge relays it. The guest downloads a per-run random blob from an HTTP server the test
# runs on L0 and uploads it back under a per-run tag. Checks:
#  (a) the guest's stock e1000e driver bound the NIC (8086:10d3);
#  (b) its eth0 came up with a link; on L0: the guest's sha256 of what it downloaded is the blob's, and
#      the server stored the guest's upload under this run's tag with exactly the blob's bytes (DMA both
#      ways);
#  (c) the interrupt is plain MSI: the NIC's msi_irqs has one vector, of kind msi (not msix), its eth0
#      line in /proc/interrupts is PCI-MSI and counted during the transfer; the lender's agent armed the
#      device's MSI (IRQ index 1) for the lease;
#  (d) no software in the data path: over the transfer, every farpass counter of the lender and of
#      borrower1 outside an allow-list (lender: irq_posted; borrower1: doorbell, interrupt delivery and
#      signalling, MSI-X table/PBA traps) kept its value, and no MSI-X table/PBA access was trapped; the
#      interrupt relay: borrower1's irq_signalled grew by as much as the lender's irq_posted (more than
#      0), irq_dropped and irq_no_eventfd did not grow;
#  (e) the guest's shutdown returned the NIC: borrower1's agent gave it back, the lender shows it free on
#      vfio-pci with bus master off; the guest's script exited 0, and its QEMU powered off within 60 s of
#      the script's end, with status 0;
#  (f) the kernel logs of both L1s have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
# Prints the L2 run's duration and the allowed counters' growth.
set -euo pipefail
. "$(dirname "$0")/../e2e/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e15e
AG_LENT=$RIG_NIC_PCI
RIG_LENDER_EXTRA=$RIG_NIC_LENDER_EXTRA
E2E_L2_APPEND=e1000e.IntMode=1

e2e_http_up 2
# The guest's 512 MiB are pinned in borrower1.
e2e_remote_up $B $U 1024
e2e_nic_transfer $B $U "$(e2e_tag)"
out=$E2E_OUT

expect "(a) the guest's stock e1000e driver bound the 82574L" grep -qE '0x8086:0x10d3 .*driver=e1000e$' <<<"$out"
e2e_expect_nic_irqs "(c)"
expect_eq "(c) the NIC's interrupt vectors (msi_irqs)" "$(sed -n 's/^E2E-MSI-IRQ [0-9]* //p' <<<"$out")" msi
expect "(c) its eth0 line is PCI-MSI" grep -qE '^E2E-IRQ-LINE .*PCI-MSI.*eth0' <<<"$out"
expect_eq "(c) the lender's agent armed the device's MSI (IRQ index 1) for the lease" "$E2E_IRQ_INDEX" 1
e2e_expect_irq_relay "$E2E_S0" "$E2E_S1" "the transfer"
e2e_expect_no_software_in_path "$E2E_S0" "$E2E_S1" "the transfer"
ag_expect_returned $B 30 "(e)"
expect_klog_clean $B
expect_klog_clean lender
