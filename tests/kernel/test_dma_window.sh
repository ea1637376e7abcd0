#!/bin/bash
# The borrower's DMA window for real: farpass.ko on the lender and on borrower1; on the borrower
# farpass-client announces a fake device, serves upcalls as the agent, and opens the mdev as QEMU
# would (type1 container, two zeroed 2 MiB buffers VFIO_IOMMU_MAP_DMA'd at IOVA 1 MiB and 4 GiB, the
# latter in two 1 MiB mappings as QEMU maps adjacent RAM sections: one guest RAM range; the low one in
# 4 KiB pages, each touched after a page of a spacer buffer, whose frames the page allocator then puts
# between the low buffer's, the high one a huge page if THP allows).
#  (a) bus master on: the DMA window is built before BORROW (ramscan finds exactly the two buffers,
#      every page pinned: DMA_LAYOUT and the pinned_pages counter say 1024), BORROW answered 0; each
#      slot mapped with one IOMMU call (debugfs last_borrow), the low one of several physical runs;
#  (b) the lender writes a stamp on every page of both slots through its outbound window FARPASS_MW_DMA
#      (OUTBOUND_WINDOW + mmap at each slot's offset): the borrower finds every stamp in its buffers
#      (bytes through the NTB and the borrower's IOMMU, at the offsets DMA_LAYOUT gave);
#  (b2) a second guest on the same link (device 9, its own container, the same GPAs) borrows meanwhile:
#      its sub-window is the first free one, after device 7's; the lender's stamps to its slots reach
#      its buffers and not device 7's (checked by 7 afterwards); it returns, the counters drop by its
#      share;
#  (c) VFIO_IOMMU_UNMAP_DMA of the high buffer's upper half (.dma_unmap): its 256 pages are unmapped
#      and unpinned before the ioctl returns, the lower half of that slot stays reachable (a mapping
#      run it cut is re-mapped); a lender write to the upper half no longer lands, one to the low slot
#      still does, and so does a device's DMA: QEMU's edu on the lender, its VFIO container mapping
#      GPA = IOVA onto the outbound window at the slot's offset (what the lender's agent will do),
#      DMAs a 4 KiB pattern into the low buffer's page 1 (lender IOMMU -> NTB -> borrower IOMMU);
#  (c2) as QEMU when it merges RAM sections, the VFIO user unmaps the high buffer's lower half and at
#      once maps the whole buffer as one: the kernel pins both halves back into the window by itself
#      (DMA_LAYOUT 1024 pages pinned, dma_refilled_pages 512);
#  (d) bus master off: RETURN upcall, pinned pages and DMA windows back to 0, DMA_LAYOUT ENODATA;
#  (d2) staged ahead: a VFIO user that maps 8 MiB into its container before its first access to the
#      device, as QEMU does: before bus-master enable every page is pinned (pinned_pages and dma_staged_pages grow
#      by 2048) with no DMA window (dma_windows 0, DMA_LAYOUT ENODATA); the borrow then takes them
#      (last_borrow: 2048 pages, 2048 of them staged); bus master off unpins them; a second such user
#      that closes the device without a borrow leaves nothing pinned;
#  (d3) huge pages: a VFIO user whose RAM is two 2 MiB hugetlb pages (at IOVA 4 GiB, the first in two 1 MiB
#      mappings) borrows: all 1024 pages in its window, 1020 of them held by the pins of each huge page's
#      first and last 4 KiB page (dma_held_pages), its VmLck up by exactly 4 MiB; the lender's stamps
#      reach every page; VFIO_IOMMU_UNMAP_DMA of the first huge page's upper half lets go of that whole
#      page at once (512 left), then the kernel pins its lower half back page by page (768 pinned, 510
#      held, VmLck 3 MiB), where the lender's stamps land, as in the second huge page; bus master off
#      leaves nothing pinned or held and VmLck as before;
#  (e) BAR region and interrupts of a device announced with BAR0 at a slot of the BAR window
#      (FARPASS_BAR_MAPPED), where the lender exposes QEMU's edu (BAR_MAP), and the fake lender's MSI-X
#      config (64 vectors, table at 0x2000, PBA at 0x3000 of BAR0): region info READ|WRITE|MMAP with
#      sparse areas around the MSI-X pages; mmap of the table page, across it and past the BAR refused;
#      once borrowed the mmapped area reaches edu (its identification register; its liveness register
#      inverts a write); a read of the table page and one of word 0 through the region are trapped
#      (counted as MSI-X and other; word 0 is edu's identification again);
#      IRQ info INTx 1 (the fake lender's pin), MSI 1, MSI-X 64; SET_IRQS: MSI-X state set before the
#      borrow is sent after BORROW, each change while borrowed is a SET_IRQS upcall (index 2: 2, 0, 3
#      vectors), none after RETURN; MSI refused while MSI-X is on, MASK -> ENOTTY (as vfio-pci), a local
#      trigger fires the vectors that have an eventfd; the lender signals vectors 0-2 of the device's irq slot through
#      the interrupt bridge (IRQ_BRIDGE): each reaches its eventfd, vector 1 (none) is counted, dropped;
#      the link cut on L0 and back: each armed vector with an eventfd fires once more (irq_resent 2),
#      as an interrupt relayed during an outage is lost;
#  (f) teardown: instances removed, farpass unloads; neither kernel log has a warning, BUG, oops, RCU
#      stall, hung task, leak report or DMAR fault, but the borrower's faults (c) provoked (the stamps on
#      the unmapped upper half, edu-dma's read of its outbound window's word 0).
set -euo pipefail
# Link 1 through a relay on L0, for (e)'s link outage.
export RIG_LINK_RELAY=1
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built

