#!/bin/bash
# The interrupt bridge: eventfds handed to the lender's farpass (IRQ_BRIDGE) are relayed, from their
# wake-up and with no userspace in the path, into the link's interrupt mailbox in the borrower's memory
# (through the lender's outbound DMA window) plus one doorbell; the borrower drains the ring in its
# doorbell interrupt. No target is attached on the borrower here: deliveries are counted as dropped,
# and <link>/irq lists every (slot, vector) that arrived since the last "clear".
#  (a) IRQ_BRIDGE errors: slot or vector range out of bounds EINVAL, not an eventfd EBADF, unknown NTB
#      ENODEV; a failed call leaves no hook;
#  (b) 8 vectors of slot 3 signalled twice each: exactly those vectors arrive, 16 deliveries, nothing bad;
#  (c) a burst larger than the ring (256 entries) while the borrower does not drain ("hold"): 64 vectors
#      x 10 = 640 signals, 256 in the ring and 384 into the pending bitmap (overflows); after "release"
#      every one of the 64 vectors arrived (256 + 64 deliveries), none other;
#  (d) F_CLEAR unhooks the slot; the fds were closed by the client long before (the kernel holds them);
#  (f) a broken lender writes 40 garbage HEADs into the mailbox, each followed by a doorbell (its
#      producer stopped writing HEAD: the borrower held, the ring filled, a garbage HEAD, released):
#      the borrower delivers every vector (32 slots x 2048: 65536) fewer than 10 times, not once per
#      garbage HEAD (resyncs are owed and rate-limited, outside the hard irq); garbage HEADs are counted
#      bad;
#  (e) link down: signals are not posted (counted); the borrower's farpass comes back, the mailboxes
#      restart and vectors arrive again; unload with hooks in place leaves no warning:
#      both kernel logs have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built

rig_up --borrowers 1
B=borrower1
LNTB=$(ntb_pci lender)
IRQF=$FP_DBG/$(ntb_pci $B)/irq
bridge() { fp_client lender irq-bridge --ntb $LNTB "$@"; }
handshake() {
	local vm
	for vm in lender $B; do
		expect "$vm: handshake ok" ntb_wait $vm 30 "grep -qx 'handshake ok' $FP_DBG/$(ntb_pci $vm)/link"
	done
}
seen() { rig_run $B -- "grep '^seen' $IRQF | tr '\n' ';'"; }
# Wait until the borrower's dropped count reaches $1.
dropped_reaches() { ntb_wait $B 30 "[ \$(awk '\$1 == \"irq_dropped\" { print \$2 }' $FP_DBG/counters) -ge $1 ]"; }

fp_load lender
fp_load $B
handshake
rig_run $B -- "cat $IRQF"

echo "# (a) errors"
expect "slot 16: EINVAL" bridge --slot 16 --count 1 --expect EINVAL
expect "vectors past 2048: EINVAL" bridge --slot 0 --start 2047 --count 2 --expect EINVAL
expect "not an eventfd: EBADF" bridge --slot 0 --count 3 --bad-fd --expect EBADF
expect "unknown NTB: ENODEV" bridge --ntb 0000:00:1f.6 --slot 0 --count 1 --expect ENODEV
expect_eq "lender: no hook left by the failed calls" "$(fp_counter lender irq_hooks)" 0

echo "# (b) 8 vectors, twice each"
expect "lender: slot 3 vectors 0-7 signalled twice" bridge --slot 3 --start 0 --count 8 --signal 2
expect_eq "lender: 8 hooks" "$(fp_counter lender irq_hooks)" 8
expect_eq "lender: 16 posted" "$(fp_counter lender irq_posted)" 16
expect "borrower: 16 arrived" dropped_reaches 16
sleep 2
expect_eq "borrower: exactly slot 3 vectors 0-7" "$(seen)" "seen 3 0-7;"
expect_eq "borrower: exactly 16 (no target: dropped)" "$(fp_counter $B irq_dropped)" 16
expect_eq "borrower: none delivered to a target" "$(fp_counter $B irq_delivered)" 0
expect_eq "borrower: no bad entry" "$(fp_counter $B irq_bad)" 0

