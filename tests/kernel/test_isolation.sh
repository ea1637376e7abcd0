#!/bin/bash
# Isolation (issue 13): what a broken or hostile peer, agent or VFIO user must not reach, on the lender
# and borrower1 (farpass-client as the borrower's agent and as QEMU).
#  (1) ANNOUNCE refuses BAR slots outside the link's BAR window: an offset whose end wraps past 2^64
#      (ERANGE), a slot on the window's last page (the mailbox's ack area: ERANGE; the page before it is
#      accepted), one past the window (ERANGE); a slot overlapping another announced device's
#      (EADDRINUSE); a withdrawn device's slot can be announced again.
# Then the lender exposes QEMU's edu BAR0 (1 MiB) at slot 1 MiB of the BAR window (BAR_MAP), and the
# borrower announces a device there whose fake config space (the agent's) puts the MSI-X table (64
# vectors) at BAR0 + 0x80, on edu's DMA source register, the PBA at BAR0 + 0x3000:
#  (6) with no agent the capability scan fails: BAR0 can be neither read through the region nor
#      mmapped (EIO), instead of exposing the device's MSI-X table; with the agent and borrowed, a
#      trapped write to the MSI-X table is dropped (edu's register reads back 0), one beside it in the
#      same page reaches the device (edu's liveness register inverts it);
#  (7) a trapped read of 16 KiB returns one page (4096 bytes), not all of it.
#  (13) (the agent's MSI-X table back at BAR0 + 0x2000) BAR0's mmap follows the lease: before the
#      borrow it reads all-ones (the instance's idle page, not the device, though the lender maps edu
#      at the slot), while borrowed the same mapping reaches edu, after the return it reads all-ones
#      again (revoked, not the device); the agent saw BORROW, RETURN; the config region at offset
#      4 GiB is EINVAL (not truncated to offset 0).
#  (14) not borrowed, nothing crosses the link: a trapped read of BAR0 word 0 is all-ones although the
#      lender maps edu at the slot; with the slot unmapped on the lender (as between leases), a trapped
#      read and a read of the mmap give all-ones and the lender logs no new DMAR fault.
#  (8) while the borrower's NTB is unbound and its removal waits for a VFIO user that holds device 8
#      open (45 s) and ignores the request to let go, VERSION (which takes the global lock) answers
#      within 10 s; the removal ends once the user closes (no link left).
# Last: both kernel logs are clean (expect_klog_clean: no warning, oops, RCU stall, hung task or DMAR
# fault).
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built

fp_rig_up_edu
fp_load lender
fp_load $B
expect "borrower: farpass link up" ntb_wait $B 60 "grep -qx 'link up' $FP_DBG/$NTB/link"
ann() { fp_client $B announce --lender lender --ntb "$NTB" "$@"; }

echo "# (1) BAR slots at ANNOUNCE"
wsize=$(rig_run $B -- "$FP_CLIENT window --ntb $NTB --mw 0" | sed -n 's/.*size=\(0x[0-9a-f]*\).*/\1/p')
echo "borrower: BAR window $wsize bytes"
expect "a 4 MiB BAR at 2^64 - 2 MiB (its end wraps to 2 MiB): ERANGE" \
	ann --id 1 --bar0 0x400000 --bar0-win 0xffffffffffe00000 --expect ERANGE
expect "a 4 KiB BAR on the window's last page (the mailbox's ack area): ERANGE" \
	ann --id 1 --bar0 0x1000 --bar0-win $((wsize - 0x1000)) --expect ERANGE
expect "a 4 KiB BAR on the page before it is accepted" ann --id 1 --bar0 0x1000 --bar0-win $((wsize - 0x2000))
expect "withdraw it" fp_client $B withdraw --id 1
expect "a 4 KiB BAR just past the window: ERANGE" ann --id 1 --bar0 0x1000 --bar0-win $wsize --expect ERANGE
expect "a 1 MiB BAR at 1 MiB" ann --id 1 --bar0 0x100000 --bar0-win 0x100000
expect "another device's BAR inside that slot: EADDRINUSE" ann --id 2 --bar0 0x4000 --bar0-win 0x1fc000 --expect EADDRINUSE
expect "withdraw the first" fp_client $B withdraw --id 1
expect "... then its slot is free" ann --id 2 --bar0 0x4000 --bar0-win 0x1fc000
expect "withdraw it" fp_client $B withdraw --id 2

echo "# (6) the MSI-X table and PBA"
SLOT=0x100000
T=/sys/class/mdev_bus/$NTB/mdev_supported_types/ntb_hw_epf-farpass-lender-8
U=8f7c3ab0-5c6e-4e41-9d3e-0000000000e8
D=/tmp/isolation
fp_bind_vfio lender $EDU_ADDR
expect "lender: BAR_MAP edu's BAR0 at $SLOT" fp_client lender bar-map --ntb $LNTB --pci $EDU_ADDR --bar 0 --offset $SLOT --size 0x100000
expect "announce device 8 with BAR0 at $SLOT" ann --id 8 --bar0 0x100000 --bar0-win $SLOT
rig_run $B -- "echo $U > $T/create; rm -rf $D; mkdir -p $D"
expect_eq "no agent: the scan fails, BAR0 neither read nor mmapped" \
	"$(fp_client $B vfio-bar $U --mmap)" "ok read=EIO value=0 mmap=EIO"