fp_rig_up_edu
T=/sys/class/mdev_bus/$NTB/mdev_supported_types/ntb_hw_epf-farpass-lender-0 # device 7's slot
U=8f7c3ab0-5c6e-4e41-9d3e-0000000000d7
D=/tmp/dmawin
fp_load lender
fp_load $B
fp_bind_vfio lender $EDU_ADDR
expect "borrower: farpass link up" ntb_wait $B 60 "grep -qx 'link up' $FP_DBG/$NTB/link"
expect "lender: farpass link up" ntb_wait lender 60 "grep -qx 'link up' $FP_DBG/$LNTB/link"

T9=/sys/class/mdev_bus/$NTB/mdev_supported_types/ntb_hw_epf-farpass-lender-2 # device 9's slot
U9=8f7c3ab0-5c6e-4e41-9d3e-0000000000d9
D9=/tmp/dmawin9
fp_client $B announce --id 7 --lender lender --ntb "$NTB" --bar0 0x4000
fp_client $B announce --id 9 --lender lender --ntb "$NTB" --bar0 0x4000 --irq-slot 2
rig_run $B -- "echo $U > $T/create; echo $U9 > $T9/create; rm -rf $D $D9; mkdir -p $D $D9"
rig_run $B -- "$FP_CLIENT agent --log $D/agent </dev/null >>$D/agent.out 2>&1 & echo \$! >$D/agent.pid"
expect "agent up" ntb_wait $B 10 "grep -q ready $D/agent"
expect "DMA_LAYOUT of an unknown device: ENOENT" fp_client $B dma-layout --id 99 --expect ENOENT
expect "DMA_LAYOUT of a device nobody borrows: ENODATA" fp_client $B dma-layout --id 7 --expect ENODATA
rig_run $B -- "$FP_CLIENT vfio-dma $U --id 7 --dir $D --edu-seed 5 </dev/null >$D/user 2>&1 & echo \$! >$D/user.pid"
step() { rig_run $B -- "touch $D/go$1"; }
user() { rig_run $B -- "cat $D/user"; }

echo "# (a) bus master on: window built, BORROW"
expect "the VFIO user printed the layout" ntb_wait $B 120 "grep -q '^layout' $D/user || grep -q '^err' $D/user"
user
layout=$(rig_run $B -- "grep '^layout' $D/user")
slot() { sed -n "s/.* slot$1=\([^ ]*\).*/\1/p" <<<"$layout"; }
expect_eq "DMA_LAYOUT: two slots, 1024 pages pinned" "$(sed -n 's/^layout \(nr=[0-9]* pinned=[0-9]*\).*/\1/p' <<<"$layout")" "nr=2 pinned=1024"
IFS=: read -r gpa0 size0 off0 <<<"$(slot 0)"
IFS=: read -r gpa1 size1 off1 <<<"$(slot 1)"
expect_eq "slot 0: the low buffer" "$gpa0:$size0" "0x100000:0x200000"
expect_eq "slot 1: the high buffer" "$gpa1:$size1" "0x100000000:0x200000"
expect "slot offsets keep the GPA modulo 2 MiB and do not overlap" \
	test $((off0 % 0x200000)) -eq $((gpa0 % 0x200000)) -a $((off1 % 0x200000)) -eq 0 -a $((off0 + size0)) -le $((off1))
