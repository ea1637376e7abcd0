#!/bin/bash
# Scenario 5 of issue 15, hot-plug churn: the lender's NVMe (the farpass mdev behind a PCIe root port of a
# 256 MiB L2 guest of borrower1) hot-removed and hot-added REL_CHURN_CYCLES times (3; `make soak`: 100)
# over the L2 QEMU's QMP, with a short fio verify in the guest between cycles. Checks:
#  (a) every cycle: device_del ends with DEVICE_DELETED and the guest then has no nvme disk; after
#      device_add it has its disk again;
#  (b) the guest's fio: before the first cycle it wrote a tag with verify; after every cycle it read back
#      (verify only) the tag written before the cycle, then wrote and verified a new one: all 1 + cycles
#      writes and cycles read-backs passed; after the last cycle it read the last tag back once more,
#      with its NVMe interrupts and no nvme timeout, abort or reset logged (e2e_expect_guest_fio); on L0
#      the lender's backing file holds the last tag, and the canary written before the guest started is
#      intact everywhere else;
#  (c) after the last cycle, with the device in the guest again, the lender's and borrower1's resources
#      (e2e_resources: pinned pages, DMA windows and quarantined ranges, BAR mappings, interrupt hooks,
#      pending upcalls, instances, VFIO opens, links, the agents' leases and the lender's DMA mappings)
#      are what they were after the first cycle (the borrow at boot, made during SeaBIOS's POST, maps the
#      same pages in fewer DMA slots than a borrow under the running guest: 2 and 3 here);
#  (d) the guest's script exited 0 and its QEMU powered off; that returned the device (the lender shows it
#      free and reset it); borrower1's agent logged exactly 1 + cycles borrows, each given back before the
#      next; the lender's and borrower1's resources are what they were before the guest started;
#  (e) the kernel logs of both L1s have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
# Prints each cycle's times (device_del; device_add, the guest's disk back and its fio) and writes its row
# of the suite's summary table (rel-lib.sh).
set -euo pipefail
. "$(dirname "$0")/rel-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit
N=$(rel_count REL_CHURN_CYCLES 3 cycles)
# A short fio job between cycles: 64 writes of 4 KiB, each verified.
E2E_REGIONS=(4096:$((16 << 20)):$((256 << 10)))
E2E_L2_TIMEOUT=$((900 + N * 120))

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2f5
DEV="{\"driver\": \"vfio-pci\", \"id\": \"fp0\", \"bus\": \"rp1\", \"sysfsdev\": \"/sys/bus/mdev/devices/$U\"}"
e2e_remote_up $B $U 1024
IMG=$(rig_lender_nvme_img)
rel_row scenario "5: hot-plug churn" outage "$N x QMP device_del + device_add, fio verify between"

base=$(e2e_tag)
e2e_canary "$IMG"
r_pre=$(e2e_resources $B)
e2e_resources_show "$r_pre"
script="$E2E_GUEST_PAUSE
disks() { ls /sys/block | grep -c nvme; }
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
c=0
t=\$(printf %08x \$((0x$base ^ c)))
$(e2e_fio_jobs '$t' --mark E2E-CHURN-FIO)
while [ \$c -lt $N ]; do
c=\$((c + 1))
e2e_pause c\$c-unplug
for i in \$(seq 120); do [ -e /sys/block/nvme0n1 ] || break; sleep 1; done
echo \"E2E-CHURN c=\$c removed disks=\$(disks)\"
e2e_pause c\$c-plug
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
echo \"E2E-CHURN c=\$c added disks=\$(disks)\"
$(e2e_fio_jobs '$t' --verify-only E2E-CHURN-VERIFY)
t=\$(printf %08x \$((0x$base ^ c)))
$(e2e_fio_jobs '$t' --mark E2E-CHURN-FIO)
done
e2e_pause final
$(e2e_fio_script '$t' --read-back)"
e2e_l2_start $B 256M "$script" -device pcie-root-port,id=rp1,chassis=1 \
	-device vfio-pci,id=fp0,bus=rp1,sysfsdev=/sys/bus/mdev/devices/$U