rig_run $B -- "$FP_CLIENT agent --log $D/agent --msix-table 0x80 </dev/null >>$D/agent.out 2>&1 & echo \$! >$D/agent.pid"
expect "agent up" ntb_wait $B 10 "grep -q ready $D/agent"
expect_eq "with the agent, borrowed: a write to the MSI-X table (edu's DMA source register) is dropped" \
	"$(fp_client $B vfio-bar $U --borrow --offset 0x80 --write 0x12345678)" \
	"ok bm_on=ok wrote=ok read=4 value=0 bm_off=ok"
expect_eq "a write beside it in the same page reaches edu (its liveness register inverts it)" \
	"$(fp_client $B vfio-bar $U --borrow --offset 4 --write 0x12345678)" \
	"ok bm_on=ok wrote=ok read=4 value=0xedcba987 bm_off=ok"

echo "# (7) the trapped access loop"
expect_eq "a 16 KiB read through the region returns one page" \
	"$(fp_client $B vfio-bar $U --offset 0x4000 --len 16384 | sed 's/ value=.*//')" "ok read=4096"

echo "# (13) BAR mmaps follow the lease"
# The agent again with the MSI-X table at its default, BAR0 + 0x2000: page 0 (edu's registers) mmappable.
rig_run $B -- "kill \$(cat $D/agent.pid)"
rig_run $B -- "$FP_CLIENT agent --log $D/agent </dev/null >>$D/agent.out 2>&1 & echo \$! >$D/agent.pid"
expect "agent up again" ntb_wait $B 10 "test \$(grep -c ready $D/agent) = 2"
out=$(fp_client $B vfio-bar $U --lease --cfg-offset 0x100000000)
echo "$out"
expect_eq "mmapped before the borrow: all-ones (the idle page), not edu" "$(fp_field "$out" idle)" 0xffffffff
expect_eq "bus master on (BORROW): the same mapping reaches edu" \
	"$(fp_field "$out" bm_on)/$(fp_field "$out" leased)" ok/0x10000ed
expect_eq "bus master off (RETURN): the same mapping no longer reaches edu" \
	"$(fp_field "$out" bm_off)/$(fp_field "$out" returned)" ok/0xffffffff
expect "the agent saw BORROW, then RETURN" \
	rig_run $B -- "grep -oE '^(BORROW|RETURN) 8' $D/agent | tail -n2 | tr '\n' ' ' | grep -qx 'BORROW 8 RETURN 8 '"
expect_eq "the config region at offset 4 GiB: EINVAL" "$(fp_field "$out" cfg_read)" EINVAL

echo "# (14) unborrowed BAR accesses stay on the borrower"
expect_eq "a trapped read of word 0 while not borrowed: all-ones, not edu's id" \
	"$(fp_client $B vfio-bar $U --offset 0)" "ok read=4 value=0xffffffff"
expect "lender: BAR_MAP unmap (the slot leads nowhere, as between leases)" \
	fp_client lender bar-map --ntb $LNTB --pci $EDU_ADDR --bar 0 --offset $SLOT --size 0x100000 --unmap
dmar() { rig_run lender -- "dmesg | grep -c 'DMAR.*fault' || true"; }
faults=$(dmar)
expect_eq "a trapped read and a read of the mmap, not borrowed: all-ones" \
	"$(fp_client $B vfio-bar $U --offset 0x1c --mmap)" "ok read=4 value=0xffffffff mmap=ok mmio0=0xffffffff"
sleep 2
expect_eq "lender: no new DMAR fault (was $faults)" "$(dmar)" "$faults"

echo "# (8) a VFIO user that does not let go while the NTB goes away"
rig_run $B -- "$FP_CLIENT vfio-info $U --hold 45 </dev/null >$D/hold.log 2>&1 &"
expect "a VFIO user holds device 8 open" ntb_wait $B 20 "grep -qx 'vfio_open 1' $FP_DBG/counters"
rig_run $B -- "setsid sh -c 'echo $NTB > /sys/bus/pci/drivers/ntb_hw_epf/unbind; touch $D/unbound' \
	</dev/null >/dev/null 2>&1 &"
sleep 3
expect "the NTB's removal waits for the VFIO user" rig_run $B -- "! test -e $D/unbound"
ms=$(rig_time_ms $B "$FP_CLIENT version")
expect "meanwhile VERSION answers within 10 s: $ms ms" test "$ms" -lt 10000
expect "the removal ends once the VFIO user closes" ntb_wait $B 90 "test -e $D/unbound"
expect_eq "no link left" "$(fp_counter $B links)" 0

echo "# the end"
expect_klog_clean $B
expect_klog_clean lender