expect_eq "counters: pinned_pages" "$(fp_counter $B pinned_pages)" 1024
expect_eq "counters: dma_windows" "$(fp_counter $B dma_windows)" 1
RING=65536         # the interrupt mailbox's ring area, mapped in every DMA window
expect_eq "counters: bytes mapped in the DMA window: the ring and every pinned page" "$(fp_counter $B xwin_dma_bytes)" $((RING + 1024 * 4096))
expect "the agent saw BORROW" rig_run $B -- "grep -q '^BORROW 7' $D/agent"
lb=$(rig_run $B -- "cat $FP_DBG/last_borrow")
echo "last_borrow: $(tr '\n' ' ' <<<"$lb")"
lbv() { awk -v n="$1" '$1 == n { print $2 }' <<<"$lb"; }
expect_eq "last_borrow: each slot, of several runs (the low buffer's scattered 4 KiB pages), mapped with one IOMMU call (one IOTLB sync)" \
	"$(lbv map_calls) calls, $( (($(lbv runs) > 2)) && echo 'more than 2' || echo "$(lbv runs)") runs" "2 calls, more than 2 runs"

echo "# (b) the lender writes through its outbound window into both buffers"
expect "lender: stamp slot 0 (seed 1)" fp_client lender window-stamp --ntb $LNTB --mw 1 --offset "$off0" --size "$size0" --seed 1
expect "lender: stamp slot 1 (seed 2)" fp_client lender window-stamp --ntb $LNTB --mw 1 --offset "$off1" --size "$size1" --seed 2

echo "# (b2) a second guest on the link"
rig_run $B -- "$FP_CLIENT vfio-dma $U9 --id 9 --dir $D9 --seed-base 10 </dev/null >$D9/user 2>&1 &"
expect "device 9's VFIO user printed its layout" ntb_wait $B 120 "grep -q '^layout' $D9/user || grep -q '^err' $D9/user"
layout9=$(rig_run $B -- "grep '^layout' $D9/user")
echo "$layout9"
IFS=: read -r gpa90 size90 off90 <<<"$(sed -n "s/.* slot0=\([^ ]*\).*/\1/p" <<<"$layout9")"
IFS=: read -r gpa91 size91 off91 <<<"$(sed -n "s/.* slot1=\([^ ]*\).*/\1/p" <<<"$layout9")"
expect_eq "device 9: the same GPAs, 1024 pages" "$(sed -n 's/^layout \(nr=[0-9]* pinned=[0-9]*\).*/\1/p' <<<"$layout9") $gpa90 $gpa91" \
	"nr=2 pinned=1024 0x100000 0x100000000"
expect "device 9's sub-window follows device 7's (first fit), phases kept" \
	test $((off90)) -ge $((off1 + size1)) -a $((off90 % 0x200000)) -eq $((gpa90 % 0x200000)) -a $((off91)) -ge $((off90 + size90))
expect_eq "counters: two windows, 2048 pages" "$(fp_counter $B dma_windows)/$(fp_counter $B pinned_pages)" 2/2048
expect "lender: stamp device 9's slot 0 (seed 11)" fp_client lender window-stamp --ntb $LNTB --mw 1 --offset "$off90" --size "$size90" --seed 11
expect "lender: stamp device 9's slot 1 (seed 12)" fp_client lender window-stamp --ntb $LNTB --mw 1 --offset "$off91" --size "$size91" --seed 12
rig_run $B -- "touch $D9/go1"
expect "device 9's VFIO user checked its buffers" ntb_wait $B 60 "grep -q '^unmapped' $D9/user"
expect_eq "device 9: every page of its buffers got its stamp" "$(rig_run $B -- "grep '^found' $D9/user")" "found low=512 high=512"
rig_run $B -- "touch $D9/go2 $D9/go3"
expect "device 9's VFIO user returned the device and closed it" ntb_wait $B 60 "grep -q '^ok' $D9/user"
rig_run $B -- "cat $D9/user"
expect "the agent saw BORROW 9, RETURN 9" rig_run $B -- "grep -oE '^(BORROW|RETURN) 9' $D/agent | tr '\n' ' ' | grep -qx 'BORROW 9 RETURN 9 '"
expect_eq "counters: back to device 7's window" \
	"$(fp_counter $B dma_windows)/$(fp_counter $B pinned_pages)/$(fp_counter $B xwin_dma_bytes)" "1/1024/$((RING + 1024 * 4096))"
