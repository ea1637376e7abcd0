#!/bin/bash
# The lender's NVMe (the farpass mdev behind a PCIe root port of a 1 GiB L2 guest of borrower1, QEMU
# without -no-reboot) hot-removed and hot-added over the L2 QEMU's QMP while the guest waits between
# steps, then re-borrowed by a guest reboot. The guest runs the same script on both boots and tells them
# apart by a marker block it writes to the disk in the first. Checks:
#  (boot) the guest's nvme driver took the device at boot; QEMU reset the mdev without complaint; the
#      borrow made during SeaBIOS's POST (its NVMe boot support sets bus master) keeps all guest RAM in
#      the DMA window although QEMU unmapped it and mapped it again since (SeaBIOS closing the PAM area
#      re-splits QEMU's RAM section): DMA_LAYOUT's pinned pages cover its slots (the pages pinned again
#      are printed; test_dma_window.sh checks that refill itself);
#  (a) device_del: the guest releases the device (DEVICE_DELETED, no nvme disk left), borrower1's agent
#      gives it back, the lender shows it free and reset it;
#  (b) device_add: the guest's nvme driver takes it again (borrowed again) and fio randwrite+verify with
#      tag A passes, its MSI-X queue interrupts at least 90% as many as the requests completed, its kernel
#      logged no nvme timeout, abort or controller reset; on L0 the lender's backing file holds tag A
#      (checked while the guest waits, before it reboots);
#  (c) the reboot returned the device and the second boot borrowed it again; QEMU's resets of the mdev
#      (machine start, reboot) succeeded with no lease held (no "no available reset mechanism"; the mdev's
#      resets counter counted them);
#  (d) second boot: the stock nvme driver took the device again, fio read back tag A (verify only), then
#      wrote tag B with verify; its MSI-X queue interrupts at least 90% as many as the requests completed;
#      its kernel logged no nvme timeout, abort or controller reset; its script exited 0; on L0 the
#      backing file holds tag B; the canary written over the file before the guest booted is intact
#      everywhere but the fio regions and the marker block (checked after each boot);
#  (e) the final power-off returned the device (the lender shows it free and reset it); the QEMU exited
#      within 60 s of the second boot's script end, with status 0; borrower1's agent logged exactly:
#      borrow (boot), give-back (device_del), borrow (device_add), give-back (reboot), borrow (second
#      boot), give-back (power-off);
#  (f) the kernel logs of both L1s have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2e2
e2e_remote_up $B $U 2560
DEV="{\"driver\": \"vfio-pci\", \"id\": \"fp0\", \"bus\": \"rp1\", \"sysfsdev\": \"/sys/bus/mdev/devices/$U\"}"

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
echo \"E2E-NVME-DISKS at boot: \$(ls /sys/block | grep -c nvme)\"
e2e_pause unplug
for i in \$(seq 120); do [ -e /sys/block/nvme0n1 ] || break; sleep 1; done
echo \"E2E-NVME-DISKS after device_del: \$(ls /sys/block | grep -c nvme)\"
e2e_pause plug
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
echo \"E2E-NVME-DISKS after device_add: \$(ls /sys/block | grep -c nvme)\"
$(e2e_fio_script "$tag_a")
printf %s $marker | dd of=/dev/nvme0n1 bs=4096 seek=$mark_blk conv=sync 2>/dev/null && sync
echo \"E2E-MARKER rc=\$?\"
e2e_pause boot1
reboot -f
fi
echo 'E2E-BOOT 2'
$(e2e_fio_jobs "$tag_a" --verify-only)
$(e2e_fio_script "$tag_b")"
E2E_L2_TIMEOUT=2400 E2E_L2_REBOOT=1 e2e_l2_start $B 1G "$script" -device pcie-root-port,id=rp1,chassis=1 \
	-device vfio-pci,id=fp0,bus=rp1,sysfsdev=/sys/bus/mdev/devices/$U
expect "L2 booted with the device and waits" e2e_l2_wait $B unplug 900
layout=$(fp_client $B dma-layout --id "$E2E_DEVICE_ID" || true)
echo "DMA_LAYOUT after boot: $layout"
e2e_expect_window_full "$layout" "(boot)"
echo "counter dma_refilled_pages: $(fp_counter $B dma_refilled_pages) (QEMU re-mapped them after the borrow)"
expect "(a) QMP device_del: DEVICE_DELETED" e2e_qmp $B device_del '{"id": "fp0"}' --event DEVICE_DELETED --timeout 240
ag_expect_returned $B 60 "(a)"
e2e_l2_continue $B
expect "L2 waits for the device to come back" e2e_l2_wait $B plug 300
expect "(b) QMP device_add" e2e_qmp $B device_add "$DEV"
e2e_l2_continue $B
expect "L2's first boot wrote and waits" e2e_l2_wait $B boot1 1200
boot1=$(tr -d '\r' <"$E2E_L2_LOG")
expect_eq "guest: the nvme disk at boot" "$(sed -n 's/^E2E-NVME-DISKS at boot: //p' <<<"$boot1")" 1
expect_eq "(a) guest: no nvme disk after device_del" \
	"$(sed -n 's/^E2E-NVME-DISKS after device_del: //p' <<<"$boot1")" 0
expect_eq "(b) guest: the nvme disk is back after device_add" \
	"$(sed -n 's/^E2E-NVME-DISKS after device_add: //p' <<<"$boot1")" 1
e2e_expect_fio_jobs "$boot1"
expect_eq "(b) the marker block written" "$(sed -n 's/^E2E-MARKER rc=//p' <<<"$boot1")" 0
e2e_expect_written "$(rig_lender_nvme_img)" "$tag_a"
e2e_l2_continue $B
e2e_l2_end $B
out=$E2E_OUT
boot2=$(awk '/^L2-BOOTED/ { n++ } n >= 2' <<<"$out")
expect "(c) the guest booted a second time" grep -q '^E2E-BOOT 2' <<<"$boot2"
e2e_expect_reset_works $B
expect "(c) the mdev's resets counter counted machine start and reboot: $(fp_counter $B resets)" \
	test "$(fp_counter $B resets)" -ge 2
for r in "${E2E_REGIONS[@]}"; do
	expect_eq "(d) boot 2: fio read back tag A bs=${r%%:*}" \
		"$(sed -n "s/^E2E-FIO-VERIFY bs=${r%%:*} rc=//p" <<<"$boot2")" 0
done
e2e_expect_guest_fio "$boot2"
e2e_expect_written "$(rig_lender_nvme_img)" "$tag_b"
ag_expect_returned $B 60 "(e)"
e2e_expect_borrows $B 3 "(e) borrower1's agent: borrow, give-back (device_del), borrow (device_add), give-back (reboot), borrow, give-back (power-off)"
expect_klog_clean $B
expect_klog_clean lender
