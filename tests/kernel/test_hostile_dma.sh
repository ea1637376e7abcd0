#!/bin/bash
# Hostile DMA (issue 13): farpass-client on borrower1 as a malicious guest (the attacker) holding the
# lender's NVMe (00:08.0) through an mdev (its RAM: 2 MiB at IOVA 1 MiB and 2 MiB at 4 GiB, filled with
# 0xa5) issues Identify Controller with PRP1 outside its RAM, while a second lease on the same link
# (the victim: another farpass-client holding the lender's second NVMe, 00:09.0, its RAM 2 MiB at 1 MiB
# and 2 MiB at 5 GiB) stays borrowed and idle.
# Where the leases sit in the link's one DMA window (docs/mdev.md "The DMA window"): a holder borrows
# the attacker's device first, the victim borrows next, the holder gives it back; so by first fit each
# attacker borrows the sub-window at 0, the victim's is the next one (checked with DMA_LAYOUT while each
# is borrowed: attacker GPA 1 MiB -> window offset 0x100000 and 4 GiB -> 0x400000; victim GPA 1 MiB ->
# 0x700000 and 5 GiB -> 0xa00000). PRP1 at:
#  (a) addresses outside the attacker's RAM that are no other lease's either: 0x300000 (just past its low
#      RAM) and 0x40000000 (1 GiB);
#  (b) addresses where the victim's memory is, by one of the mappings a broken lender could make:
#      0x140010000, the victim's own IOVA (its high buffer, 64 KiB in): reached if the lender's devices
#        shared one IOMMU domain per link (each lease's slots mapped at IOVA = GPA for every device);
#      0xa20000, the window offset of the victim's high buffer 128 KiB in (its IOVA 0x140020000): reached
#        if a device's domain mapped the outbound window itself (IOVA = window offset); it is also the
#        attacker's low slot (an identity map: GPA 1 MiB at offset 1 MiB) carried on past its end;
#      0x100310000, the attacker's high slot (4 GiB at offset 0x400000) carried on past its end to window
#        offset 0x710000, the victim's low buffer 64 KiB in: reached if the lender mapped a lease's whole
#        sub-window or beyond, or a slot longer than the guest's range;
#  (c) 0xfee00000, the MSI address range: a DMA write there is an interrupt request to the lender's
#      IOMMU, not a translated access; Linux leaves compatibility format interrupts disabled under
#      interrupt remapping, so the request is blocked (VT-d 5.1.2.1; the rig's QEMU honours it with
#      qemu-patches/0003) instead of reaching the lender's CPUs as interrupts.
# One attacking client per address, each after a correct Identify and followed by VFIO_DEVICE_RESET (one
# address at a time: QEMU's VT-d drops a device's fault while its previous one is pending). For each
# address:
#  (1) the attacker's RAM is intact byte for byte (0xa5 beyond its queue and identify data pages);
#  (2) while it is still borrowed, its layout is the one above;
#  (3) the reset succeeds;
#  (4) the lender logs a DMAR write fault of 00:08.0 at the address (its IOMMU blocked the device's DMA;
#      QEMU's NVMe completes the command with status 0 whatever its DMA did, so the status proves
#      nothing); for (c) an interrupt-remapping fault of 00:08.0 with reason 0x25 (a compatibility
#      format interrupt request blocked).
# Then the victim, borrowed throughout: (5) its RAM is byte for byte what it was before the first attack;
# (6) its I/O works: Identify Controller and Namespace again, status 0, VID, model, NSZE and interrupts
# right, and its result line passes fp_expect_identify's checks (of its first Identify, with its buffers
# at 1 MiB and 5 GiB). (7) The attacker's device is recovered: a new client's Identify through the mdev passes
# fp_expect_identify's checks. (8) Both kernel logs have no warning, BUG, oops, RCU stall, hung task or
# DMAR fault but the lender's faults of (4), and neither has an NMI or an interrupt without a handler
# (what a DMA write taken for an interrupt delivers).
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
. "$(dirname "$0")/../agent/agent-lib.sh"
ag_check_built && fp_check_built || exit