step 1
expect "the VFIO user unmapped the high buffer's upper half" ntb_wait $B 60 "grep -q '^unmapped' $D/user"
user
expect_eq "borrower: every page of both buffers got its stamp" "$(rig_run $B -- "grep '^found' $D/user")" "found low=512 high=512"

echo "# (c) VFIO_IOMMU_UNMAP_DMA of the high buffer's upper half"
expect_eq "unmap done, 768 pages left pinned (DMA_LAYOUT)" "$(rig_run $B -- "grep '^unmapped' $D/user")" "unmapped high_upper=ok pinned=768 (ok)"
expect_eq "counters: pinned_pages" "$(fp_counter $B pinned_pages)" 768
expect_eq "counters: exactly the 768 pinned pages stay mapped (cut runs re-mapped)" "$(fp_counter $B xwin_dma_bytes)" $((RING + 768 * 4096))
expect "lender: stamp all of slot 1 (seed 4)" fp_client lender window-stamp --ntb $LNTB --mw 1 --offset "$off1" --size "$size1" --seed 4
expect "lender: stamp slot 0 again (seed 3)" fp_client lender window-stamp --ntb $LNTB --mw 1 --offset "$off0" --size "$size0" --seed 3
expect "lender: edu DMAs pattern 5 to GPA $((gpa0 + 0x1000)) (its VFIO container maps it onto the window at slot 0's offset)" \
	fp_client lender edu-dma $EDU_ADDR --ntb $LNTB --mw 1 --iova $((gpa0 + 0x1000)) --win-offset $((off0 + 0x1000)) --seed 5
step 2
expect "the VFIO user cleared bus master" ntb_wait $B 60 "grep -q '^bus_master_off' $D/user"
user
expect_eq "new stamps in the low buffer (page 1: edu's DMA) and the high one's lower half, none in its upper" \
	"$(rig_run $B -- "grep '^after_unmap' $D/user")" "after_unmap low_seed3=511 high_seed2=256 high_seed4=256 edu_page1=1"

echo "# (c2) the high buffer unmapped and mapped again as one: pinned back by the kernel"
expect_eq "re-mapped, 1024 pages pinned again (DMA_LAYOUT)" "$(rig_run $B -- "grep '^remapped' $D/user")" "remapped high=ok pinned=1024"
expect_eq "counters: dma_refilled_pages (device 9's 512 and device 7's)" "$(fp_counter $B dma_refilled_pages)" 1024

echo "# (d) bus master off: RETURN, nothing pinned"
expect_eq "bus master off; DMA_LAYOUT then: ENODATA" "$(rig_run $B -- "grep '^bus_master_off' $D/user")" "bus_master_off=ok layout_after=ENODATA"
expect "the agent saw RETURN after BORROW" rig_run $B -- "grep -oE '^(BORROW|RETURN) 7' $D/agent | tr '\n' ' ' | grep -qx 'BORROW 7 RETURN 7 '"
expect_eq "counters: pinned_pages, dma_windows" "$(fp_counter $B pinned_pages)/$(fp_counter $B dma_windows)" 0/0
expect_eq "counters: only the ring left mapped in the DMA window" "$(fp_counter $B xwin_dma_bytes)" $RING
expect "counters: dma_unmap callbacks >= 1" test "$(fp_counter $B dma_unmap)" -ge 1
step 3
expect "the VFIO user closed the device" ntb_wait $B 30 "grep -q '^ok' $D/user"

expect "remove the instances" rig_run $B --timeout 20 -- "echo 1 > /sys/bus/mdev/devices/$U/remove; echo 1 > /sys/bus/mdev/devices/$U9/remove"
expect "withdraw" fp_client $B withdraw --id 7
expect "withdraw" fp_client $B withdraw --id 9

