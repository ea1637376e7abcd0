#!/bin/bash
# Upstream ntb_pingpong: each side rings the other's doorbell and passes a counter through the
# scratchpads; both counters keep rising.
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

rig_up --borrowers 1
count() { rig_run "$1" -- "cat /sys/kernel/debug/ntb_pingpong/$(ntb_pci "$1")/count"; }

for vm in lender borrower1; do
	ntb_load "$vm" ntb_pingpong delay_ms=20
done
for vm in lender borrower1; do
	expect "$vm: ping-pong under way" ntb_wait "$vm" 60 \
		"[ \$(cat /sys/kernel/debug/ntb_pingpong/$(ntb_pci "$vm")/count) -gt 5 ]"
done
for vm in lender borrower1; do
	a=$(count "$vm")
	sleep 3
	b=$(count "$vm")
	expect "$vm: counter rose from $a to $b in 3 s" test "$b" -gt "$a"
done
