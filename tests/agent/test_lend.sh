#!/bin/bash
# Lending and borrowing through the agents, lender and borrower1:
#  (a) the lender's agent lends its emulated NVMe (farpassctl lend: vfio-pci); borrower1's farpassctl
#      list shows it with its lender (text and --json); borrower1's agent announces it to farpass.ko
#      in the lender's slot of it, whose mdev type (named after the lender and the slot) then describes
#      the NVMe and has an instance available; a VFIO user of an instance (farpass-client vfio-cfg, as QEMU) gets the real NVMe's config
#      space, borrows it (bus master) and resets it, all through the agents' upcall service;
#      unlend empties the type again, lending it again fills it under the same id and slot;
#  (b) a lease borrower1's agent finds in its borrower.json at start, of a device its kernel has no borrow
#      of (DMA_LAYOUT: ENODATA), is released: logged, and the lender has no borrows left;
#  (c) a RETURN whose lease.release the lender's agent does not answer (stopped with SIGSTOP while a
#      VFIO user holds the borrow): borrower1's agent logs that it goes on releasing, and its answer
#      does not make farpass.ko take the instance for dead (the command register reads back with bus
#      master off); once the lender's agent runs again the release is confirmed in the background
#      (logged) and the lender has no borrows;
#  (f) the link (through a relay on L0) cut while a VFIO user holds a borrow: cut for 2 s, the lease is
#      kept (the lender lists the borrow after the link is back, no lease ended); cut for longer than a
#      lease (lease_ms, read from the lender), the lender ends the lease although borrower1's agent
#      renews it over the management network: logged within lease_ms + 5 s of the cut ("ended, its link
#      down for N ms", N >= lease_ms), no borrows left; borrower1's agent then logs the lease lost and
#      the instance revoked (REVOKE_DEVICE: farpass.ko counts it); the VFIO user's request eventfd fired
#      (QEMU would unplug the device) and its error eventfd did not (QEMU would stop the VM), and its
#      accesses failed from then on (bus master off: ENODEV); with the link back, its close leaves no
#      upcall pending or timed out, and the instance goes;
#  (d) a peer whose certificate is from another CA is refused by TLS (no answer) and the lender logs it;
#  (e) borrower1's kernel log has no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
# Link 1 through a relay on L0, for (f)'s cuts.
export RIG_LINK_RELAY=1
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/../kernel/kernel-lib.sh"
. "$(dirname "$0")/agent-lib.sh"
ag_check_built && fp_check_built || exit

rig_up --borrowers 1
B=borrower1
NTB=$(ntb_pci $B)
TYPES=/sys/class/mdev_bus/$NTB/mdev_supported_types
ag_pki
# (d)'s intruder: a certificate from another CA, which also trusts the cluster's, so it gets as far as
# showing its own certificate to the lender. Made now, long before its use: a certificate is valid from
# the second L0 made it, and an L1's clock runs up to ~1.5 s behind L0's (seen: "certificate is not yet
# valid" when it was used at once).
"$FARPASS_TOP/tests/make-pki.sh" ca "$RIGDIR/other-ca"
"$FARPASS_TOP/tests/make-pki.sh" host "$RIGDIR/other-ca" "$RIGDIR/$B/intruder-pki" $B
cat "$RIGDIR/ca/cacert.pem" >>"$RIGDIR/$B/intruder-pki/cacert.pem"
# farpass.ko on both ends, and the lender's NTB named for borrower1: leases have a data path (BAR window,
# link state), as in a cluster.
fp_load lender
fp_load $B

echo "# (a) lend, list, announce"
ag_lender_up ", \"peers\": [$(ag_peer_entry $B "$(ntb_pci lender 1)")]"
ag_config $B ", \"poll_ms\": 1000, \"peers\": [$(ag_peer_entry lender "$NTB")]"
expect "$B: farpass-agent starts" ag_start $B
out=$(ag_ctl $B list)
echo "$out"
expect "$B: farpassctl list shows the NVMe with its lender, not borrowed" \
	grep -Eq "^lender +$LENDER_NVME +1b36:0010 +0:[0-9]+[KM] +-$" <<<"$out"