echo "# (d2) staged ahead: RAM mapped before the first access to the device"
T10=/sys/class/mdev_bus/$NTB/mdev_supported_types/ntb_hw_epf-farpass-lender-3 # device 10's slot
U10=8f7c3ab0-5c6e-4e41-9d3e-0000000000da
fp_client $B announce --id 10 --lender lender --ntb "$NTB" --bar0 0x4000 --irq-slot 3
rig_run $B -- "echo $U10 > $T10/create"
staged0=$(fp_counter $B dma_staged_pages)
# stage_open NAME: a VFIO user opens device 10, maps 8 MiB, reads its config space, and waits for
# DIR/NAME.go to borrow.
stage_open() {
	rig_run $B -- "$FP_CLIENT vfio-borrow $U10 --id 10 --mb 8 --borrow-at $D/$1.go --then off \
		</dev/null >$D/$1 2>&1 & echo \$! >$D/$1.pid"
	expect "$1: 8 MiB mapped, config space read: all 2048 pages pinned before bus-master enable" \
		ntb_wait $B 60 "test \$(awk '\$1 == \"pinned_pages\" { print \$2 }' $FP_DBG/counters) -eq 2048"
}
stage_open staged
expect_eq "... pinned ahead (dma_staged_pages), in no DMA window (dma_windows)" \
	"$(($(fp_counter $B dma_staged_pages) - staged0))/$(fp_counter $B dma_windows)" 2048/0
expect "... DMA_LAYOUT: ENODATA" fp_client $B dma-layout --id 10 --expect ENODATA
rig_run $B -- "touch $D/staged.go"
expect "bus master on, then off" ntb_wait $B 60 "grep -qE '^(ok|err)' $D/staged"
rig_run $B -- "cat $D/staged"
expect "borrowed: bus master on answered 0, 2048 pages in its window" rig_run $B -- "grep -q 'bm_on=ok .*pinned=2048 ' $D/staged"
lb=$(rig_run $B -- "cat $FP_DBG/last_borrow")
expect_eq "last_borrow: 2048 pages, all of them pinned ahead" "$(awk '$1 == "pages" || $1 == "staged_pages" { printf "%s ", $2 }' <<<"$lb")" "2048 2048 "
expect_eq "bus master off: nothing pinned, no DMA window" "$(fp_counter $B pinned_pages)/$(fp_counter $B dma_windows)" 0/0
stage_open unborrowed
rig_run $B -- "kill \$(cat $D/unborrowed.pid)"
expect "closed without a borrow: nothing pinned" ntb_wait $B 30 "grep -qx 'pinned_pages 0' $FP_DBG/counters"
expect "remove the instance" rig_run $B --timeout 20 -- "echo 1 > /sys/bus/mdev/devices/$U10/remove"
expect "withdraw" fp_client $B withdraw --id 10

echo "# (d3) huge pages: a VFIO user's RAM in 2 MiB hugetlb pages"
U11=8f7c3ab0-5c6e-4e41-9d3e-0000000000db
fp_client $B announce --id 11 --lender lender --ntb "$NTB" --bar0 0x4000 --irq-slot 3 # device 10's slot, free again
expect_eq "borrower: two 2 MiB huge pages reserved" \
	"$(rig_run $B -- "echo 2 >/proc/sys/vm/nr_hugepages; cat /proc/sys/vm/nr_hugepages")" 2
rig_run $B -- "echo $U11 > $T10/create"
rig_run $B -- "mkdir -p $D/huge; $FP_CLIENT vfio-huge $U11 --id 11 --dir $D/huge --seed-base 20 </dev/null >$D/huge.out 2>&1 &"
huge() { rig_run $B -- "grep '^$1' $D/huge.out"; }
expect "its VFIO user borrowed" ntb_wait $B 120 "grep -qE '^(borrowed|err)' $D/huge.out"
rig_run $B -- "cat $D/huge.out"
IFS=: read -r gpa11 size11 off11 <<<"$(huge borrowed | sed -n 's/.* slot=//p')"
expect_eq "its 1024 pages in the window, 1020 held by the pins of each huge page's first and last page; its VmLck up by 4 MiB (VFIO's 4 pins and the held pages)" \
	"$(huge borrowed | sed 's/ slot=.*//')" "borrowed pinned=1024 held=1020 locked_kb=4096"
expect_eq "one slot of 4 MiB at 4 GiB" "$gpa11:$size11" "0x100000000:0x400000"
expect "lender: stamp the slot (seed 21)" fp_client lender window-stamp --ntb $LNTB --mw 1 --offset "$off11" --size "$size11" --seed 21
rig_run $B -- "touch $D/huge/go1"
expect "its VFIO user unmapped the first huge page's upper half" ntb_wait $B 60 "grep -qE '^(unmapped|err)' $D/huge.out"
rig_run $B -- "cat $D/huge.out"
expect_eq "every page got its stamp (the held pages map the right bytes); the unmap let go of that whole huge page (512 left pinned at once), then its lower half was pinned back page by page (768 pinned, 510 held, VmLck 3 MiB)" \
	"$(huge unmapped)" "unmapped found=1024 pinned_at_once=512 pinned=768 held=510 locked_kb=3072 (ok)"
