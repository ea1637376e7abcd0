#!/bin/bash
# A guest reboot re-borrows the lender's NVMe: a 1 GiB L2 guest of borrower1 (QEMU without -no-reboot)
# runs the same script on both boots and tells them apart by a marker block it writes to the disk in the
# first. Checks:
#  (a) first boot: the guest's fio randwrite+verify with tag A passed; on L0 the lender's backing file
#      holds tag A (checked while the guest waits, before it reboots);
#  (b) the reboot returned the device and the second boot borrowed it again: borrower1's agent logged
#      borrow, give-back, borrow; QEMU's resets of the mdev (machine start, reboot) succeeded with no
#      lease held (no "no available reset mechanism"; the mdev's resets counter counted them);
#  (c) second boot: the stock nvme driver took the device again, fio read back tag A (verify only), then
#      wrote tag B with verify; its MSI-X queue interrupts at least 90% as many as the requests completed;
#      its kernel logged no nvme timeout, abort or controller reset; its script exited 0; on L0 the
#      backing file holds tag B; the canary written over the file before the guest booted is intact
#      everywhere but the fio regions and the marker block (checked after each boot);
#  (d) the final power-off returned the device (the lender shows it free and reset it); the QEMU exited
#      within 60 s of the second boot's script end, with status 0;
#  (e) the kernel logs of both L1s have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/../kernel/kernel-lib.sh"
. "$(dirname "$0")/../agent/agent-lib.sh"
. "$(dirname "$0")/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2e3
e2e_remote_up $B $U 2560

tag_a=$(e2e_tag)
tag_b=$(e2e_other_tag "$tag_a")
marker=E2E-BOOT1-$tag_a
# The marker's block: 128 MiB into the namespace, outside every fio region (E2E_REGIONS).
mark_blk=$(((128 << 20) / 4096))
E2E_WRITTEN_EXTRA=($((mark_blk * 4096)):4096)
e2e_canary "$(rig_lender_nvme_img)"
script="$E2E_GUEST_PAUSE
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
if [ \"\$(dd if=/dev/nvme0n1 bs=4096 skip=$mark_blk count=1 2>/dev/null | head -c ${#marker})\" != $marker ]; then
echo 'E2E-BOOT 1'
$(e2e_fio_jobs "$tag_a")
printf %s $marker | dd of=/dev/nvme0n1 bs=4096 seek=$mark_blk conv=sync 2>/dev/null && sync
echo \"E2E-MARKER rc=\$?\"
e2e_pause boot1
reboot -f
fi
echo 'E2E-BOOT 2'
$(e2e_fio_jobs "$tag_a" --verify-only)
$(e2e_fio_script "$tag_b")"
E2E_L2_TIMEOUT=2400 E2E_L2_REBOOT=1 e2e_l2_start $B 1G "$script" \
	-device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U
expect "L2's first boot wrote and waits" e2e_l2_wait $B boot1 1200
boot1=$(tr -d '\r' <"$E2E_L2_LOG")
for r in "${E2E_REGIONS[@]}"; do
	expect_eq "(a) boot 1: fio randwrite+verify bs=${r%%:*}" "$(sed -n "s/^E2E-FIO bs=${r%%:*} rc=//p" <<<"$boot1")" 0
done
expect_eq "(a) boot 1: the marker block written" "$(sed -n 's/^E2E-MARKER rc=//p' <<<"$boot1")" 0
e2e_expect_written "$(rig_lender_nvme_img)" "$tag_a"
e2e_l2_continue $B
e2e_l2_end $B
out=$E2E_OUT
boot2=$(awk '/^L2-BOOTED/ { n++ } n >= 2' <<<"$out")
expect "(b) the guest booted a second time" grep -q '^E2E-BOOT 2' <<<"$boot2"
e2e_expect_reset_works $B
expect "(b) the mdev's resets counter counted machine start and reboot: $(fp_counter $B resets)" \
	test "$(fp_counter $B resets)" -ge 2
for r in "${E2E_REGIONS[@]}"; do
	expect_eq "(c) boot 2: fio read back tag A bs=${r%%:*}" \
		"$(sed -n "s/^E2E-FIO-VERIFY bs=${r%%:*} rc=//p" <<<"$boot2")" 0
done
e2e_expect_guest_fio "$boot2"
e2e_expect_written "$(rig_lender_nvme_img)" "$tag_b"
ag_expect_returned $B 60 "(d)"
e2e_expect_borrows $B 2 "(b) borrower1's agent: borrow, give-back (reboot), borrow, give-back (power-off)"
expect_klog_clean $B
expect_klog_clean lender
