#!/bin/bash
# Three remote devices of two lenders in one L2 guest of borrower1 (rig_up --lenders 2), all through
# farpass mdevs and stock QEMU (-device vfio-pci,sysfsdev=...), each driven by the guest's stock driver at
# the same time: the lender's QEMU e1000e NIC (a second device class: BAR0 and BAR1 MMIO, an I/O-port
# BAR2, the MSI-X table and PBA in BAR3; user-mode networking on L0) and its NVMe, over link 1, and
# lender2's NVMe over link 3. The L2 takes slirp's usual guest address (its small kernel has no AF_PACKET
# for a DHCP client), downloads a per-run random blob from an HTTP server the test runs on L0 (slirp's
# 10.0.2.2) and uploads it back under a per-run tag, while fio writes a per-run pattern with verify to
# each NVMe (the guest tells them apart by serial), a pattern of its own to each. Checks:
#  (a) the guest's stock e1000e driver bound the NIC; its stock nvme driver bound both NVMe, one of each
#      lender (by serial);
#  (b) the guest's eth0 came up with a link; on L0: the guest's sha256 of what it downloaded is the
#      blob's, and the server stored the guest's upload under this run's tag with exactly the blob's bytes
#      (DMA both ways: transmit descriptors and buffers read from guest RAM, receive buffers written into
#      it);
#  (c) the e1000e's MSI-X vectors reached the guest: its rx and tx vectors counted in /proc/interrupts
#      during the transfer; the interrupt relay: borrower1's irq_signalled grew by as much as the
#      lenders' irq_posted together (more than 0), irq_dropped and irq_no_eventfd did not grow;
#  (d) no software in the data path: over the transfer and the fio jobs, every farpass counter of the
#      lenders and of borrower1 outside an allow-list (lenders: irq_posted; borrower1: doorbell, interrupt
#      delivery and signalling, MSI-X table/PBA traps) kept its value, and no MSI-X table/PBA access was
#      trapped (E2E_MSIX_TRAPS_MAX);
#  (e) the guest's shutdown returned the three devices: borrower1's agent gave each back to its lender,
#      which shows it free on vfio-pci with bus master off (and reset: the NVMe's CSTS.RDY 0, the NIC's
#      receive control 0); the guest's script exited 0, and its QEMU powered off within 60 s of the
#      script's end, with status 0;
#  (f) the kernel logs of the three L1s have no warning, BUG, oops, RCU stall, hung task or DMAR fault;
#  (g) the NVMe beside the NIC: borrower1 held three DMA windows of the guest's RAM (one per device)
#      during the I/O; the guest's fio verify passed, its NVMe's MSI-X interrupts at least 90% as many as
#      the requests completed, its kernel logged no nvme timeout, abort or reset; on L0 the NVMe's
#      backing file holds the pattern at every block the guest wrote, and the canary written over it
#      before the guest started everywhere else;
#  (h) neither lender's QEMU dropped an access as re-entrant (its "Blocked re-entrant IO" warning: a
#      window access ntb-epf delivered, or a device's DMA through the window, while another device's DMA
#      waited on it);
#  (i) lender2's NVMe, beside the other two: the same checks as (g) for its own fio, pattern and backing
#      file (lender2-nvme.img): each lender's backing file holds its own NVMe's pattern and canary, and
#      nothing of the other's.
# Prints the L2 run's duration, the transfer's size and the allowed counters' growth.
set -euo pipefail
. "$(dirname "$0")/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e1e1
AG_LENT=$RIG_NIC_PCI
NVME=$(rig_lender_nvme_pci 0)
export AG_LENT_ALSO=$NVME
# lender2 lends its NVMe, at the same address (ag_remote_mdev: $AG_LENT2).
export AG_LENT2=$NVME
BLOB_MIB=1
RIG_LENDER_EXTRA=$RIG_NIC_LENDER_EXTRA
e2e_http_up $BLOB_MIB

# The guest's 512 MiB are pinned in borrower1 for each device: two DMA windows of 512 MiB in link 1's MW2,
# one in link 3's.
RIG_NTB_PROPS=${RIG_NTB_PROPS:-},mw2-size=2G rig_up --borrowers 1 --lenders 2 --borrower-mem 2048
e2e_remote_mdev $B $U
ag_extra_mdev $B "$NVME"
U1=$AG_EXTRA_UUID
ag_extra_mdev $B "$NVME" lender2
U2=$AG_EXTRA_UUID
# Short fio jobs: 128 writes of 4 KiB and 16 of 128 KiB.
E2E_REGIONS=(4096:$((16 << 20)):$((512 << 10)) 131072:$((64 << 20)):$((2 << 20)))
IMG1=$(rig_lender_nvme_img 0 lender) IMG2=$(rig_lender_nvme_img 0 lender2)
e2e_canary "$IMG1"
C1=$E2E_CANARY
e2e_canary "$IMG2"
C2=$E2E_CANARY