expect "L2 booted with the device, wrote its first tag and waits" e2e_l2_wait $B c1-unplug 900

times=()
for ((c = 1; c <= N; c++)); do
	t0=$(date +%s.%N)
	expect "(a) cycle $c: QMP device_del: DEVICE_DELETED" \
		e2e_qmp $B device_del '{"id": "fp0"}' --event DEVICE_DELETED --timeout 240
	t_del=$(_rig_elapsed "$t0")
	e2e_l2_continue $B
	expect "cycle $c: the guest waits for the device to come back" e2e_l2_wait $B "c$c-plug" 300
	t1=$(date +%s.%N)
	expect "(a) cycle $c: QMP device_add" e2e_qmp $B device_add "$DEV"
	e2e_l2_continue $B
	next=final
	((c == N)) || next=c$((c + 1))-unplug
	expect "cycle $c: the guest read back, wrote its next tag and waits" e2e_l2_wait $B "$next" 600
	times+=("$(_rig_elapsed "$t0")")
	echo "cycle $c: ${times[-1]} s (device_del $t_del s; device_add, disk back and fio $(_rig_elapsed "$t1") s)"
	if ((c == 1)); then
		r0=$(e2e_resources $B)
		e2e_resources_show "$r0"
	fi
done
r1=$(e2e_resources $B)
e2e_resources_show "$r1"
back_c=$(e2e_resources_changed "$r0" "$r1")
stats=$(rel_per_cycle cycle "${times[@]}")
echo "cycles: $stats"
rel_row 'recovery time' "$stats"
e2e_l2_continue $B
e2e_l2_end $B
out=$E2E_OUT
for r in "${E2E_REGIONS[@]}"; do
	bs=${r%%:*}
	expect_eq "(b) guest: fio writes bs=$bs that passed, of $((N + 1))" \
		"$(grep -c "^E2E-CHURN-FIO bs=$bs rc=0\$" <<<"$out")/$(grep -c "^E2E-CHURN-FIO bs=$bs " <<<"$out")" "$((N + 1))/$((N + 1))"
	expect_eq "(b) guest: read-backs bs=$bs after a cycle that passed, of $N" \
		"$(grep -c "^E2E-CHURN-VERIFY bs=$bs rc=0\$" <<<"$out")/$(grep -c "^E2E-CHURN-VERIFY bs=$bs " <<<"$out")" "$N/$N"
done
expect_eq "(a) cycles after which the guest had no nvme disk" "$(grep -c '^E2E-CHURN c=[0-9]* removed disks=0$' <<<"$out")" "$N"
expect_eq "(a) cycles after which it had its disk again" "$(grep -c '^E2E-CHURN c=[0-9]* added disks=1$' <<<"$out")" "$N"
e2e_expect_guest_fio "$out"
e2e_expect_written "$IMG" "$(rel_nth_tag "$base" "$N")"
# Blocks written and read back in the guest: 1 + N writes (each verified) and N + 1 read-backs of every
# region; the last tag on L0 too.
blocks=$(e2e_region_blocks)
rel_row 'what the guest saw' "disk gone at each device_del, back at each device_add; every fio verify passed" \
	'blocks checked' "$(((2 * N + 2) * blocks)) (each cycle's $blocks written and read back), the last $blocks on L0"
ag_expect_returned $B 60 "(d)"
e2e_expect_borrows $B $((N + 1)) "(d) borrower1's agent: $((N + 1)) borrows, each given back"
r2=$(e2e_resources $B)
e2e_resources_show "$r2"
back_d=$(e2e_resources_changed "$r_pre" "$r2")
rel_row 'resources back to baseline' "$([ -z "$back_c$back_d" ] && echo yes || echo "no: $back_c$back_d")"
expect_eq "(c) resources after the last cycle as after the first" "$back_c" ""
expect_eq "(d) resources after the guest's power-off as before it started" "$back_d" ""
expect_klog_clean $B
expect_klog_clean lender
