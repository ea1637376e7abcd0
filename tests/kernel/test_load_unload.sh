#!/bin/bash
# (c) farpass.ko loads and unloads 20 times on borrower1, every other time with announced devices and
# an mdev instance present at rmmod; the lender keeps its farpass loaded, so each load also brings the
# link up and starts the control handshake that the unload interrupts. Afterwards: no mdev, no parent,
# VFIO and mdev hold no reference, neither kernel log has a warning, BUG, oops, RCU stall, hung task or
# DMAR fault (nor, on borrower1, a leak report); a last cycle checks the counters'
# gauges are back to zero after a clean teardown.
# (p) a probe whose last step (the mdev parent's registration) fails, made to by fp_probe_fault.ko right
# after it delivered the NTB's link and doorbell events, with their work held queued until the probe
# returned: the probe returns -ENOMEM, no link and no mdev parent are left, and the queued work of the
# freed link never runs (the L1s boot with slub_debug poisoning, so work run from freed memory oopses: the
# kernel log checks above); a probe after it brings the link up again.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built
FAULT_KO=$FARPASS_BUILD/tests/kernel/fp_probe_fault-$FARPASS_KERNEL.ko
[ -e "$FAULT_KO" ] || { echo "missing $FAULT_KO: run make build" >&2; exit 1; }

# Freed kmalloc objects are poisoned (P), with red zones (Z) and checks (F): a use after free shows.
RIG_APPEND="slub_debug=FZP,kmalloc-* ${RIG_APPEND:-}"
rig_up --borrowers 1
B=borrower1
NTB=$(ntb_pci $B)
PARENT=/sys/class/mdev_bus/$NTB
T=$PARENT/mdev_supported_types/ntb_hw_epf-farpass-lender-0 # device 1's slot
fp_load lender
fp_load $B
rig_run $B -- "rmmod farpass"
users() { rig_run $B -- "lsmod | awk '\$1 == \"$1\" { print \$3 }'"; }
mdev_users=$(users mdev) vfio_users=$(users vfio)

expect "20 load/unload cycles, instances present in every other one" rig_run $B --timeout 400 -- "set -e
for i in \$(seq 20); do
	insmod $FP_KO
	if [ \$((i % 2)) = 1 ]; then
		$FP_CLIENT announce --id 1 --ntb $NTB >/dev/null
		$FP_CLIENT announce --id 2 --ntb $NTB --irq-slot 1 >/dev/null
		echo 8f7c3ab0-5c6e-4e41-9d3e-0000000000\$(printf %02d \$i) > $T/create
		test \$(ls /sys/bus/mdev/devices | wc -l) = 1
	fi
	rmmod farpass
	test ! -e $PARENT/mdev_supported_types
	test \$(ls /sys/bus/mdev/devices | wc -l) = 0
done
echo cycles done"

expect_eq "mdev's users as before the cycles" "$(users mdev)" "$mdev_users"
expect_eq "vfio's users as before the cycles" "$(users vfio)" "$vfio_users"

echo "# a last cycle with a clean teardown: gauges back to zero"
fp_load $B
fp_client $B announce --id 1 --ntb "$NTB"
rig_run $B -- "echo 8f7c3ab0-5c6e-4e41-9d3e-0000000000aa > $T/create"
expect_eq "instances" "$(fp_counter $B instances)" 1
rig_run $B -- "echo 1 > /sys/bus/mdev/devices/8f7c3ab0-5c6e-4e41-9d3e-0000000000aa/remove"
fp_client $B withdraw --id 1
rig_run $B -- "cat $FP_DBG/counters"
for n in agent_files devices instances vfio_open pinned_pages bar_maps irq_hooks; do
	expect_eq "counters: $n" "$(fp_counter $B $n)" 0
done
expect_eq "counters: one parent (the link's, with its 16 slot types, all empty)" \
	"$(fp_counter $B parents):$(fp_counter $B types)" 1:16
expect "rmmod" rig_run $B -- "rmmod farpass"

echo "# (p) the NTB probe fails at the mdev parent's registration, with the link's work queued"
P=/sys/module/fp_probe_fault/parameters
rebind_ntb() { rig_run $B --timeout 60 -- "echo $NTB > /sys/bus/pci/drivers/ntb_hw_epf/unbind; echo $NTB > /sys/bus/pci/drivers/ntb_hw_epf/bind"; }
# Since 6.5 a work item running over cpu_intensive_thresh_us (10 ms) lets its pool start another worker,
# which would run the held work early: not while this test holds it.
WQ_THRESH=/sys/module/workqueue/parameters/cpu_intensive_thresh_us
expect "farpass loads, then fp_probe_fault.ko, armed for one failure" \
	rig_run $B -- "set -e; [ ! -e $WQ_THRESH ] || echo 100000000 > $WQ_THRESH; insmod $FP_KO; insmod $FAULT_KO fail_times=1"
expect "the NTB leaves ntb_hw_epf and comes back" rebind_ntb
expect_eq "the failure was injected once" "$(rig_run $B -- "cat $P/fired")" 1
expect_eq "fp_ntb_probe returned -ENOMEM" "$(rig_run $B -- "cat $P/probe_ret")" -12
expect "the link's work stayed queued until fp_ntb_probe had returned" \
	ntb_wait $B 15 "grep -qx Y $P/held_past_probe"
expect_eq "no link left" "$(fp_counter $B links)" 0
expect "no mdev parent left" rig_run $B -- "test ! -e $PARENT/mdev_supported_types"
expect "fp_probe_fault.ko unloads" rig_run $B -- "rmmod fp_probe_fault"
expect "a probe after it: the NTB leaves ntb_hw_epf and comes back" rebind_ntb
expect "... and the link comes up" ntb_wait $B 60 "[ \$(sed -n 's/^links_up //p' $FP_DBG/counters) = 1 ]"
expect "... with the link's mdev parent" rig_run $B -- "test -e $PARENT/mdev_supported_types"
expect "rmmod" rig_run $B -- "rmmod farpass"
expect_klog_clean $B --also leak
expect_klog_clean lender
expect "lender: rmmod farpass" rig_run lender -- "rmmod farpass"
