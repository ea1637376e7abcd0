#!/bin/bash
# `make demo`: boots the rig and shows the emulated NTB fabric at work between a lender and a borrower
# host, ending with a summary. (The remote-NVMe-in-a-libvirt-guest part arrives with the kernel module,
# the agent and the libvirt hooks.)
set -euo pipefail
export RIGDIR=${RIGDIR:-$(cd "$(dirname "$0")/.." && pwd)/rig-out/demo}
. "$(dirname "$0")/rig/rig.sh"
. "$(dirname "$0")/rig/ntb-lib.sh"

summary=()
say() { printf '\n### %s\n' "$*"; }
show() { rig_run "$1" -- "$2" | sed "s/^/    $1> /"; }

say "Booting the rig: a lender and a borrower L1 host (TCG, intel-iommu), joined by an emulated NTB"
rig_up --borrowers 1
summary+=("rig booted: $(tr '\n' ' ' <"$RIGDIR/boot-times.txt")(seconds)")

say "Each host sees its half of the NTB, driven by the upstream ntb_hw_epf driver"
for vm in lender borrower1; do
	ntb_load "$vm" ntb_hw_epf
	show "$vm" "lspci -nnk -d 104c:b00d | head -3"
done

say "An Ethernet link over the NTB's memory windows and doorbells (ntb_transport + ntb_netdev)"
for vm in lender borrower1; do
	ntb_net_up "$vm"
done
ntb_net_carrier borrower1
show borrower1 "ping -c 3 -W 5 ${NTB_NET_IP[lender]}"
summary+=("borrower pinged the lender across the NTB")

say "The lender's kernel log: the transport's queue pair over the NTB"
show lender "dmesg | grep -iE 'ntb' | tail -4"

say "Summary"
printf '  - %s\n' "${summary[@]}"
