#!/bin/bash
# Ownership and leases, lender and two borrowers (tests-only peer clients, fp-peer, acting as their
# agents: acquire, then heartbeat):
#  (c) borrower1 holds a lease on the lender's NVMe; borrower2's lease.acquire gets EBUSY (code 11,
#      errno 16) naming borrower1; borrower2 cannot renew or release borrower1's lease with its id
#      (ENOENT), nor claim to be borrower1 in hello (its certificate names borrower2: EACCES); the
#      lender's list and borrows show borrower1;
#  (e) restarting the lender's agent keeps the lease and the vfio-pci binding (state dir);
#  (d) borrower1 dies (its VM is killed): within lease time + slack the lender expires the lease,
#      resets the device (logged) and shows it free; the NVMe is still on vfio-pci and usable: borrower2
#      borrows it and reads its config space through the lender's VFIO.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/../kernel/kernel-lib.sh"
. "$(dirname "$0")/agent-lib.sh"
ag_check_built
LEASE_MS=6000

RIG_NO_NTB=1 rig_up --borrowers 2 --borrower-mem 1024 --lender-mem 1024
ag_pki
ag_lender_up ", \"lease_ms\": $LEASE_MS, \"peers\": [$(ag_peer_entry borrower1), $(ag_peer_entry borrower2)]"

echo "# (c) one borrower at a time"
rig_run borrower1 -- "setsid $FP_PEER --pki $RIGDIR/borrower1/pki --host borrower1 --lender lender \
	--address $(rig_vm_ip lender):$AG_PORT hold $LENDER_NVME </dev/null >$RIGDIR/borrower1/hold.log 2>&1 &"
expect "borrower1 acquires a lease" ntb_wait borrower1 20 "grep -q '\"lease_ms\":$LEASE_MS' $RIGDIR/borrower1/hold.log"
head -c 300 "$RIGDIR/borrower1/hold.log"
echo
set +e
out=$(ag_peer borrower2 call lease.acquire "'{\"pci\": \"$LENDER_NVME\"}'")
rc=$?
set -e
echo "$out"
expect_eq "borrower2's acquire fails" "$rc" 1
expect_eq "... with EBUSY naming borrower1" "$(jq -c .error <<<"$out")" \
	"{\"code\":11,\"errno\":16,\"message\":\"$LENDER_NVME is borrowed by borrower1\"}"
lease1=$(head -1 "$RIGDIR/borrower1/hold.log" | jq -r .lease)
for method in lease.renew lease.release; do
	set +e
	out=$(ag_peer borrower2 call $method "'{\"pci\": \"$LENDER_NVME\", \"lease\": \"$lease1\"}'")
	set -e
	echo "$out"
	expect_eq "borrower2's $method of borrower1's lease: ENOENT, no lease of borrower2" "$(jq -c .error <<<"$out")" \
		"{\"code\":12,\"errno\":2,\"message\":\"no live lease $lease1 of borrower2 on $LENDER_NVME\"}"
done
set +e
out=$(ag_peer borrower2 --claim borrower1 call lease.acquire "'{\"pci\": \"$LENDER_NVME\"}'")
set -e
echo "$out"
expect_eq "borrower2 claiming to be borrower1: EACCES" "$(jq -r '.error | "\(.code) \(.errno) \(.message)"' <<<"$out")" \
	'6 13 hello names host "borrower1", but the peer'"'"'s certificate is for "borrower2"'
expect_eq "lender: list shows borrower1" "$(ag_ctl lender --json list | jq -r '.devices[0].borrower')" borrower1
ag_ctl lender borrows
expect "borrower1's heartbeat keeps the lease past its lease time" \
	ntb_wait borrower1 $((LEASE_MS / 1000 + 10)) "test \$(grep -c renewed $RIGDIR/borrower1/hold.log) -ge 4"
expect_eq "... still borrowed by borrower1" "$(ag_ctl lender --json borrows | jq -r '.leases[0].borrower')" borrower1