expect "lender: stamp the first huge page's lower half (seed 22)" \
	fp_client lender window-stamp --ntb $LNTB --mw 1 --offset "$off11" --size $((0x100000)) --seed 22
expect "lender: stamp the second huge page (seed 23)" \
	fp_client lender window-stamp --ntb $LNTB --mw 1 --offset $((off11 + 0x200000)) --size $((0x200000)) --seed 23
rig_run $B -- "touch $D/huge/go2"
expect "its VFIO user cleared bus master" ntb_wait $B 60 "grep -qE '^(after|err)' $D/huge.out"
expect_eq "the stamps reach both (256 and 512 pages); bus master off: nothing pinned or held, VmLck as before" \
	"$(huge after)" "after lower=256 second=512 off=ok pinned=0 held=0 locked_kb=0"
rig_run $B -- "touch $D/huge/go3"
expect "its VFIO user closed the device" ntb_wait $B 30 "grep -qE '^(ok|err)' $D/huge.out"
rig_run $B -- "cat $D/huge.out; echo 0 >/proc/sys/vm/nr_hugepages"
expect "remove the instance" rig_run $B --timeout 20 -- "echo 1 > /sys/bus/mdev/devices/$U11/remove"
expect "withdraw" fp_client $B withdraw --id 11

echo "# (e) BAR region and interrupts"
T8=/sys/class/mdev_bus/$NTB/mdev_supported_types/ntb_hw_epf-farpass-lender-1 # device 8's slot
U8=8f7c3ab0-5c6e-4e41-9d3e-0000000000d8
SLOT=0x100000      # edu's BAR0 is 1 MiB: a slot aligned to its size
expect "lender: BAR_MAP edu's BAR0 at $SLOT of the BAR window" \
	fp_client lender bar-map --ntb $LNTB --pci $EDU_ADDR --bar 0 --offset $SLOT --size 0x100000
fp_client $B announce --id 8 --lender lender --ntb "$NTB" --bar0 0x100000 --bar0-win $SLOT --irq-slot 1
rig_run $B -- "echo $U8 > $T8/create"
rig_run $B -- "$FP_CLIENT vfio-irq $U8 --dir $D --write1 0x12345678 --trap0 1 </dev/null >$D/irq 2>&1 &"
expect "the VFIO user armed MSI-X vectors 0-2 (0 and 2 with an eventfd) while borrowed" \
	ntb_wait $B 120 "grep -q '^armed' $D/irq || grep -q '^err' $D/irq"
rig_run $B -- "cat $D/irq"
expect "lender: signal vectors 0-2 of slot 1 twice each through the interrupt bridge" \
	fp_client lender irq-bridge --ntb $LNTB --slot 1 --start 0 --count 3 --signal 2
expect "borrower: 4 interrupts signalled to the VFIO user, 2 dropped (no eventfd)" \
	ntb_wait $B 30 "test \$(awk '\$1 == \"irq_signalled\" { print \$2 }' $FP_DBG/counters) -ge 4 -a \$(awk '\$1 == \"irq_no_eventfd\" { print \$2 }' $FP_DBG/counters) -ge 2"
rig_run $B -- "grep -E '^irq' $FP_DBG/counters"
# What the lender relays during an outage is lost: at the link's return each armed vector fires once.
rig_link_cut 1
expect "borrower: link down (cut)" ntb_wait $B 30 "grep -qx 'link down' $FP_DBG/$NTB/link"
rig_link_restore 1
expect "borrower: link up and handshake done again" ntb_wait $B 60 "grep -qx 'handshake ok' $FP_DBG/$NTB/link"
expect_eq "the link's return fired each armed vector with an eventfd once: irq_resent" "$(fp_counter $B irq_resent)" 2
rig_run $B -- "touch $D/go-irq"
expect "the VFIO user finished" ntb_wait $B 60 "grep -qE '^(ok|err)' $D/irq"
out=$(rig_run $B -- "grep -E '^(ok|err)' $D/irq")
echo "$out"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$out"; }
expect_eq "BAR0 region: read, write, mmap, caps" "$(field flags)" rwmc
expect_eq "BAR0 region: 1 MiB" "$(field size)" 0x100000
expect_eq "BAR0 sparse areas: all but the MSI-X table and PBA pages" "$(field sparse)" "0+0x2000,0x4000+0xfc000"
expect_eq "mmap of the MSI-X table page, across it, past the BAR: refused" \
	"$(field mmap_msix)/$(field mmap_across)/$(field mmap_beyond)" EINVAL/EINVAL/EINVAL
