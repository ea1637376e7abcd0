#!/bin/bash
# Peer-to-peer DMA between two remote NVMe controllers of two lenders, and of one lender (issue 16),
# driven the way a guest does it by a VFIO client on borrower1 (farpass-client nvme-p2p: both mdevs in
# one container, as QEMU puts a VM's devices). A is the lender's first NVMe (link 1), B lender2's (link
# 3), C the lender's second; B and C have a 2 MiB controller memory buffer in BAR2
# (RIG_LENDER*_NVME_PROPS), which the client places at guest address 4 GiB + 128 MiB (right above the
# RAM at 4 GiB, where a guest's 64-bit BARs go and where the borrower's RAM probe looks for DIMMs) and
# maps into the container from the BAR mmap, as QEMU does. Checks:
#  (a) A's read of 4 KiB at LBA 0 into B's CMB completed with status 0, and the CMB page, read back
#      through B's BAR mmap, holds what A's backing file on L0 has there (A's DMA wrote B's BAR:
#      the lender's IOMMU -> link 1 -> borrower1's IOMMU -> link 3 -> lender2's IOMMU -> B's BAR);
#  (b) A's write of that page from the CMB to its LBA 8 completed with status 0, and A's backing file
#      on L0 has it there (A's DMA read B's BAR);
#  (c) B's write from its own CMB (enabled at the guest's address, CMBMSC) to its LBA 0 completed with
#      status 0, and lender2's backing file on L0 has the page there;
#  (d) once both were borrowed, borrower1's DMA windows held one peer BAR (debugfs dma_peers 1: B's CMB
#      in A's window; the client placed no other BAR) and listed no lender peer (dma_lender_peers 0);
#      once B was closed (as at its hot-unplug) with A still borrowed, none (0); after the client's end
#      both NVMe were given back and are free on their lenders (ag_expect_returned);
#  (f) the same with C, on A's lender, borrowed after A (--peer-last): A's read of LBA 16 into C's CMB
#      and its write from there to LBA 24, and C's write from its CMB to its LBA 0, completed with status
#      0 and the bytes are in the CMB page and in both backing files on L0 (A's DMA went to C's BAR
#      through the lender's IOMMU alone: the lender's agent mapped it, nothing in the borrower's windows);
#  (g) once both were borrowed, C's CMB was listed as A's lender peer (dma_lender_peers 1) with no peer
#      slot in a window (dma_peers 0), not once C was closed (0); borrower1's agent logged C's borrow
#      with "1 peer BAR(s) on the lender" (A's way to C, mapped at C's borrow); after the client's end
#      both were given back and are free;
#  (e) the kernel logs of both lenders and borrower1 have no warning, BUG, oops, RCU stall, hung task or
#      DMAR fault (no DMA went anywhere else).
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
. "$(dirname "$0")/../agent/agent-lib.sh"
ag_check_built && fp_check_built || exit

RIG_LENDER_NVMES=2 RIG_LENDER_NVME_PROPS=,cmb_size_mb=2 RIG_LENDER2_NVME_PROPS=,cmb_size_mb=2 \
	rig_up --borrowers 1 --lenders 2
B=borrower1
UA=8f7c3ab0-5c6e-4e41-9d3e-00000000b2a1
PCI_C=$(rig_lender_nvme_pci 1)
IMG_A=$(rig_lender_nvme_img) IMG_B=$(rig_lender_nvme_img 0 lender2) IMG_C=$(rig_lender_nvme_img 1)
# 4 KiB of random data at A's LBA 0 and 16; the places the pages are copied to hold something else first.
fill() { head -c "$3" /dev/zero | tr '\0' '\132' | dd of="$1" bs=512 seek="$2" conv=notrunc status=none; }
head -c 4096 /dev/urandom | dd of="$IMG_A" conv=notrunc status=none
head -c 4096 /dev/urandom | dd of="$IMG_A" bs=512 seek=16 conv=notrunc status=none
fill "$IMG_A" 8 8192
fill "$IMG_A" 24 4096
fill "$IMG_B" 0 4096
fill "$IMG_C" 0 4096
page_sum() { dd if="$1" bs=512 skip="$2" count=8 status=none | sha256sum | cut -d' ' -f1; }
want=$(page_sum "$IMG_A" 0) want_c=$(page_sum "$IMG_A" 16)

