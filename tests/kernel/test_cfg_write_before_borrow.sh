#!/bin/bash
# Forwarded config writes a VFIO user makes before the lazy borrow are kept by the mdev and reach the
# lender's device at the borrow (docs/mdev.md). farpass-client nvme-identify --mdev on borrower1, with the
# mdev open and not borrowed, writes PCIe Device Control (Max Read Request Size changed: the lender's
# vfio-pci keeps it in its virtual config space, the rig's QEMU NVMe has no writable DevCtl bit but FLR)
# and Device Control 2 (End-End TLP Prefix Blocking toggled: vfio-pci passes it, the device keeps it),
# then sets bus master (the borrow), identifies the NVMe and holds the device:
#  (a) both writes succeed before the borrow and read back through the mdev as written;
#  (b) borrowed: Device Control 2 of the lender's device (setpci) holds the written value, and Device
#      Control read through the mdev (from the lender's vfio-pci now) has the written MRRS;
#  (c) the counters: 2 writes deferred, 2 replayed, none failed; the borrower's agent refused no upcall
#      for want of a lease (the bug: "is not borrowed");
#  (d) the identify worked and the device is given back at bus master off;
#  (e) borrower1's kernel log has no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
. "$(dirname "$0")/../agent/agent-lib.sh"
ag_check_built && fp_check_built || exit

rig_up --borrowers 1
B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000cfb1
nsze=$(($(stat -c %s "$(rig_lender_nvme_img)") / 512))
ag_remote_mdev $B $U

devctl=0x$(rig_run lender -- "setpci -s $LENDER_NVME CAP_EXP+8.w")
devctl2=0x$(rig_run lender -- "setpci -s $LENDER_NVME CAP_EXP+28.w")
mrrs=$(((devctl >> 12) & 7))
new_mrrs=$((mrrs == 1 ? 2 : 1))
new=$(printf '0x%x' $(((devctl & ~0x7000) | new_mrrs << 12)))
new2=$(printf '0x%x' $((devctl2 ^ 0x8000)))
echo "lender: DevCtl $devctl (MRRS $mrrs), DevCtl2 $devctl2; writing DevCtl $new, DevCtl2 $new2"
declare -A before
for c in cfg_writes_deferred cfg_writes_replayed cfg_replay_failed; do
	before[$c]=$(fp_counter $B $c)
done

rig_run $B -- "rm -f /tmp/go; setsid $FP_CLIENT nvme-identify --mdev $U --nsze $nsze --devctl $new --devctl2 $new2 \
	--hold-until /tmp/go --return </dev/null >/tmp/cfgwb.out 2>&1 &"
expect "$B: the client identified the NVMe and holds it borrowed" \
	ntb_wait $B 120 "grep -q '^identified, holding' /tmp/cfgwb.out"
out=$(rig_run $B -- "cat /tmp/cfgwb.out")
echo "$out"
expect_eq "(a) DevCtl write before the borrow" "$(fp_field "$out" devctl_write)" ok
expect_eq "(a) DevCtl2 write before the borrow" "$(fp_field "$out" devctl2_write)" ok
expect_eq "(a) DevCtl reads back as written" "$(fp_field "$out" devctl_pre)" "$new"
expect_eq "(a) DevCtl2 reads back as written" "$(fp_field "$out" devctl2_pre)" "$new2"
expect "lender: borrowed by $B" test "$(ag_ctl lender --json borrows | jq -r '.leases[0].borrower')" = $B
expect_eq "(b) lender: the device's DevCtl2 holds the written value" \
	"0x$(rig_run lender -- "setpci -s $LENDER_NVME CAP_EXP+28.w")" "$(printf '0x%04x' "$new2")"
got=$(fp_field "$out" devctl_borrowed)
expect_eq "(b) DevCtl through the mdev, borrowed: the written MRRS ($got)" "$((got >> 12 & 7))" "$new_mrrs"
for c in cfg_writes_deferred:2 cfg_writes_replayed:2 cfg_replay_failed:0; do
	expect_eq "(c) counter ${c%:*} grew by" "$(($(fp_counter $B "${c%:*}") - ${before[${c%:*}]}))" "${c#*:}"
done
expect_eq "(c) $B's agent refused no upcall for want of a lease" "$(ag_log $B | grep -c 'is not borrowed' || true)" 0

rig_run $B -- "touch /tmp/go"
expect "$B: the client finished" ntb_wait $B 60 "grep -q '^ok\|^err' /tmp/cfgwb.out"
out=$(rig_run $B -- "cat /tmp/cfgwb.out")
echo "$out"
fp_expect_identify "$out" "$nsze"
expect_eq "(d) bus master off: RETURN" "$(fp_field "$out" return)" ok
ag_expect_returned $B 10 "(d)"
expect_klog_clean $B