# The victim's NVMe: a null block device (reads zeroes), 64 MiB.
VICTIM=0000:00:09.0
vnsze=$((64 << 20 >> 9))
RIG_LENDER_EXTRA="-blockdev null-co,node-name=nvme1,size=$((vnsze << 9)),read-zeroes=on \
-device nvme,drive=nvme1,serial=farpass-nvme1,addr=0x9"
AG_LENT_ALSO=$VICTIM
rig_up --borrowers 1
B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000b0e7
UV=8f7c3ab0-5c6e-4e41-9d3e-00000000b0e8
nsze=$(($(stat -c %s "$(rig_lender_nvme_img)") / 512))
ag_remote_mdev $B $U
id=$(ag_device_id $B "$AG_LENT")
vtype=$(ag_type_of $B $VICTIM)
vid=$(ag_device_id $B $VICTIM)
expect "$B: create the victim's mdev $UV" \
	rig_run $B -- "echo $UV > /sys/class/mdev_bus/$(ntb_pci $B)/mdev_supported_types/$vtype/create"

# borrowed VM OUT-FILE ARGS...: nvme-identify ARGS --hold-until OUT-FILE.go started in VM, waited for
# until it holds the device borrowed.
borrowed() {
	local vm=$1 out=$2
	shift 2
	rig_run "$vm" -- "rm -f $out.go; setsid $FP_CLIENT nvme-identify $* --hold-until $out.go </dev/null >$out 2>&1 &"
	expect "$vm: $(basename "$out"): the client identified its NVMe and holds it borrowed" \
		ntb_wait "$vm" 120 "grep -q '^identified, holding' $out"
}
# released VM OUT-FILE: let it go on and wait for its result line.
released() {
	rig_run "$1" -- "touch $2.go"
	expect "$1: $(basename "$2"): the client finished" ntb_wait "$1" 60 "grep -q '^ok\|^err' $2"
}
offsets() { fp_field "$(fp_client $B dma-layout --id "$1" || true)" offsets; }

D=$RIGDIR/$B
echo "# the leases' places: a holder of the attacker's device, then the victim"
borrowed $B "$D/holder.out" --mdev $U
expect_eq "the holder's sub-window" "$(offsets "$id")" 0x100000,0x400000
borrowed $B "$D/victim.out" --mdev $UV --high 0x140000000 --nsze $vnsze --again
expect_eq "the victim's sub-window follows it" "$(offsets "$vid")" 0x700000,0xa00000
released $B "$D/holder.out"
expect "$B: the holder's device was given back" ag_wait_log $B 20 "gave back lender/$LENDER_NVME"

MSI_ADDR=0xfee00000
faults=(0x300000 0x40000000 0x140010000 0xa20000 0x100310000 $MSI_ADDR)
for addr in "${faults[@]}"; do
	echo "# Identify Controller into $addr"
	borrowed $B "$D/attack.out" --mdev $U --hostile "$addr" --reset
	expect_eq "(2) the attacker's sub-window" "$(offsets "$id")" 0x100000,0x400000
	released $B "$D/attack.out"
	out=$(rig_run $B -- cat "$D/attack.out")
	echo "$out"
	expect_eq "(1) the attacker's RAM is intact" "$(fp_field "$out" canary)" ok
	expect_eq "(3) VFIO_DEVICE_RESET" "$(fp_field "$out" reset)" ok
	if [ "$addr" = $MSI_ADDR ]; then
		expect "(4) lender: interrupt-remapping fault of $LENDER_NVME, reason 0x25 (compatibility format blocked)" \
			ntb_wait lender 20 "dmesg | grep -q 'DMAR: \[INTR-REMAP\] Request device \[${LENDER_NVME#0000:}\] .*\[fault reason 0x25\]'"
	else
		expect "(4) lender: DMAR write fault of $LENDER_NVME at $addr" \
			ntb_wait lender 20 "dmesg | grep -q 'DMAR: \[DMA Write.*\] Request device \[${LENDER_NVME#0000:}\] fault addr $addr '"
	fi
done

echo "# the victim, borrowed throughout"
released $B "$D/victim.out"
out=$(rig_run $B -- cat "$D/victim.out")
echo "$out"
expect_eq "(5) the victim's RAM is as before the attacks, byte for byte" "$(fp_field "$out" held_ram)" same
expect_eq "(6) the victim's Identify again" "$(fp_field "$out" again) $(fp_field "$out" again_status)" "ok 0/0"
fp_expect_identify "$out" "$vnsze" 0x140000000

echo "# (7) a correct Identify after the resets"
fp_expect_identify "$(rig_run $B -- "$FP_CLIENT nvme-identify --mdev $U --nsze $nsze" || true)" "$nsze"
spurious='NMI received|No irq handler'
expect_klog_clean $B --also "$spurious"
provoked=(--ir-fault 0x25)
for addr in "${faults[@]}"; do [ "$addr" = $MSI_ADDR ] || provoked+=(--fault "$addr"); done
expect_klog_clean lender "${provoked[@]}" --also "$spurious"