expect_eq "mmap of the area before it" "$(field mmap_area)" ok
expect_eq "mmapped, borrowed: edu's identification register, through the NTB" "$(field mmio0)" 0x10000ed
expect_eq "mmapped: edu's liveness register inverts 0x12345678" "$(field mmio1)" 0xedcba987
expect_eq "trapped reads: the MSI-X table page, word 0 (edu's identification)" "$(field trapped_read)/$(field trapped0)" ok/0x10000ed
expect_eq "counters: trapped BAR accesses, MSI-X/other" "$(fp_counter $B bar_trapped_msix)/$(fp_counter $B bar_trapped_other)" 1/1
expect_eq "IRQ info counts: INTx, MSI, MSI-X, ERR, REQ" "$(field irq_counts)" "1,1,64,1,1"
expect_eq "SET_IRQS before the borrow; bus master on" "$(field msix_pre)/$(field bm_on)" ok/ok
expect_eq "MSI while MSI-X is on: EINVAL; MASK: ENOTTY" "$(field msi_while_msix)/$(field mask)" EINVAL/ENOTTY
expect_eq "MSI-X off; trigger while off: EINVAL; on with 3 vectors" "$(field msix_off)/$(field trigger_off)/$(field msix_on3)" ok/EINVAL/ok
expect_eq "local trigger: vectors 0 and 2 fire (1 has no eventfd), the old eventfd not" "$(field trigger)/$(field fired)" ok/101
expect_eq "interrupts per vector's eventfd (0, 1 without, 2): bridged twice, once more at the link's return" \
	"$(field bridged)" 3/0/3
expect_eq "counters: irq_signalled/irq_no_eventfd" "$(fp_counter $B irq_signalled)/$(fp_counter $B irq_no_eventfd)" 4/2
expect_eq "bus master off; MSI-X off after the return" "$(field bm_off)/$(field msix_off2)" ok/ok
ops=$(rig_run $B -- "grep -E '^(BORROW|RETURN|SET_IRQS) 8' $D/agent | sed 's/ instance [0-9]*//; s/ (seq.*//' | tr '\n' ';'")
expect_eq "the agent saw BORROW, the state re-sent, each change, RETURN; nothing after" "$ops" \
	"BORROW 8;SET_IRQS 8 index 2 count 2;SET_IRQS 8 index 2 count 0;SET_IRQS 8 index 2 count 3;RETURN 8;"
expect "counters: upcalls_set_irqs = 3" test "$(fp_counter $B upcalls_set_irqs)" -eq 3

echo "# (f) teardown"
expect "lender: BAR_MAP unmap" fp_client lender bar-map --ntb $LNTB --pci $EDU_ADDR --bar 0 --offset $SLOT --size 0x100000 --unmap
rig_run $B -- "kill \$(cat $D/agent.pid)"
expect "remove the instance" rig_run $B --timeout 20 -- "echo 1 > /sys/bus/mdev/devices/$U8/remove"
expect "withdraw" fp_client $B withdraw --id 8
expect "rmmod farpass (borrower)" rig_run $B --timeout 20 -- "rmmod farpass"
expect "rmmod farpass (lender)" rig_run lender --timeout 20 -- "rmmod farpass"
# Faults (c) provoked: the lender's stamps on the high buffer's unmapped upper half (slot 1's), and
# edu-dma's closing read of its outbound window's word 0 (an ordering read; no slot is at offset 0).
dmawin=$(fp_inbound_iova $B 1)
expect "borrower: farpass logged its DMA window's IOVA: $dmawin" test -n "$dmawin"
expect_klog_clean $B --also leak --fault "$(printf '%#x+%#x' $((dmawin + off1 + size1 / 2)) $((size1 / 2)))" \
	--fault "$dmawin"
expect_klog_clean lender --also leak
