#!/bin/bash
# QEMU hot-remove and hot-add of the lender's NVMe (the farpass mdev behind a PCIe root port of a 1 GiB
# L2 guest), driven over the L2 QEMU's QMP while the guest waits between steps. Checks:
#  (boot) the guest's nvme driver took the device at boot; QEMU reset the mdev without complaint; the
#      borrow made during SeaBIOS's POST (its NVMe boot support sets bus master) keeps all guest RAM in
#      the DMA window although QEMU unmapped it and mapped it again since (SeaBIOS closing the PAM area
#      re-splits QEMU's RAM section): DMA_LAYOUT's pinned pages cover its slots (the pages pinned again
#      are printed; test_dma_window.sh checks that refill itself);
#  (a) device_del: the guest releases the device (DEVICE_DELETED, no nvme disk left), borrower1's agent
#      gives it back, the lender shows it free and reset it;
#  (b) device_add: the guest's nvme driver takes it again (borrowed again) and fio randwrite+verify
#      works, its MSI-X queue interrupts at least 90% as many as the requests completed; the guest's
#      kernel logged no nvme timeout, abort or controller reset; the lender's backing file on L0 holds
#      what it wrote, and the canary written over it before the guest booted is intact everywhere else;
#  (c) the guest's script exited 0 and its QEMU powered off within 60 s of the script's end, with
#      status 0; borrower1's agent logged exactly: borrow (boot), give-back (device_del), borrow
#      (device_add), give-back (power-off);
#  (d) the kernel logs of both L1s have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/../kernel/kernel-lib.sh"
. "$(dirname "$0")/../agent/agent-lib.sh"
. "$(dirname "$0")/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2e2
e2e_remote_up $B $U 2560
DEV="{\"driver\": \"vfio-pci\", \"id\": \"fp0\", \"bus\": \"rp1\", \"sysfsdev\": \"/sys/bus/mdev/devices/$U\"}"

tag=$(e2e_tag)
e2e_canary "$(rig_lender_nvme_img)"
script="$E2E_GUEST_PAUSE
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
echo \"E2E-NVME-DISKS at boot: \$(ls /sys/block | grep -c nvme)\"
e2e_pause unplug
for i in \$(seq 120); do [ -e /sys/block/nvme0n1 ] || break; sleep 1; done
echo \"E2E-NVME-DISKS after device_del: \$(ls /sys/block | grep -c nvme)\"
e2e_pause plug
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
echo \"E2E-NVME-DISKS after device_add: \$(ls /sys/block | grep -c nvme)\"
$(e2e_fio_script "$tag")"
e2e_l2_start $B 1G "$script" -device pcie-root-port,id=rp1,chassis=1 \
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
e2e_l2_end $B
out=$E2E_OUT
expect_eq "guest: the nvme disk at boot" "$(sed -n 's/^E2E-NVME-DISKS at boot: //p' <<<"$out")" 1
expect_eq "(a) guest: no nvme disk after device_del" \
	"$(sed -n 's/^E2E-NVME-DISKS after device_del: //p' <<<"$out")" 0
expect_eq "(b) guest: the nvme disk is back after device_add" \
	"$(sed -n 's/^E2E-NVME-DISKS after device_add: //p' <<<"$out")" 1
e2e_expect_reset_works $B
e2e_expect_guest_fio "$out"
e2e_expect_written "$(rig_lender_nvme_img)" "$tag"
e2e_expect_borrows $B 2 "(c) borrower1's agent: borrow, give-back (device_del), borrow, give-back (power-off)"
expect_klog_clean $B
expect_klog_clean lender