json=$(ag_ctl $B --json list)
expect_eq "$B: --json list parses: host, pci, borrower" \
	"$(jq -r '.devices[] | "\(.host) \(.pci) \(.borrower)"' <<<"$json")" "lender $LENDER_NVME null"
expect_eq "... class, BAR 0 64-bit" "$(jq -r '.devices[0] | "\(.class) \(.bar_flags[0])"' <<<"$json")" "67586 2"
expect_eq "... nothing unreachable" "$(jq -c .unreachable <<<"$json")" "[]"
expect "$B: the agent announced it" ag_wait_log $B 20 "announced lender $LENDER_NVME \(id [0-9]+, slot [0-9]+\) on NTB $NTB"
id=$(ag_ctl $B --json status | jq -r '.remote_devices[0].id')
slot=$(ag_ctl $B --json status | jq -r '.remote_devices[0].slot')
expect_eq "$B: in the slot its lender lends it at (farpassctl list)" "$slot" "$(jq -r '.devices[0].irq_slot' <<<"$json")"
T=ntb_hw_epf-farpass-lender-$slot
echo "stable id $id, slot $slot, type $T"
expect "$B: the mdev type is on the NTB" ntb_wait $B 10 "test -d $TYPES/$T"
expect_eq "$B: its name names the lender and the slot" "$(rig_run $B -- "cat $TYPES/$T/name")" "lender slot $slot"
expect_eq "$B: its description the NVMe" "$(rig_run $B -- "cat $TYPES/$T/description")" \
	"lender 1b36:0010 ($LENDER_NVME): class 010802, via NTB $NTB, farpass id $id"
expect_eq "$B: one instance available" "$(rig_run $B -- "cat $TYPES/$T/available_instances")" 1
ag_ctl $B status
expect "$B: status --json shows it announced" \
	jq -e ".remote_devices[0] | .announced and .lender == \"lender\" and .ntb == \"$NTB\"" <<<"$(ag_ctl $B --json status)"

echo "# upcalls: a VFIO user of an instance (farpass-client as QEMU) is served through the agent"
U=8f7c3ab0-5c6e-4e41-9d3e-00000000a9e7
expect "$B: create an instance" rig_run $B -- "echo $U > $TYPES/$T/create"
out=$(fp_client $B vfio-cfg $U) || { echo "$out"; ag_log $B | tail -20; false; }
echo "$out"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$out"; }
expect_eq "vendor, read on the lender's NVMe through the agents" "$(field vendor)" 1b36
expect_eq "device" "$(field device)" 0010
expect_eq "bus master on: BORROW -> lease.acquire" "$(field cmd_on)" "0x6(ok)"
expect_eq "reset: RESET -> device.reset on the lender" "$(field reset)" ok
expect "$B: the agent borrowed and gave back" ag_wait_log $B 5 "gave back lender/$LENDER_NVME"
ag_log $B | grep -E "borrowed|gave back"
expect_eq "lender: no borrows left" "$(ag_ctl lender borrows)" "no borrows"
expect_eq "$B: no upcall timed out" "$(fp_counter $B upcall_timeouts)" 0
expect "$B: remove the instance" rig_run $B -- "echo 1 > /sys/bus/mdev/devices/$U/remove"

echo "# unlend: the type is empty"
expect "lender: farpassctl unlend" ag_ctl lender unlend $LENDER_NVME
expect "$B: the agent withdraws it" ag_wait_log $B 20 "withdrew lender $LENDER_NVME"
expect "$B: ... the type stays, empty" ntb_wait $B 10 \
	"grep -q '^empty: lender lender lends no device at slot $slot ' $TYPES/$T/description && grep -qx 0 $TYPES/$T/available_instances"
expect "lender: lend it again" ag_ctl lender lend $LENDER_NVME
expect "$B: ... announced again in its slot, under the same id" ntb_wait $B 20 \
	"grep -q 'farpass id $id\$' $TYPES/$T/description && grep -qx 1 $TYPES/$T/available_instances"