tag=$(e2e_tag)
tag2=$(e2e_tag)
script=$(
	cat <<EOF
$E2E_GUEST_PAUSE
irqs() { awk '/eth0/ { for (i = 2; i <= NF && \$i ~ /^[0-9]+\$/; i++) n += \$i } END { print n + 0 }' /proc/interrupts; }
$(e2e_nic_up_script)
echo "E2E-NET-IRQS before \$(irqs)"
e2e_pause net
# Each lender's NVMe by its serial (rig.sh): the driver numbers the controllers in probe order.
for c in /sys/class/nvme/nvme*; do case \$(cat \$c/serial) in farpass-nvme0*) d1=\${c##*/}n1 ;; farpass2-nvme0*) d2=\${c##*/}n1 ;; esac; done
echo "E2E-NVME-DEVS lender=\$d1 lender2=\$d2"
# The NVMe's fio jobs meanwhile; their output follows the transfer's, lender2's prefixed E2E-N2.
( $(E2E_NVME='$d1' e2e_fio_script "$tag") ) >/tmp/nvme.out 2>&1 &
nvme_pid=\$!
( $(E2E_NVME='$d2' e2e_fio_script "$tag2") ) >/tmp/nvme2.out 2>&1 &
nvme2_pid=\$!
$(e2e_nic_transfer_script "$tag")
wait \$nvme_pid; nvme=\$?
wait \$nvme2_pid; nvme2=\$?
cat /tmp/nvme.out
sed 's/^/E2E-N2 /' /tmp/nvme2.out
e2e_pause net-done
# For a failed transfer: the interface's counters and what its driver said.
sed -n 's/^ *eth0:/E2E-NETDEV eth0:/p' /proc/net/dev
dmesg | grep -E 'e1000e|eth0' | tail -n 8 | sed 's/^/E2E-DMESG /'
grep eth0 /proc/interrupts | sed 's/^/E2E-IRQ-LINE /'
echo "E2E-NET-IRQS after \$(irqs)"
[ \$get = 0 ] && [ \$post = 0 ] && [ \$nvme = 0 ] && [ \$nvme2 = 0 ]
EOF
)
t0=$SECONDS
e2e_l2_start $B 512M "$script" -device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U \
	-device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U1 -device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U2
expect "L2 booted and reached the transfer" e2e_l2_wait $B net 900
s0=$(e2e_snapshot $B --hold)
expect_eq "(g) borrower1: a DMA window of the guest's RAM for each device" "$(e2e_snap $B "$s0" dma_windows)" 3
t1=$SECONDS
e2e_l2_continue $B
expect "L2 finished the transfer" e2e_l2_wait $B net-done 1200
t2=$SECONDS
s1=$(e2e_snapshot $B --hold)
e2e_l2_end_with_snapshots $B "$s0" "$s1"
out=$E2E_OUT
echo "L2 boot + transfer and fio + power-off: $((SECONDS - t0)) s; download + upload of $BLOB_MIB MiB (fio beside it): $((t2 - t1)) s"
grep -E '^(L2-|E2E-)' <<<"$out" | sed 's/^/    L2> /'
echo "L0 server log:"
sed 's/^/    /' "$E2E_HTTP_DIR/log"

expect "L2 booted" grep -q '^L2-BOOTED' <<<"$out"
expect "(a) the guest's stock e1000e driver bound the 82574L" grep -qE '0x8086:0x10d3 .*driver=e1000e' <<<"$out"
expect_eq "(a) the guest's stock nvme driver bound both NVMe" "$(grep -cE '0x1b36:0x0010 .*driver=nvme' <<<"$out")" 2
expect "(a) ... one of each lender, by serial: $(sed -n 's/^E2E-NVME-DEVS //p' <<<"$out")" \
	grep -qE '^E2E-NVME-DEVS lender=nvme[0-9]+n1 lender2=nvme[0-9]+n1$' <<<"$out"
e2e_expect_nic_transfer "$out" "$tag" "(b)"

before=$(sed -n 's/^E2E-NET-IRQS before //p' <<<"$out")
after=$(sed -n 's/^E2E-NET-IRQS after //p' <<<"$out")
expect "(c) guest /proc/interrupts: e1000e interrupts counted during the transfer ($before -> $after)" \
	test "${after:-0}" -gt "${before:-0}"
for q in rx tx; do
	expect "(c) the $q queue's vector is MSI-X and counted" \
		grep -qE "^E2E-IRQ-LINE +[0-9]+: +[0-9]*[1-9][0-9]* .*MSI.*eth0-$q-0" <<<"$out"
done

e2e_expect_irq_relay "$s0" "$s1" "the transfer and fio"
e2e_expect_no_software_in_path "$s0" "$s1" "the transfer and fio"

e2e_expect_guest_fio "$out"
E2E_CANARY=$C1 e2e_expect_written "$IMG1" "$tag"
echo "(i) lender2's NVMe:"
e2e_expect_fio_jobs "$(sed -n 's/^E2E-N2 //p' <<<"$out")"
E2E_CANARY=$C2 e2e_expect_written "$IMG2" "$tag2"

ag_expect_returned $B 30 "(e)"
AG_LENT=$NVME ag_expect_returned $B 30 "(e)"
AG_LENDER=lender2 AG_LENT=$NVME ag_expect_returned $B 30 "(e)"
expect_klog_clean $B
for l in lender lender2; do
	expect_klog_clean $l
	expect "(h) $l's QEMU blocked no re-entrant access" \
		not grep -q 'Blocked re-entrant IO' "$(rig_vm_dir $l)/qemu.log"
done