echo "# (c) a burst larger than the ring, not drained meanwhile"
rig_run $B -- "echo clear > $IRQF; echo hold > $IRQF"
expect "lender: slot 5 vectors 100-163 signalled 10 times" bridge --slot 5 --start 100 --count 64 --signal 10
expect_eq "lender: 656 posted" "$(fp_counter lender irq_posted)" 656
expect_eq "lender: 384 of them overflowed into the bitmap" "$(fp_counter lender irq_overflows)" 384
expect_eq "borrower: nothing arrived while held" "$(fp_counter $B irq_dropped)" 16
rig_run $B -- "echo release > $IRQF; cat $IRQF"
expect "borrower: the ring and the bitmap arrived" dropped_reaches $((16 + 256 + 64))
expect_eq "borrower: every vector of the burst, none other" "$(seen)" "seen 5 100-163;"
expect_eq "borrower: 256 + 64 deliveries" "$(fp_counter $B irq_dropped)" $((16 + 256 + 64))
expect_eq "borrower: no bad entry" "$(fp_counter $B irq_bad)" 0
expect "borrower: after the overflow the ring works again" \
	bridge --slot 5 --start 100 --count 2 --signal 1
expect "borrower: 2 more arrived" dropped_reaches $((16 + 256 + 64 + 2))

echo "# (d) F_CLEAR"
expect_eq "lender: 8 + 64 hooks (2 of them replaced)" "$(fp_counter lender irq_hooks)" 72
expect "lender: clear slot 5" bridge --slot 5 --clear
expect_eq "lender: slot 3's 8 hooks left" "$(fp_counter lender irq_hooks)" 8

echo "# (f) garbage HEADs from the lender"
rig_run $B -- "echo clear > $IRQF; echo hold > $IRQF"
expect "lender: slot 6 vector 0 signalled 300 times, the borrower holding (the ring fills)" \
	bridge --slot 6 --count 1 --signal 300
ring=$(($(fp_client lender window --ntb $LNTB --mw 1 | sed -n 's/.*size=\(0x[0-9a-f]*\).*/\1/p') - 0x10000))
expect "lender: a garbage HEAD" fp_client lender window-rw --ntb $LNTB --mw 1 --offset $ring --write 0x3fff0000
dropped=$(fp_counter $B irq_dropped)
bad=$(fp_counter $B irq_bad)
rig_run $B -- "echo release > $IRQF"
expect "lender: 40 more garbage HEADs, each with a doorbell" fp_client lender mbox-garbage --ntb $LNTB --slot 6
sleep 3
rig_run $B -- "cat $IRQF | grep -v ^seen"
all=$(( ($(fp_counter $B irq_dropped) - dropped) / 65536 ))
expect "borrower: every vector delivered fewer than 10 times for 41 garbage HEADs: $all" test "$all" -lt 10
expect "borrower: garbage HEADs counted bad: $(($(fp_counter $B irq_bad) - bad))" \
	test $(($(fp_counter $B irq_bad) - bad)) -gt 0
expect_eq "lender: slot 6 cleared, slot 3's 8 hooks left" "$(fp_counter lender irq_hooks)" 8

echo "# (e) link down and up"
rig_run $B -- "rmmod farpass"
expect "lender: link down" ntb_wait lender 30 "grep -qx 'link down' $FP_DBG/$LNTB/link"
unposted=$(fp_counter lender irq_unposted)
expect "lender: slot 7 signalled with the link down" bridge --slot 7 --count 2 --signal 1
expect_eq "lender: 2 not posted" "$(fp_counter lender irq_unposted)" $((unposted + 2))
fp_load $B
handshake
expect "lender: slot 2 vectors 0-3 signalled" bridge --slot 2 --count 4 --signal 1
expect "borrower: 4 arrived" dropped_reaches 4
sleep 2
expect_eq "borrower: exactly slot 2 vectors 0-3" "$(seen)" "seen 2 0-3;"
expect_eq "borrower: exactly 4" "$(fp_counter $B irq_dropped)" 4
expect_eq "borrower: no bad entry" "$(fp_counter $B irq_bad)" 0
expect "borrower: farpass unloads" rig_run $B --timeout 20 -- "rmmod farpass"
expect "lender: farpass unloads with hooks in place" rig_run lender --timeout 20 -- "rmmod farpass"
for vm in lender $B; do
	expect_klog_clean $vm
done
