#!/bin/bash
# (d) The NTB client on both ends of link 1: link up and the control handshake (HELLO/HELLO_ACK over
# scratchpads and a doorbell) complete on both sides; killing the borrower's QEMU takes the lender's
# link down without hanging anything (the lender's farpass unloads at once); when the borrower boots
# again, the link and the handshake come back; killing the lender then leaves the borrower's mdev
# instance intact and the borrower's farpass unloads at once. Both kernel logs have no warning, BUG,
# oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built

rig_up --borrowers 1
B=borrower1
linkf() { echo "$FP_DBG/$(ntb_pci "$1")/link"; }
both_up() {
	local vm
	for vm in lender $B; do
		expect "$vm: link up, handshake ok" ntb_wait $vm 30 "grep -qx 'link up' $(linkf $vm) && grep -qx 'handshake ok' $(linkf $vm)"
		rig_run $vm -- "cat $(linkf $vm)"
	done
}

fp_load lender
fp_load $B
both_up
expect_eq "the lender saw the borrower's protocol version" "$(rig_run lender -- "awk '\$1 == \"peer_version\" { print \$2 }' $(linkf lender)")" 2
for vm in lender $B; do
	expect "$vm: control messages received" test "$(fp_counter $vm ctrl_rx)" -ge 1
	expect_eq "$vm: no control errors" "$(fp_counter $vm ctrl_errors)" 0
done

rig_kill $B
expect "lender: link down after the borrower's QEMU was killed" \
	ntb_wait lender 20 "grep -qx 'link down' $(linkf lender) && grep -qx 'handshake down' $(linkf lender)"
expect_eq "lender: one link-down event" "$(fp_counter lender link_down_events)" 1
expect "lender: farpass unloads at once with the peer dead" rig_run lender --timeout 20 -- "rmmod farpass"

rig_boot $B
fp_load lender
fp_load $B
both_up
expect_klog_clean lender

# The lender dies while the borrower has an mdev of one of its devices.
NTB=$(ntb_pci $B)
U=8f7c3ab0-5c6e-4e41-9d3e-0000000000d1
fp_client $B announce --id 1 --ntb "$NTB"
rig_run $B -- "echo $U > /sys/class/mdev_bus/$NTB/mdev_supported_types/ntb_hw_epf-farpass-lender-0/create"
rig_kill lender
expect "borrower: link down after the lender's QEMU was killed" \
	ntb_wait $B 20 "grep -qx 'link down' $(linkf $B) && grep -qx 'handshake down' $(linkf $B)"
expect "borrower: the instance is still there and opens (nothing borrowed yet)" fp_client $B vfio-info $U
expect "borrower: farpass unloads at once, taking the instance with it" \
	rig_run $B --timeout 20 -- "rmmod farpass && ! test -e /sys/bus/mdev/devices/$U"
expect_klog_clean $B
