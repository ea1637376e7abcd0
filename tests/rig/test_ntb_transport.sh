#!/bin/bash
# Upstream ntb_transport + ntb_netdev: an Ethernet link over the NTB memory windows and doorbells
# carries a ping each way, and a payload larger than one MTU-sized ring entry.
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

rig_up --borrowers 1
for vm in lender borrower1; do
	expect "$vm: ntb_netdev interface addressed and up" ntb_net_up "$vm"
done
for vm in lender borrower1; do
	expect "$vm: carrier up" ntb_net_carrier "$vm"
done
expect "lender pings borrower1 over the NTB" rig_run lender -- "ping -c 3 -W 5 ${NTB_NET_IP[borrower1]}"
expect "borrower1 pings lender over the NTB" rig_run borrower1 -- "ping -c 3 -W 5 ${NTB_NET_IP[lender]}"
expect "8000-byte ping (fragmented) crosses" rig_run borrower1 -- "ping -c 2 -W 5 -s 8000 ${NTB_NET_IP[lender]}"