AG_LENT_ALSO=$PCI_C ag_remote_mdev $B $UA
ag_extra_mdev $B "$LENDER_NVME" lender2
UB=$AG_EXTRA_UUID
ag_extra_mdev $B "$PCI_C"
UC=$AG_EXTRA_UUID

echo "# (a)-(c) A reads into B's CMB, writes from it; B writes from its own CMB"
out=$(rig_run $B -- "$FP_CLIENT nvme-p2p --mdev $UA --peer $UB --dump /tmp/cmb.bin --lba 0 --dst-lba 8 --peer-lba 0 \
	--cmb-iova $((0x108000000)) 2>&1" || true)
echo "$out"
grep -q '^ok' <<<"$out" || rig_run $B -- "dmesg | grep -i farpass | tail -n 20" || true
expect_eq "(a) A's read into B's CMB: status" "$(fp_field "$out" read)" 0
expect_eq "(a) ... the CMB page (B's BAR mmap) holds A's LBA 0 from its backing file on L0" \
	"$(rig_run $B -- "sha256sum </tmp/cmb.bin | cut -d' ' -f1")" "$want"
expect_eq "(b) A's write from B's CMB: status" "$(fp_field "$out" write)" 0
expect_eq "(b) ... A's backing file on L0 has the page at LBA 8" "$(page_sum "$IMG_A" 8)" "$want"
expect_eq "(c) B's write from its own CMB: status" "$(fp_field "$out" peer_write)" 0
expect_eq "(c) ... lender2's backing file on L0 has the page at LBA 0" "$(page_sum "$IMG_B" 0)" "$want"

echo "# (d) the peer mapping lives while the instances are open"
expect_eq "(d) both borrowed: one peer BAR mapped (B's CMB in A's window)" "$(fp_field "$out" peers)" 1
expect_eq "(d) ... and no lender peer listed" "$(fp_field "$out" lender_peers)" 0
expect_eq "(d) B closed, A still borrowed: none" "$(fp_field "$out" peers_closed)" 0
ag_expect_returned $B 30 "(d)"
AG_LENDER=lender2 ag_expect_returned $B 30 "(d)"

echo "# (f) A reads into C's CMB (C on A's lender, borrowed after A), writes from it; C writes from its CMB"
out=$(rig_run $B -- "$FP_CLIENT nvme-p2p --mdev $UA --peer $UC --peer-last --dump /tmp/cmb-c.bin --lba 16 \
	--dst-lba 24 --peer-lba 0 --cmb-iova $((0x108000000)) 2>&1" || true)
echo "$out"
grep -q '^ok' <<<"$out" || rig_run $B -- "dmesg | grep -i farpass | tail -n 20" || true
expect_eq "(f) A's read into C's CMB: status" "$(fp_field "$out" read)" 0
expect_eq "(f) ... the CMB page (C's BAR mmap) holds A's LBA 16 from its backing file on L0" \
	"$(rig_run $B -- "sha256sum </tmp/cmb-c.bin | cut -d' ' -f1")" "$want_c"
expect_eq "(f) A's write from C's CMB: status" "$(fp_field "$out" write)" 0
expect_eq "(f) ... A's backing file on L0 has the page at LBA 24" "$(page_sum "$IMG_A" 24)" "$want_c"
expect_eq "(f) C's write from its own CMB: status" "$(fp_field "$out" peer_write)" 0
expect_eq "(f) ... C's backing file on L0 has the page at LBA 0" "$(page_sum "$IMG_C" 0)" "$want_c"

echo "# (g) the lender maps it, while both are borrowed"
expect_eq "(g) both borrowed: C's CMB listed as A's lender peer" "$(fp_field "$out" lender_peers)" 1
expect_eq "(g) ... and no peer slot in a window" "$(fp_field "$out" peers)" 0
expect_eq "(g) C closed, A still borrowed: not listed" "$(fp_field "$out" lender_peers_closed)" 0
expect "(g) $B: C's borrow mapped A's way to C on the lender" \
	ag_wait_log $B 5 "borrowed lender/$PCI_C \\([0-9]+ DMA slot\\(s\\) mapped, 1 peer BAR\\(s\\) on the lender\\)"
ag_expect_returned $B 30 "(g)"
AG_LENT=$PCI_C ag_expect_returned $B 30 "(g)"

expect_klog_clean $B
expect_klog_clean lender
expect_klog_clean lender2
