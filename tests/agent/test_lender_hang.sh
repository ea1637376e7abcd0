#!/bin/bash
# One lender that never answers holds up no other lender's borrower work (docs/agent-protocol.md, "Peer
# sessions": the borrower's one worker per lender). Two lenders, one borrower (rig_up --lenders 2); borrower1's agent has both as peers, with
# call_timeout_ms 10000 (its kernel's upcall_timeout_ms raised to 15000 to stay above it), so each call
# to a lender that accepts and never answers hangs 10 s; the lenders' leases are 6 s (renewed every 2 s).
# lender2's agent is stopped with SIGSTOP (its kernel still accepts TCP connections: a hung peer, not a
# refused one), and borrower1's agent is seen timing out on it. Then:
#  (a) a VFIO user of borrower1 (farpass-client vfio-borrow, as QEMU) borrows the lender's NVMe over
#      link 1 while lender2 hangs: its bus-master enable (the BORROW upcall, answered by borrower1's agent
#      with the lender) succeeds, and the lender lists the borrow;
#  (b) for 20 s (more than three lease times) the lender keeps the lease: its expiry in the lender's
#      state.json moves on at every 6 s look, the lender lists the borrow by borrower1 throughout, no
#      lease ended on the lender and none lost on borrower1, while borrower1's calls to lender2 go on
#      timing out (the hang lasted);
#  (c) lender2's agent runs again (SIGCONT): borrower1's agent opens a session to it again; the VFIO user
#      returns the device (RETURN) and the lender has it free; borrower1's kernel log is clean.
# Against the borrower before its per-lender workers (one thread for all lenders; reasoned, not run):
# its loop sat 10 s in each call to lender2, so (b) would fail at once (a renewal every 10 s or more for
# a 6 s lease); (a) would pass, late (its BORROW waiting up to 10 s for the loop).
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/../kernel/kernel-lib.sh"
. "$(dirname "$0")/agent-lib.sh"
ag_check_built && fp_check_built || exit

rig_up --borrowers 1 --lenders 2
B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000d1a9
ag_remote_mdev $B $U '"lease_ms": 6000' '"call_timeout_ms": 10000'
expect "$B: the kernel's upcall deadline above the agent's call timeout (15 s)" \
	rig_run $B -- "echo 15000 > /sys/module/farpass/parameters/upcall_timeout_ms"

# lender2's timeouts logged by borrower1's agent: its polls of lender2 fail after 10 s each.
# (A hung session's call says "no answer within 10000 ms", a hung reconnect's TLS handshake "no answer in time".)
hung() { ag_log $B | grep -c "cannot list lender2's devices: .*no answer" || true; }
expiry() { rig_run lender -- "jq -r '.devices[] | select(.pci == \"$LENDER_NVME\") | .lease.expires_at_ms' /var/lib/farpass/state.json"; }

echo "# lender2's agent stops answering"
expect "lender2: SIGSTOP its agent" rig_run lender2 -- "kill -STOP \$(cat $RIGDIR/lender2/agent.pid)"
expect "$B: its agent's calls to lender2 time out (10 s each)" \
	ag_wait_log $B 30 "cannot list lender2's devices: .*no answer"
hung0=$(hung)

echo "# (a) a VFIO user borrows the lender's NVMe"
id=$(ag_ctl $B --json status | jq -r '.remote_devices[] | select(.lender == "lender") | .id')
rig_run $B -- "rm -f $RIGDIR/$B/go; setsid $FP_CLIENT vfio-borrow $U --id $id --hold-until $RIGDIR/$B/go --then off \
	</dev/null >$RIGDIR/$B/borrow.out 2>&1 &"
expect "(a) $B: the VFIO user's BORROW returned" ntb_wait $B 30 "grep -q '^borrowed ' $RIGDIR/$B/borrow.out"
out=$(rig_run $B -- "cat $RIGDIR/$B/borrow.out")
echo "$out"
expect_eq "(a) $B: the BORROW succeeded" "$(fp_field "$out" bm_on)" ok
ag_log $B | grep -E "upcall 1 on id|borrowed lender/" | tail -3
expect_eq "(a) lender: borrowed by $B" "$(ag_ctl lender --json borrows | jq -r '.leases[0].borrower')" $B

echo "# (b) the lender's lease is renewed on time all along"
prev=$(expiry)
for look in 1 2 3; do
	sleep 6 # one lease time
	now=$(expiry)
	echo "look $look: the lease expires at $now ms (was $prev)"
	expect "(b) look $look: lender: the lease's expiry moved on (renewed)" test "$now" -gt "$prev"
	expect_eq "(b) look $look: lender: still borrowed by $B" \
		"$(ag_ctl lender --json borrows | jq -r '.leases[0].borrower')" $B
	prev=$now
done
expect "(b) lender: no lease ended" bash -c "! grep -Eq 'lease of .* (expired|ended)' $RIGDIR/lender/agent.log"
expect "(b) $B: no lease lost" bash -c "! grep -q 'is lost' $RIGDIR/$B/agent.log"
echo "lender2 timeouts on $B: $hung0 before the borrow, $(hung) now"
expect "(b) $B: lender2 still hung meanwhile (more of its calls timed out)" test "$(hung)" -gt "$hung0"

echo "# (c) lender2's agent runs again; the device is returned"
opened=$(ag_log $B | grep -c "session to lender2 (.*) open: " || true)
expect "lender2: SIGCONT its agent" rig_run lender2 -- "kill -CONT \$(cat $RIGDIR/lender2/agent.pid)"
expect "(c) $B: a session to lender2 opens again" ag_wait_count $B 30 "session to lender2 \(.*\) open: " "$opened"
touch "$RIGDIR/$B/go"
expect "(c) $B: the VFIO user returned the device (bus master off) and closed" \
	ntb_wait $B 60 "grep -q '^ok .* then=ok' $RIGDIR/$B/borrow.out"
ag_expect_returned $B 20 "(c)"
expect_klog_clean $B
