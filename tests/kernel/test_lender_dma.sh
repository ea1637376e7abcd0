#!/bin/bash
# The lender role's DMA path for real: a device on the lender DMAs to a guest-physical-like IOVA and the
# bytes land in the borrower's memory, through the lender's IOMMU (VFIO type1, as the agent's dma.map),
# farpass.ko's mmap of the NTB outbound window (OUTBOUND_WINDOW), the NTB, and the borrower's inbound
# translation into its NTB DMA domain. The borrower runs ntb_fidelity, not farpass.ko: the lender only
# needs the NTB link. The device is QEMU's edu (a DMA engine with a 4 KiB buffer, 28-bit DMA mask).
#  (a) OUTBOUND_WINDOW: MW2 (index 1) is the 64-bit window, 1 GiB; bad index -> ENOENT, unknown NTB ->
#      ENODEV; mmap beyond the window -> EINVAL;
#  (b) edu, bound to vfio-pci: pattern 1 -> local buffer -> edu -> IOVA mapped on the window's first page;
#      the borrower's buffer holds exactly pattern 1;
#  (c) the same IOVA mapped then VFIO_IOMMU_UNMAP_DMA'd: edu's DMA of pattern 2 faults in the lender's
#      IOMMU (DMAR at that IOVA) and the borrower's buffer still holds pattern 1;
#  (d) with the borrower's link down, OUTBOUND_WINDOW fails with ENOLINK;
#  (e) the NTB leaves farpass (ntb_hw_epf unbound) while a process has its window mapped: the mapping is
#      torn down (the next access gets SIGBUS), and farpass unloads; the lender's kernel log has no
#      warning, BUG, oops, RCU stall, hung task or DMAR fault but the one (c) provoked at that IOVA.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built

fp_rig_up_edu
MW=1               # MW2: the 64-bit prefetchable window
IOVA=0x1000000     # a GPA-like IOVA below edu's 256 MiB DMA mask
fid="cd /sys/kernel/debug/ntb_fidelity/$(ntb_pci $B)"

fp_load lender
ntb_load $B ntb_fidelity
rig_run $B -- "$fid; echo 1 > link"
expect "borrower: NTB link up" ntb_wait $B 30 "$fid; grep -q ^up link"
expect "lender: NTB link up" ntb_wait lender 30 "grep -qx 'link up' $FP_DBG/$LNTB/link"
read -r _ biova _ size _ _ < <(rig_run $B -- "$fid; echo 4096 > alloc; echo 0 > buf; cat alloc")
echo "borrower: buffer iova $biova size $size"
rig_run $B -- "$fid; echo '$MW $biova 4096' > trans"
bufsum() { rig_run $B -- "$fid; md5sum < buf | cut -d' ' -f1"; }
patsum() { rig_run $B -- "$FP_CLIENT pattern --seed $1 | md5sum | cut -d' ' -f1"; }

echo "# (a) OUTBOUND_WINDOW"
expect "MW2 is described: 2 windows, 1 GiB" \
	rig_run lender -- "$FP_CLIENT window --ntb $LNTB --mw $MW | grep -q 'count=2 size=0x40000000'"
fp_client lender window --ntb $LNTB --mw $MW
expect "window 2 does not exist: ENOENT" fp_client lender window --ntb $LNTB --mw 2 --expect ENOENT
expect "before VERSION: EPROTO" fp_client lender window --ntb $LNTB --mw $MW --no-version --expect EPROTO
expect "an unknown NTB: ENODEV" fp_client lender window --ntb 0000:00:1f.7 --expect ENODEV
expect "mmap past the window's end: EINVAL" fp_client lender window --ntb $LNTB --mw $MW --mmap-extra 4096 --expect EINVAL

echo "# (b) edu DMA through the lender's IOMMU and the outbound window into the borrower's buffer"
fp_bind_vfio lender $EDU_ADDR
expect_eq "borrower: buffer all zeros before" "$(rig_run $B -- "$fid; tr -d '\\0' < buf | wc -c")" 0
expect "lender: edu DMA of pattern 1 to IOVA $IOVA" fp_client lender edu-dma $EDU_ADDR --ntb $LNTB --mw $MW --iova $IOVA --seed 1
expect_eq "borrower: its buffer holds exactly pattern 1" "$(bufsum)" "$(patsum 1)"
read -r split page0 page1 < <(fp_client lender window --ntb $LNTB --mw $MW --split | tr '=' ' ' | awk '{ print $3, $5, $7 }')
echo "lender: split $split page0 $page0 page1 $page1"
expect "lender: the window's page 0 shows pattern 1 (0x231c150e), page 1 not" test "$page0" = 0x231c150e -a "$page1" != "$page0"
expect_eq "lender: a vma split off the window keeps its place in it" "$split" "$page1"

echo "# (c) unmapped: the DMA faults in the lender's IOMMU"
faults_before=$(rig_run lender -- "dmesg | grep -c 'DMAR.*fault addr' || true")
expect "lender: edu DMA of pattern 2 after VFIO_IOMMU_UNMAP_DMA" \
	fp_client lender edu-dma $EDU_ADDR --ntb $LNTB --mw $MW --iova $IOVA --seed 2 --unmapped
expect "lender: DMAR fault at $IOVA" ntb_wait lender 10 \
	"dmesg | grep -i 'DMAR.*fault addr $IOVA' && [ \$(dmesg | grep -c 'DMAR.*fault addr') -gt $faults_before ]"
rig_run lender -- "dmesg | grep -i 'DMAR.*fault' | tail -2"
expect_eq "borrower: its buffer still holds pattern 1" "$(bufsum)" "$(patsum 1)"

echo "# (d) link down"
rig_run lender -- "rm -f /tmp/go; $FP_CLIENT window --ntb $LNTB --mw $MW --hold-until /tmp/go </dev/null >/tmp/hold.out 2>&1 & echo \$! >/tmp/hold.pid"
expect "lender: a process holds the window mapped" ntb_wait lender 30 "grep -q '^mapped' /tmp/hold.out"
rig_run $B -- "$fid; echo '$MW clear' > trans; echo 0 > link"
expect "lender: NTB link down" ntb_wait lender 30 "grep -qx 'link down' $FP_DBG/$LNTB/link"
expect "OUTBOUND_WINDOW with the link down: ENOLINK" fp_client lender window --ntb $LNTB --mw $MW --expect ENOLINK

echo "# (e) the NTB leaves farpass while its window is mapped"
rig_run lender -- "echo $LNTB > /sys/bus/pci/drivers/ntb_hw_epf/unbind"
expect "lender: farpass let go of the NTB" ntb_wait lender 20 "! test -e $FP_DBG/$LNTB"
rig_run lender -- "touch /tmp/go"
expect "lender: the holder's next access got SIGBUS" ntb_wait lender 20 "grep -qx sigbus /tmp/hold.out"
rig_run lender -- "cat /tmp/hold.out"
expect_klog_clean lender --fault $IOVA
expect "lender: farpass unloads" rig_run lender --timeout 20 -- "rmmod farpass"
