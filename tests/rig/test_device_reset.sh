#!/bin/bash
# A lender device reset as the lender agent resets it between leases (VFIO_DEVICE_RESET: Linux's
# function reset) forgets what the last holder programmed. The lender's e1000e has no FLR, so Linux
# resets it through its power-management capability (D3hot and back to D0, NoSoftRst clear), which QEMU
# 7.2 ignored: the NIC kept its rings and, when the next lease turned bus mastering on, read the previous
# guest's descriptors (a DMAR fault on the lender). qemu-patches/0005 resets it there as the 82574L does.
# Checks, on the lender's e1000e with no driver bound:
#  (a) Linux's reset method for it is the power-management one only (no FLR, no bus reset);
#  (b) after a receive ring base and receive enable are written through BAR0, a function reset through
#      sysfs returns both registers to 0.
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

RIG_LENDER_EXTRA=$RIG_NIC_LENDER_EXTRA
rig_up --borrowers 1

dev=/sys/bus/pci/devices/$RIG_NIC_PCI
RDBAL=0x2800 RCTL=0x100 RCTL_EN=0x2 RING=0x1ee000

rig_run lender -- "[ ! -e $dev/driver ] || echo $RIG_NIC_PCI > $dev/driver/unbind; setpci -s $RIG_NIC_PCI COMMAND=0x2:0x2"
expect_eq "(a) lender: the e1000e's reset method" "$(rig_run lender -- "cat $dev/reset_method")" pm

expect_eq "lender: the ring base written through BAR0 reads back" "$(rig_mmio32 lender $RIG_NIC_PCI 0 $RDBAL $RING)" $RING
expect_eq "lender: receive enable written through BAR0 reads back" "$(rig_mmio32 lender $RIG_NIC_PCI 0 $RCTL $RCTL_EN)" $RCTL_EN
rig_run lender -- "echo 1 > $dev/reset"
expect_eq "(b) lender: after the reset, the receive ring base" "$(rig_mmio32 lender $RIG_NIC_PCI 0 $RDBAL)" 0x0
expect_eq "(b) lender: after the reset, the receive control" "$(rig_mmio32 lender $RIG_NIC_PCI 0 $RCTL)" 0x0
