#!/bin/bash
# ioctl and region fuzzing (issue 13): farpass-client fuzz, a seeded hostile VFIO user of device 7's
# mdev on borrower1 (farpass-client also its agent), for FP_FUZZ_MS per seed (30 s; `make soak`: 10 min),
# 2 seeds: random config and region reads/writes at any index, offset and size, region and IRQ info,
# SET_IRQS of any index, flags, range and fds, resets, mmaps, bus-master toggles (borrows and returns),
# unmaps and re-maps of its RAM, and on /dev/farpass VERSION, DMA_LAYOUT and unknown commands with random
# bytes. Checks:
#  (a) each fuzz run ends (the client printed its count); they borrowed (BORROW upcalls) and unmapped
#      borrowed RAM (dma_unmap calls);
#  (b) afterwards nothing is left: no VFIO user open, no page pinned, no DMA window, no upcall pending,
#      no range quarantined; device 7 still borrows and returns;
#  (c) the instance is removed, the device withdrawn, farpass unloads on both sides; neither kernel
#      log has a warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built

rig_up --borrowers 1
B=borrower1
NTB=$(ntb_pci $B)
LNTB=$(ntb_pci lender)
T=/sys/class/mdev_bus/$NTB/mdev_supported_types/ntb_hw_epf-farpass-lender-0 # device 7's slot
U=8f7c3ab0-5c6e-4e41-9d3e-0000000000f7
D=/tmp/fuzz
fp_load lender
fp_load $B
expect "borrower: farpass link up" ntb_wait $B 60 "grep -qx 'link up' $FP_DBG/$NTB/link"
expect "lender: farpass link up" ntb_wait lender 60 "grep -qx 'link up' $FP_DBG/$LNTB/link"
expect "announce device 7" fp_client $B announce --id 7 --lender lender --ntb "$NTB" --bar0 0x4000
rig_run $B -- "echo $U > $T/create; rm -rf $D; mkdir -p $D"
rig_run $B -- "$FP_CLIENT agent --log $D/agent </dev/null >>$D/agent.out 2>&1 & echo \$! >$D/agent.pid"
expect "agent up" ntb_wait $B 10 "grep -q ready $D/agent"

echo "# (a) fuzz"
FP_FUZZ_MS=${FP_FUZZ_MS:-30000}
for seed in 1 2; do
	out=$(rig_run $B --timeout $((FP_FUZZ_MS / 1000 + 180)) -- "$FP_CLIENT fuzz $U --seed $seed --ms $FP_FUZZ_MS" || true)
	echo "$out"
	expect "seed $seed: the fuzz ran to its end" grep -q '^ok ops=' <<<"$out"
done
borrows=$(fp_counter $B upcalls_borrow)
unmaps=$(fp_counter $B dma_unmap)
expect "the fuzz borrowed ($borrows BORROW upcalls) and unmapped its RAM ($unmaps dma_unmap calls)" \
	test "$borrows" -gt 0 -a "$unmaps" -gt 0

echo "# (b) nothing left"
for c in vfio_open pinned_pages dma_windows upcalls_pending dma_quarantined; do
	expect_eq "$c" "$(fp_counter $B $c)" 0
done
out=$(fp_client $B vfio-borrow $U --id 7 --then off || true)
echo "$out"
expect_eq "device 7 borrows and returns" "$(fp_field "$out" bm_on)/$(fp_field "$out" then)" ok/ok

echo "# (c) teardown"
rig_run $B -- "kill \$(cat $D/agent.pid)"
expect "remove the instance" rig_run $B --timeout 20 -- "echo 1 > /sys/bus/mdev/devices/$U/remove"
expect "withdraw" fp_client $B withdraw --id 7
expect "rmmod farpass (borrower)" rig_run $B --timeout 20 -- "rmmod farpass"
expect "rmmod farpass (lender)" rig_run lender --timeout 20 -- "rmmod farpass"
expect_klog_clean $B
expect_klog_clean lender