echo "# (b) a lease without a borrow is released"
expect "$B: stop the agent" ag_stop $B
lease=$(ag_peer $B call lease.acquire "'{\"pci\": \"$LENDER_NVME\"}'" | jq -r .lease)
expect_eq "lender: $B holds a lease (taken by fp-peer as $B)" "$(ag_ctl lender --json borrows | jq -r '.leases[0].borrower')" $B
expect "$B: ... put in borrower.json, as if its agent had held it when it stopped" rig_run $B -- \
	"jq --arg l $lease '(.devices[] | select(.pci == \"$LENDER_NVME\")).lease = {id: \$l, lease_ms: 10000, releasing: false}' \
	/var/lib/farpass/borrower.json >/tmp/borrower.json && mv /tmp/borrower.json /var/lib/farpass/borrower.json"
expect "$B: farpass-agent starts again" ag_start $B
expect "$B: it releases the lease its kernel has no borrow of" \
	ag_wait_log $B 20 "lender/$LENDER_NVME is leased but not borrowed here \(.*\); releasing the lease"
ag_log $B | grep -E "leased but not borrowed|gave back" | tail -2
expect "lender: no borrows left" ntb_wait lender 20 "test \"\$($FP_CTL borrows)\" = 'no borrows'"

# A VFIO user (farpass-client vfio-cfg, as QEMU) of a new instance borrows the NVMe and holds it until
# $RIGDIR/$B/go exists; gave: the agent's give-backs before.
hold_borrow() {
	local borrowed
	borrowed=$(ag_log $B | grep -c "borrowed lender/$LENDER_NVME" || true)
	gave=$(ag_log $B | grep -c "gave back lender/$LENDER_NVME" || true)
	expect "$B: create an instance" rig_run $B -- "echo $U > $TYPES/$T/create"
	rig_run $B -- "rm -f $RIGDIR/$B/go; setsid $FP_CLIENT vfio-cfg $U --before-return $RIGDIR/$B/go \
		</dev/null >$RIGDIR/$B/vfio-cfg.out 2>&1 &"
	expect "$B: a VFIO user borrows the NVMe and holds it" ag_wait_count $B 20 "borrowed lender/$LENDER_NVME" "$borrowed"
}

echo "# (c) a RETURN the lender does not confirm"
hold_borrow
expect "lender: its agent stops answering (SIGSTOP)" rig_run lender -- "kill -STOP \$(cat $RIGDIR/lender/agent.pid)"
touch "$RIGDIR/$B/go"
expect "$B: the VFIO user's RETURN: the agent goes on releasing" \
	ag_wait_log $B 20 "releasing the lease on lender/$LENDER_NVME: .*; trying again in 1000 ms"
expect "lender: its agent runs again (SIGCONT)" rig_run lender -- "kill -CONT \$(cat $RIGDIR/lender/agent.pid)"
expect "$B: the release is confirmed in the background" ag_wait_count $B 30 "gave back lender/$LENDER_NVME" "$gave"
ag_log $B | grep -E "releasing the lease|gave back" | tail -3
expect "lender: no borrows left" ntb_wait lender 20 "test \"\$($FP_CTL borrows)\" = 'no borrows'"
expect "$B: the VFIO user is done" ntb_wait $B 60 "test -s $RIGDIR/$B/vfio-cfg.out"
expect "... its RETURN's answer (EINPROGRESS) did not make farpass.ko take the instance for dead: bus master reads off" \
	grep -q "cmd_off=0x2(ok)" "$RIGDIR/$B/vfio-cfg.out"
expect "$B: remove the instance" rig_run $B -- "echo 1 > /sys/bus/mdev/devices/$U/remove"