echo "# (e) the lender's agent restarts"
expect "lender: stop the agent (SIGTERM)" ag_stop lender
expect_eq "lender: the NVMe stays on vfio-pci meanwhile" \
	"$(rig_run lender -- "basename \$(readlink /sys/bus/pci/devices/$LENDER_NVME/driver)")" vfio-pci
expect "lender: start it again" ag_start lender
expect "lender: it restored the device with its lease" ag_wait_log lender 5 "restored $LENDER_NVME borrowed by borrower1"
expect_eq "lender: borrows still shows borrower1" "$(ag_ctl lender --json borrows | jq -r '.leases[0].borrower')" borrower1
n=$(grep -c renewed "$RIGDIR/borrower1/hold.log")
expect "borrower1's heartbeat goes on with the same lease" \
	ntb_wait borrower1 $((LEASE_MS / 1000 + 10)) "test \$(grep -c renewed $RIGDIR/borrower1/hold.log) -ge $((n + 2))"
expect "... and no renew was refused" rig_run borrower1 -- "! grep -q error $RIGDIR/borrower1/hold.log"

echo "# (d) the borrower dies: the lease expires"
rig_kill borrower1
t0=$SECONDS
expect "lender: the lease expires within lease time + 10 s" \
	ag_wait_log lender $((LEASE_MS / 1000 + 10)) "lease of $LENDER_NVME by borrower1 expired: device unmapped, reset and free"
echo "expired $((SECONDS - t0)) s after the kill (lease $LEASE_MS ms)"
expect_eq "lender: no borrows" "$(ag_ctl lender borrows)" "no borrows"
json=$(ag_ctl lender --json list)
expect_eq "lender: list shows it free" "$(jq -r '.devices[0] | "\(.pci) \(.borrower)"' <<<"$json")" "$LENDER_NVME null"
# Neither borrower runs an agent here: borrower2 refuses the connection, dead borrower1 times out (2 s).
expect_eq "... and the borrowers as unreachable, without wedging the lender's agent" \
	"$(jq -r '[.unreachable[].host] | join(" ")' <<<"$json")" "borrower1 borrower2"
expect_eq "lender: the NVMe is still bound to vfio-pci" \
	"$(rig_run lender -- "basename \$(readlink /sys/bus/pci/devices/$LENDER_NVME/driver)")" vfio-pci
# Held with a heartbeat: each call is a TLS handshake in a TCG guest, and three in a row can outlast
# the lease under load.
rig_run borrower2 -- "setsid $FP_PEER --pki $RIGDIR/borrower2/pki --host borrower2 --lender lender \
	--address $(rig_vm_ip lender):$AG_PORT hold $LENDER_NVME </dev/null >$RIGDIR/borrower2/hold.log 2>&1 &
echo \$! >$RIGDIR/borrower2/hold.pid"
expect "borrower2 can borrow it now" ntb_wait borrower2 20 "grep -q '\"lease_ms\":$LEASE_MS' $RIGDIR/borrower2/hold.log"
lease=$(head -1 "$RIGDIR/borrower2/hold.log" | jq -r .lease)
vendor=$(ag_peer borrower2 call device.read_config \
	"'{\"pci\": \"$LENDER_NVME\", \"lease\": \"$lease\", \"offset\": 0, \"width\": 4}'" | jq -r .value)
expect_eq "... and read its IDs through the lender's VFIO (1b36:0010)" "$(printf '%08x' "$vendor")" 00101b36
rig_run borrower2 -- "kill \$(cat $RIGDIR/borrower2/hold.pid)"
expect "borrower2 gives it back" ag_peer borrower2 call lease.release "'{\"pci\": \"$LENDER_NVME\", \"lease\": \"$lease\"}'"
expect "lender: the agent is still running" rig_run lender -- "kill -0 \$(cat $RIGDIR/lender/agent.pid)"
