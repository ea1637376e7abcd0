#!/bin/bash
# The lender's BAR window (BAR_MAP): QEMU's edu on the lender, bound to vfio-pci, exposed at a slot of
# the link's BAR window (inbound window FARPASS_MW_BAR = 0, an IOMMU mapping in the lender NTB's DMA
# domain); the borrower's CPU reaches it through its outbound window 0 (OUTBOUND_WINDOW + mmap).
#  (a) both sides reserved their windows: VERSION reports FARPASS_FEAT_DATA_PATH, the mailbox pages are
#      mapped (xwin_bar_bytes 4096 = the ack page, xwin_dma_bytes 65536 = the ring area);
#  (b) before BAR_MAP the borrower reads all-ones at the slot (the lender's IOMMU faults the access:
#      DMAR fault);
#  (c) after BAR_MAP it reads edu's identification register (0x010000ed), and edu's liveness register
#      (offset 4) reads back the complement of what it wrote;
#  (d) errors: not bound to vfio-pci EPERM, no such device ENODEV, past the window (or onto its last
#      page) ERANGE, overlapping EEXIST, misaligned or larger than the BAR EINVAL, unmapping twice ENOENT;
#  (e) after the unmap the borrower reads all-ones again;
#  (f) the NTB leaves farpass with a BAR still mapped: every window gauge is back to 0; both kernel logs have
#      no warning, BUG, oops, RCU stall, hung task or DMAR fault (on the lender, but those the test
#      provokes at the slot and the page before it).
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built

fp_rig_up_edu
SLOT=0x100000      # edu's BAR0 is 1 MiB: a slot aligned to its size
EDU_ID=0x10000ed   # as %#x prints 0x010000ed

fp_load lender
fp_load $B
for vm in lender $B; do
	expect "$vm: handshake ok" ntb_wait $vm 30 "grep -qx 'handshake ok' $FP_DBG/$(ntb_pci $vm)/link"
done
map() { fp_client lender bar-map --ntb $LNTB --pci $EDU_ADDR --bar 0 "$@"; }
# The word at offset $1 of the borrower's outbound BAR window (after writing $2 there, if given).
peek() {
	rig_run $B -- "$FP_CLIENT window-rw --ntb $NTB --mw 0 --offset $(($1)) ${2:+--write $2}" |
		sed -n 's/^ok value=//p'
}

echo "# (a) the windows"
for vm in lender $B; do
	expect "$vm: VERSION reports FARPASS_FEAT_DATA_PATH (and LINK_STATUS)" \
		rig_run $vm -- "$FP_CLIENT version | grep -q 'features=0x1f$'"
	expect_eq "$vm: the ack page is mapped in the BAR window" "$(fp_counter $vm xwin_bar_bytes)" 4096
	expect_eq "$vm: the ring area is mapped in the DMA window" "$(fp_counter $vm xwin_dma_bytes)" 65536
done
rig_run lender -- "dmesg | grep 'inbound window'"

echo "# (b) before BAR_MAP"
expect "lender: edu not bound to vfio-pci: EPERM" map --offset $SLOT --size 0x100000 --expect EPERM
expect_eq "borrower: all-ones at the slot" "$(peek $SLOT)" 0xffffffff
expect "lender: its IOMMU faulted the access" ntb_wait lender 10 "dmesg | grep -q 'DMAR.*fault'"

echo "# (c) BAR_MAP"
fp_bind_vfio lender $EDU_ADDR
expect "lender: BAR_MAP edu's BAR0 at $SLOT" map --offset $SLOT --size 0x100000
expect_eq "lender: one BAR mapping" "$(fp_counter lender bar_maps)" 1
expect_eq "lender: its 1 MiB in the BAR window" "$(fp_counter lender xwin_bar_bytes)" $((0x100000 + 4096))
expect_eq "borrower: edu's identification register" "$(peek $SLOT)" $EDU_ID
expect_eq "borrower: edu's liveness register inverts 0x12345678" "$(peek $((SLOT + 4)) 0x12345678)" 0xedcba987
expect_eq "borrower: and inverts 0x0f0f0000" "$(peek $((SLOT + 4)) 0x0f0f0000)" 0xf0f0ffff
expect_eq "borrower: below the slot is still all-ones" "$(peek $((SLOT - 4096)))" 0xffffffff

echo "# (d) errors"
expect "overlapping the mapping: EEXIST" map --offset $SLOT --size 0x1000 --expect EEXIST
expect "no such PCI device: ENODEV" map --pci 0000:00:1f.6 --offset 0x200000 --size 0x1000 --expect ENODEV
wsize=$(rig_run lender -- "$FP_CLIENT window --ntb $LNTB --mw 0" | sed -n 's/.*size=\(0x[0-9a-f]*\).*/\1/p')
echo "lender: BAR window $wsize bytes"
expect "over the window's end (its last page is the mailbox's): ERANGE" \
	map --offset $((wsize & ~0xfffff)) --size 0x100000 --expect ERANGE
expect "past the window: ERANGE" map --offset $(((wsize + 0xfffff) & ~0xfffff)) --size 0x1000 --expect ERANGE
expect "offset not aligned to the BAR: EINVAL" map --offset $((SLOT + 0x201000)) --size 0x1000 --expect EINVAL
expect "larger than the BAR: EINVAL" map --offset 0x400000 --size 0x200000 --expect EINVAL
expect "an I/O or absent BAR: EINVAL" map --bar 1 --offset 0x400000 --size 0x1000 --expect EINVAL
expect "unknown flags: EINVAL" map --offset 0x400000 --size 0x1000 --flags 2 --expect EINVAL
expect_eq "lender: still one BAR mapping" "$(fp_counter lender bar_maps)" 1

echo "# (e) unmap"
expect "lender: unmap" map --offset $SLOT --unmap
expect "lender: unmap again: ENOENT" map --offset $SLOT --unmap --expect ENOENT
expect_eq "borrower: all-ones at the slot again" "$(peek $SLOT)" 0xffffffff
expect_eq "lender: no BAR mapping" "$(fp_counter lender bar_maps)" 0
expect_eq "lender: only the ack page in the BAR window" "$(fp_counter lender xwin_bar_bytes)" 4096

echo "# (f) the NTB leaves farpass with a BAR mapped"
expect "lender: BAR_MAP again" map --offset $SLOT --size 0x100000
expect_eq "borrower: edu again" "$(peek $SLOT)" $EDU_ID
rig_run lender -- "echo $LNTB > /sys/bus/pci/drivers/ntb_hw_epf/unbind"
expect "lender: farpass let go of the NTB" ntb_wait lender 20 "! test -e $FP_DBG/$LNTB"
rig_run lender -- "cat $FP_DBG/counters"
for n in links bar_maps xwin_bar_bytes xwin_dma_bytes irq_hooks; do
	expect_eq "lender counters: $n" "$(fp_counter lender $n)" 0
done
# The reads (b), (c) and (e) provoked: the slot before BAR_MAP and after the unmap, the page below it.
iova=$(fp_inbound_iova lender 0)
expect "lender: farpass logged its BAR window's IOVA: $iova" test -n "$iova"
expect_klog_clean lender --fault "$(printf '%#x' $((iova + SLOT)))" --fault "$(printf '%#x' $((iova + SLOT - 4096)))"
expect_klog_clean $B
expect "lender: farpass unloads" rig_run lender --timeout 20 -- "rmmod farpass"
