#!/bin/bash
# Upstream ntb_transport + ntb_netdev: an Ethernet link over the NTB memory windows and doorbells
# carries a ping each way, and a payload larger than one MTU-sized ring entry.
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

rig_up --borrowers 1
declare -A ip=([lender]=10.98.0.1 [borrower1]=10.98.0.2)
# The netdev that ntb_netdev created.
NTBIF='for i in /sys/class/net/*; do [ "$(basename "$(readlink "$i/device/driver")")" = ntb_netdev ] && echo "${i##*/}"; done'

for vm in lender borrower1; do
	# Small inbound buffers: the default would be the whole 1 GiB MW2.
	ntb_load "$vm" ntb_transport max_mw_size=0x200000
	rig_run "$vm" -- "insmod $(rig_modules_dir)/ntb_netdev.ko"
	expect "$vm: ntb_netdev created an interface" rig_run "$vm" -- "$NTBIF | grep ."
	rig_run "$vm" -- "dev=\$($NTBIF); ip addr add ${ip[$vm]}/24 dev \$dev && ip link set \$dev up"
done
for vm in lender borrower1; do
	expect "$vm: carrier up" ntb_wait "$vm" 60 "[ \$(cat /sys/class/net/\$($NTBIF)/carrier) = 1 ]"
done
expect "lender pings borrower1 over the NTB" rig_run lender -- "ping -c 3 -W 5 ${ip[borrower1]}"
expect "borrower1 pings lender over the NTB" rig_run borrower1 -- "ping -c 3 -W 5 ${ip[lender]}"
expect "8000-byte ping (fragmented) crosses" rig_run borrower1 -- "ping -c 2 -W 5 -s 8000 ${ip[lender]}"
