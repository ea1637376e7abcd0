#!/bin/bash
# Isolation (issue 13): what a broken or hostile peer, agent or VFIO user must not reach, on the lender
# and borrower1 (farpass-client as the borrower's agent and as QEMU).
#  (1) ANNOUNCE refuses BAR slots outside the link's BAR window: an offset whose end wraps past 2^64
#      (ERANGE), a slot on the window's last page (the mailbox's ack area: ERANGE; the page before it is
#      accepted), one past the window (ERANGE); a slot overlapping another announced device's
#      (EADDRINUSE); a withdrawn device's slot can be announced again.
# Last: no warning or oops on either host.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built

rig_up --borrowers 1
B=borrower1
NTB=$(ntb_pci $B)
LNTB=$(ntb_pci lender)
fp_load lender
fp_load $B
expect "borrower: farpass link up" ntb_wait $B 60 "grep -qx 'link up' $FP_DBG/$NTB/link"
ann() { fp_client $B announce --lender lender --ntb "$NTB" "$@"; }

echo "# (1) BAR slots at ANNOUNCE"
wsize=$(rig_run $B -- "$FP_CLIENT window --ntb $NTB --mw 0" | sed -n 's/.*size=\(0x[0-9a-f]*\).*/\1/p')
echo "borrower: BAR window $wsize bytes"
expect "a 4 MiB BAR at 2^64 - 2 MiB (its end wraps to 2 MiB): ERANGE" \
	ann --id 1 --bar0 0x400000 --bar0-win 0xffffffffffe00000 --expect ERANGE
expect "a 4 KiB BAR on the window's last page (the mailbox's ack area): ERANGE" \
	ann --id 1 --bar0 0x1000 --bar0-win $((wsize - 0x1000)) --expect ERANGE
expect "a 4 KiB BAR on the page before it is accepted" ann --id 1 --bar0 0x1000 --bar0-win $((wsize - 0x2000))
expect "withdraw it" fp_client $B withdraw --id 1
expect "a 4 KiB BAR just past the window: ERANGE" ann --id 1 --bar0 0x1000 --bar0-win $wsize --expect ERANGE
expect "a 1 MiB BAR at 1 MiB" ann --id 1 --bar0 0x100000 --bar0-win 0x100000
expect "another device's BAR inside that slot: EADDRINUSE" ann --id 2 --bar0 0x4000 --bar0-win 0x1fc000 --expect EADDRINUSE
expect "withdraw the first" fp_client $B withdraw --id 1
expect "... then its slot is free" ann --id 2 --bar0 0x4000 --bar0-win 0x1fc000
expect "withdraw it" fp_client $B withdraw --id 2

echo "# the end"
expect "no warning or oops on $B" rig_run $B -- "! dmesg | grep -E 'WARNING|BUG|Oops'"
expect "no warning or oops on the lender" rig_run lender -- "! dmesg | grep -E 'WARNING|BUG|Oops'"