echo "# (f) link outages under a borrow"
lease_ms=$(ag_ctl lender --json status | jq -r .lease_ms)
hold_borrow
ended_before=$(ag_log lender | grep -c "lease of $LENDER_NVME by $B" || true)
rig_link_cut 1
expect "$B: link down" ntb_wait $B 30 "grep -qx 'link down' $FP_DBG/$NTB/link"
sleep 2
rig_link_restore 1
expect "$B: the link is back" ntb_wait $B 60 "grep -qx 'handshake ok' $FP_DBG/$NTB/link"
expect_eq "lender: a 2 s outage kept the lease" "$(ag_ctl lender --json borrows | jq -r '.leases[0].borrower')" $B
expect_eq "lender: ... and ended none (log)" "$(ag_log lender | grep -c "lease of $LENDER_NVME by $B" || true)" "$ended_before"
rig_link_cut 1
t_cut=$(date +%s.%N)
ended="lease of $LENDER_NVME by $B ended, its link down for ([0-9]+) ms: device unmapped, reset and free"
expect "lender: a longer outage ends the lease" ag_wait_log lender $((lease_ms / 1000 + 30)) "$ended"
t_end=$(_rig_elapsed "$t_cut")
down_ms=$(ag_log lender | sed -nE "s/.*$ended.*/\1/p" | tail -n1)
echo "lease ended $t_end s after the cut (lease $lease_ms ms; the lender saw the link down for $down_ms ms)"
expect "... once the link was down for the lease time: $down_ms ms" test "$down_ms" -ge "$lease_ms"
expect "... within lease_ms + 5 s of the cut: $t_end s" awk -v t="$t_end" -v b=$((lease_ms / 1000 + 5)) 'BEGIN { exit !(t <= b) }'
expect_eq "lender: no borrows left" "$(ag_ctl lender borrows)" "no borrows"
expect "$B: its agent finds the lease lost and revokes the instance" ag_wait_log $B 30 \
	"lease on lender/$LENDER_NVME is lost: .*; its instance revoked: the VFIO user is asked to release it"
expect_eq "$B: farpass.ko revoked it (counter)" "$(fp_counter $B revoked)" 1
rig_link_restore 1
expect "$B: the link is back" ntb_wait $B 60 "grep -qx 'handshake ok' $FP_DBG/$NTB/link"
timeouts=$(fp_counter $B upcall_timeouts)
touch "$RIGDIR/$B/go"
expect "$B: the VFIO user is done" ntb_wait $B 60 "test -s $RIGDIR/$B/vfio-cfg.out"
sed "s/^/    vfio-cfg> /" "$RIGDIR/$B/vfio-cfg.out"
expect "$B: ... asked to release the device (request eventfd), not told of an error (error eventfd)" \
	grep -q "err_irq=0 req_irq=1" "$RIGDIR/$B/vfio-cfg.out"
expect "$B: ... its accesses failed after the revoke (bus master off: ENODEV)" \
	grep -q "cmd_off=0xffff(ENODEV)" "$RIGDIR/$B/vfio-cfg.out"
expect "$B: its close (RETURN) left no upcall pending" ntb_wait $B 10 "grep -qx 'upcalls_pending 0' $FP_DBG/counters"
expect_eq "$B: ... nor timed out" "$(fp_counter $B upcall_timeouts)" "$timeouts"
expect "$B: remove the instance" rig_run $B -- "echo 1 > /sys/bus/mdev/devices/$U/remove"

echo "# (d) a certificate from another CA"
set +e
out=$(rig_run $B --timeout 60 -- "$FP_PEER --pki $RIGDIR/$B/intruder-pki --host $B --lender lender \
	--address $(rig_vm_ip lender):$AG_PORT call device.list")
rc=$?
set -e
echo "$out"
expect_eq "a peer with another CA's certificate gets no answer (exit 1)" "$rc" 1
expect "... only TLS's alert" grep -q '"message":"TLS: tlsv1 alert unknown ca"' <<<"$out"
expect "lender: the rejection is logged with the peer's address" \
	ag_wait_log lender 10 "10\.99\.0\.2:[0-9]+: rejected: certificate refused: .*not issued by this cluster's CA.*closing"
ag_log lender | grep rejected
expect "the cluster's certificate still works" ag_peer $B call device.list
expect "lender: no crash" rig_run lender -- "kill -0 \$(cat $RIGDIR/lender/agent.pid)"
expect_klog_clean $B
