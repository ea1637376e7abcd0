#!/bin/bash
# Scenario 5 of issue 15, the reboots `make soak` adds to the hot-plug churn: a 256 MiB L2 guest of
# borrower1 with the lender's NVMe (the farpass mdev; QEMU without -no-reboot) reboots REL_REBOOT_CYCLES
# times (100). Each reboot gives the device back and the next boot borrows it again (during SeaBIOS's
# POST). The guest counts its boots in a block on the disk; boot K (0 to cycles - 1) reads back (verify
# only) the tag boot K - 1 wrote, writes and verifies its own, then reboots; the last boot reads back the
# last tag and powers off. Checks:
#  (a) every boot: the guest's nvme driver had the disk; all cycles writes and cycles read-backs passed,
#      every boot counted on the disk before it rebooted;
#  (b) the lender's and borrower1's resources (e2e_resources) in the last boot are what they were in the
#      first;
#  (c) the last boot: its read-back with its NVMe interrupts and no nvme timeout, abort or reset logged, its
#      script exited 0 and its QEMU powered off (e2e_expect_guest_fio, e2e_l2_end); on L0 the lender's
#      backing file holds the last tag, and the canary written before the guest started is intact
#      everywhere else;
#  (d) the power-off returned the device (the lender shows it free and reset it); borrower1's agent logged
#      exactly 1 + cycles borrows, each given back before the next;
#  (e) the lender's and borrower1's resources are what they were before the guest started;
#  (f) the kernel logs of both L1s have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
# Prints each boot's time (L0 clock, from one boot's first line to the next's) and writes its row of the
# suite's summary table (rel-lib.sh).
set -euo pipefail
. "$(dirname "$0")/../reliability/rel-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit
N=$(rel_count REL_REBOOT_CYCLES 100 reboots)
# A short fio job each boot: 64 writes of 4 KiB, each verified.
E2E_REGIONS=(4096:$((16 << 20)):$((256 << 10)))
E2E_L2_TIMEOUT=$((900 + N * 300))

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2f8
e2e_remote_up $B $U 1024
IMG=$(rig_lender_nvme_img)
rel_row scenario "5: reboot churn" outage "$N x guest reboot (the device given back, borrowed again at POST), fio verify every boot"

base=$(e2e_tag)
# The boot counter's block: 128 MiB into the namespace, outside the fio region.
count_blk=$(((128 << 20) / 4096))
E2E_WRITTEN_EXTRA=($((count_blk * 4096)):4096)
e2e_canary "$IMG"
r_pre=$(e2e_resources $B)
e2e_resources_show "$r_pre"
script="$E2E_GUEST_PAUSE
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
k=\$(dd if=/dev/nvme0n1 bs=4096 skip=$count_blk count=1 2>/dev/null | head -c 64 | tr -d '\\000' | sed -n 's/^E2E-BOOTS-$base \([0-9]*\)\$/\1/p')
k=\${k:-0}
echo \"E2E-REBOOT boot=\$k disks=\$(ls /sys/block | grep -c nvme)\"
t=\$(printf %08x \$((0x$base ^ (k - 1))))
if [ \$k -lt $N ]; then
[ \$k = 0 ] || { $(e2e_fio_jobs '$t' --verify-only E2E-REBOOT-VERIFY); }
t=\$(printf %08x \$((0x$base ^ k)))
$(e2e_fio_jobs '$t' --mark E2E-REBOOT-FIO)
printf 'E2E-BOOTS-$base %d\n' \$((k + 1)) | dd of=/dev/nvme0n1 bs=4096 seek=$count_blk conv=sync oflag=direct 2>/dev/null
echo \"E2E-REBOOT boot=\$k counted rc=\$?\"
[ \$k != 0 ] || e2e_pause boot0
reboot -f
fi
e2e_pause boot$N
$(e2e_fio_script '$t' --read-back)"
E2E_L2_REBOOT=1 e2e_l2_start $B 256M "$script" -device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U
expect "L2's first boot wrote its tag and waits" e2e_l2_wait $B boot0 900
r0=$(e2e_resources $B)
e2e_resources_show "$r0"
e2e_l2_continue $B

# boot_seen K: true once boot K of the guest printed its first line (up to 600 s; false if its QEMU ended).
boot_seen() {
	for _ in $(seq 600); do
		! grep -q "^E2E-REBOOT boot=$1 disks=" "$E2E_L2_LOG" || return 0
		[ ! -e "$(rig_vm_dir $B)/$E2E_L2_NAME.rc" ] || return 1
		sleep 1
	done
	return 1
}
times=()
t0=$(date +%s.%N)
for ((k = 1; k <= N; k++)); do
	expect "boot $k: the guest booted again after its reboot" boot_seen $k
	t1=$(date +%s.%N)
	times+=("$(_rig_elapsed "$t0")")
	echo "boot $k: ${times[-1]} s after boot $((k - 1))"
	t0=$t1
done
expect "L2's last boot waits before its read-back" e2e_l2_wait $B "boot$N" 600
r1=$(e2e_resources $B)
e2e_resources_show "$r1"
back_b=$(e2e_resources_changed "$r0" "$r1")
stats=$(rel_per_cycle boot "${times[@]}")
echo "reboots: $stats"
rel_row 'recovery time' "$stats"
e2e_l2_continue $B
e2e_l2_end $B
out=$E2E_OUT
expect_eq "(a) the boots, each with its nvme disk" \
	"$(sed -n 's/^E2E-REBOOT boot=\([0-9]*\) disks=1$/\1/p' <<<"$out" | paste -sd ' ')" "$(seq -s ' ' 0 "$N")"
expect_eq "(a) boots that counted themselves on the disk before rebooting, of $N" \
	"$(grep -c '^E2E-REBOOT boot=[0-9]* counted rc=0$' <<<"$out")/$(grep -c '^E2E-REBOOT boot=[0-9]* counted' <<<"$out")" "$N/$N"
expect_eq "(a) guest: fio writes that passed, of $N" \
	"$(grep -c '^E2E-REBOOT-FIO bs=4096 rc=0$' <<<"$out")/$(grep -c '^E2E-REBOOT-FIO bs=4096 ' <<<"$out")" "$N/$N"
expect_eq "(a) guest: read-backs of the boot before that passed, before the last boot, of $((N - 1))" \
	"$(grep -c '^E2E-REBOOT-VERIFY bs=4096 rc=0$' <<<"$out")/$(grep -c '^E2E-REBOOT-VERIFY bs=4096 ' <<<"$out")" "$((N - 1))/$((N - 1))"
expect_eq "(b) resources in the last boot as in the first" "$back_b" ""
last=$(awk -v n=$((N + 1)) '/^L2-BOOTED/ { c++ } c >= n' <<<"$out")
e2e_expect_guest_fio "$last"
e2e_expect_written "$IMG" "$(rel_nth_tag "$base" $((N - 1)))"
rel_row 'what the guest saw' "its disk at every boot; every fio verify passed" \
	'blocks checked' "$((2 * N * $(e2e_region_blocks))) ($N boots' $(e2e_region_blocks) written, each read back by the next), the last $(e2e_region_blocks) on L0"
ag_expect_returned $B 60 "(d)"
e2e_expect_borrows $B $((N + 1)) "(d) borrower1's agent: $((N + 1)) borrows, each given back"
rel_expect_baseline "$r_pre"
