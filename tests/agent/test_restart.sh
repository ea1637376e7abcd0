#!/bin/bash
# Restarts lose nothing (issue 14): both agents run under fp-supervise (systemd's file-descriptor store
# and Restart=on-failure, docs/agent-protocol.md "Restarts keep the device"); borrower1 borrows the
# lender's NVMe through them, and a VFIO client on borrower1 (farpass-client nvme-identify --mdev, as
# QEMU with a guest's NVMe driver) brings its admin queue up, identifies it and keeps it borrowed:
#  (a) the lender's agent is killed with SIGKILL and started again with the stored descriptors: it
#      logs that it adopted the NVMe's VFIO descriptors; the lease id (state.json on the lender,
#      borrower.json on borrower1) is the same; the controller is still enabled (CSTS.RDY 1, read on the
#      lender); Identify Controller and Namespace again on the same admin queue (a reset controller
#      would not answer) complete with the same data, DMAed into zeroed pages of the borrower, and an
#      MSI-X interrupt each;
#  (b) the same for borrower1's agent: killed, started again, same lease id on both sides, its new agent
#      renews it (the expiry in the lender's state.json moves on; no "lease is lost" logged), CSTS.RDY 1,
#      Identify again with the same data and interrupts;
#  (c) the client then returns the device: the lender tears the lease down as usual (bus master off,
#      the controller reset) after the adoption;
#  (d) both kernel logs have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/../kernel/kernel-lib.sh"
. "$(dirname "$0")/agent-lib.sh"
ag_check_built && fp_check_built || exit
export AG_FDSTORE=1

rig_up --borrowers 1
B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000c3e5
nsze=$(($(stat -c %s "$(rig_lender_nvme_img)") / 512))
# Leases of 30 s: a restored lease gets a full lease time from the restart, and the borrower must renew
# it within that. Beside another rig (2026-11-28, make check's other lane in its e2e suite) the
# borrower's renewals found the new lender agent not yet listening (a dozen refused connections), then
# its hello and device.list exceeded call_timeout_ms (1.5 s): the 10 s default lease expired first.
ag_remote_mdev $B $U '"lease_ms": 30000'

csts() { rig_mmio32 "$AG_LENDER" "$LENDER_NVME" 0 0x1c; }
# again N LABEL: the client's round N of Identify on the same admin queue, checked.
again() {
	local line
	rig_run $B -- "touch /tmp/again$1"
	expect "$2: the client's Identify round $1 finished" \
		ntb_wait $B 60 "grep -q '^again $1: ' /tmp/restart.out"
	line=$(rig_run $B -- "grep '^again $1: ' /tmp/restart.out")
	echo "$line"
	expect "$2: Identify Controller and Namespace again on the same admin queue: same VID, model, NSZE, status 0" \
		grep -q "^again $1: ok vid=0x1b36 nsze=$nsze " <<<"$line"
	expect "$2: ... each with its MSI-X interrupt (irqs >= 2)" test "$(fp_field "$line" irqs)" -ge 2
}
echo "# the client borrows the NVMe and identifies it"
rig_run $B -- "rm -f /tmp/again* /tmp/go; setsid $FP_CLIENT nvme-identify --mdev $U --nsze $nsze \
	--again-at /tmp/again1,/tmp/again2 --hold-until /tmp/go --return </dev/null >/tmp/restart.out 2>&1 &"
expect "$B: the client identified the NVMe through the mdev" \
	ntb_wait $B 120 "grep -q '^identified: ' /tmp/restart.out"
fp_expect_identify "$(rig_run $B -- "sed -n 's/^identified: /ok /p' /tmp/restart.out")" "$nsze"
ids=$(ag_lease_ids $B)
echo "lease ids (lender, borrower1): $ids"
expect "a lease is held on both sides" test "$(wc -w <<<"$ids")" = 2
expect_eq "lender: the controller is enabled (CSTS.RDY 1)" "$(($(csts) & 1))" 1

echo "# (a) the lender's agent is killed and restarted"
expect "lender: SIGKILL the agent; the supervisor starts it again" ag_kill_restart lender
expect "lender: it adopted the NVMe's VFIO descriptors" \
	ag_wait_log lender 10 "adopted $LENDER_NVME's VFIO descriptors: not reset"
ag_log lender | grep -E "fp-supervise|adopted|restored" | tail -6
expect_eq "(a) the same lease on both sides" "$(ag_lease_ids $B)" "$ids"
expect_eq "(a) lender: the controller is still enabled (CSTS.RDY 1)" "$(($(csts) & 1))" 1
again 1 "(a)"

echo "# (b) borrower1's agent is killed and restarted"
expect "$B: SIGKILL the agent; the supervisor starts it again" ag_kill_restart $B
ag_log $B | grep -E "fp-supervise" | tail -3
expect_eq "(b) the same lease on both sides" "$(ag_lease_ids $B)" "$ids"
expiry=$(rig_run lender -- "jq -r '.devices[0].lease.expires_at_ms' /var/lib/farpass/state.json")
expect "(b) $B's new agent renews the lease: its expiry on the lender moves on" \
	ntb_wait lender 20 "test \$(jq -r '.devices[0].lease.expires_at_ms' /var/lib/farpass/state.json) -gt $expiry"
expect "(b) $B: no lease lost" bash -c "! grep -q 'is lost' $RIGDIR/$B/agent.log"
expect_eq "(b) lender: the controller is still enabled (CSTS.RDY 1)" "$(($(csts) & 1))" 1
again 2 "(b)"

echo "# (c) the client returns the device"
rig_run $B -- "touch /tmp/go"
expect "$B: the client finished" ntb_wait $B 60 "grep -q '^ok \|^err ' /tmp/restart.out"
rig_run $B -- "cat /tmp/restart.out"
expect_eq "(c) bus master off: RETURN" "$(fp_field "$(rig_run $B -- "cat /tmp/restart.out")" return)" ok
ag_expect_returned $B 20 "(c)"
expect_klog_clean $B
expect_klog_clean lender
