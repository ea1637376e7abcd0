#!/bin/bash
# Scenarios 1, 4 and 2 of issue 15, one after the other under one running guest: borrower1's 256 MiB L2
# guest writes the lender's NVMe (the farpass mdev behind a PCIe root port) with fio, each fault coming
# once it has written REL_FAULT_AFTER_KB of that scenario's 4 MiB sequential region (its own region and
# tag); link 1 (lender to borrower1) runs through a relay on L0 (RIG_LINK_RELAY, tests/rig/link-relay.cpp)
# that pulls the cable out and plugs it back. The lender's leases are 20 s. The guest's nvme command
# timeout is set for each scenario (the queue's io_timeout; admin commands 20 s): longer than the fault
# needs, as the promise needs (docs/mdev.md, "Link outages"), and short so the test takes less time.
# Checks:
#  (1) a link outage shorter than the lease: the cable out for OUTAGE_S (10) s, command timeout 20 s:
#   (1a) the guest was writing when the link went down: fio's progress (e2e_fio_progress_job) says N KiB
#        of its region had completed, more than none and less than all of it;
#   (1b) the outage reached both hosts: the lender and borrower1 logged link down, link up and the
#        handshake again, once the relay plugged the cable back;
#   (1c) the guest recovered by itself: its nvme driver logged a command timeout and then either brought
#        the controller up again or found the command's completion by polling (its interrupt lost in
#        the outage: both seen) (the time from the link's return to fio's progress growing again is
#        printed); fio's progress reached the whole region; the guest read it all back (fio verify-only,
#        direct I/O: each 4 KiB block holds the pattern of its tag and offset): no acknowledged write
#        was lost and no read returned stale data; on L0 the lender's backing file holds the region's
#        pattern and the canary written before the guest started is intact everywhere else;
#   (1d) the lease outlived the outage: the lender's agent logged no lease ending while the link was down;
#  (4) the lender's device reset under the guest (a function-level reset, its sysfs reset on the lender:
#      the controller loses its queues and every command in flight), command timeout 10 s:
#   (4a) the guest was writing when the device was reset (as 1a);
#   (4b) the reset reached the controller: the sysfs reset succeeded and the controller then read disabled
#        (CSTS.RDY 0) through its BAR on the lender;
#   (4c) the guest recovered by itself (as 1c: a command timeout logged, the controller up again, the
#        whole region written and read back, on L0 too, the canary intact outside the regions written),
#        and the controller read enabled again (CSTS.RDY 1) on the lender once fio's progress grew, which
#        only the guest's driver does;
#   (4d) nothing leaked per fault: the lender's and borrower1's resources (e2e_resources) after this
#        recovery are what they were after the short outage's;
#  (2) a link outage longer than the lease: the cable out until the guest lost the device, command
#      timeout 60 s (longer than the lease and its loss's notice: the device is taken from the guest by
#      the lease's end, not by its own driver giving up on a dead controller first, as (1) shows it does):
#   (2a) the guest was writing when the link went down (as 1a);
#   (2b) the lender reclaimed the device: its agent ended the lease for the link being down (logged "ended,
#        its link down for M ms", M >= lease_ms) within lease_ms + REL_RECLAIM_SLACK_S of the cut,
#        although borrower1's agent could renew over the management network; the lender then has no
#        borrow and the device free and reset;
#   (2c) the guest saw the device removed and kept running: borrower1's agent found the lease lost and
#        revoked the instance (the VFIO request eventfd, not the error eventfd: QEMU did not stop the VM),
#        the guest then had no nvme disk, and its script went on;
#   (2d) with the link back, QMP device_add of the same mdev gave the guest its disk again, and it read
#        back every block its fio had reported completed before the outage, and the whole regions of (1)
#        and (4); on L0 the lender's backing file holds those blocks, and the canary is intact outside
#        the three regions;
#  (e) the guest's script exited 0 and its QEMU powered off, which returned the device (the lender has it
#      free and reset); borrower1's agent logged a borrow and a give-back for each time the guest's driver
#      brought the controller up (its probe and each reset: a reset turns bus mastering off, which gives
#      the device back, and on again, which borrows it) but for the borrow (2) ended, which it logged lost,
#      in that order; the lender's and borrower1's resources are what they were before the guest started;
#  (f) the kernel logs of the lender and borrower1 have no warning, BUG, oops, RCU stall, hung task or DMAR
#      fault.
# Writes a row of the suite's summary table per scenario (rel-lib.sh).
set -euo pipefail
export RIG_LINK_RELAY=1
. "$(dirname "$0")/rel-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit
OUTAGE_S=${OUTAGE_S:-10}
# The expiry check's period (1 s), the teardown under a loaded TCG rig and L0's polling of the log.
REL_RECLAIM_SLACK_S=${REL_RECLAIM_SLACK_S:-5}
E2E_LENDER_AGENT_CFG='"lease_ms": 20000'
E2E_L2_APPEND='nvme_core.io_timeout=20 nvme_core.admin_timeout=20'
B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2f4
e2e_remote_up $B $U 1024
IMG=$(rig_lender_nvme_img)
lease_ms=$(ag_ctl lender --json status | jq -r .lease_ms)
DEV="{\"driver\": \"vfio-pci\", \"id\": \"fp0\", \"bus\": \"rp1\", \"sysfsdev\": \"/sys/bus/mdev/devices/$U\"}"
# Each scenario's region of 4 KiB blocks ("BS:OFFSET:SIZE"), tag and command timeout (ms).
declare -A REGION=([1]=4096:$((64 << 20)):$((4 << 20)) [4]=4096:$((72 << 20)):$((4 << 20)) [2]=4096:$((80 << 20)):$((4 << 20)))
declare -A TAG=([1]=$(e2e_tag) [4]=$(e2e_tag) [2]=$(e2e_tag))
declare -A TIMEOUT_MS=([1]=20000 [4]=10000 [2]=60000)
SIZE_KB=$((4 << 10))
# The link's events in VM's kernel log, one per line ("link down", "link up", "link handshake done: ...").
klog() { rig_run "$1" -- "dmesg | sed -nE 's/^\[[ 0-9.]*\] farpass [0-9a-f:.]+: (link (up|down|handshake done).*)/\1/p'"; }
# verify_job S MARK [SIZE]: guest script lines reading back scenario S's region (its first SIZE: fio size,
# guest shell text), fio verify-only ("MARK bs=4096 rc=N").
verify_job() {
	local bs off size
	IFS=: read -r bs off size <<<"${REGION[$1]}"
	E2E_REGIONS=("$bs:$off:${3:-$size}")
	e2e_fio_jobs "${TAG[$1]}" --verify-only "$2"
}
# nvme_log S: the guest script line printing (and clearing) its kernel's nvme messages, each on a line
# "E2E-NVME-LOG-S ...", at the end of scenario S.
nvme_log() { echo "dmesg -c | grep -i nvme | grep -v 'ommand line' | sed 's/^/E2E-NVME-LOG-S$1 /'"; }
# written_on_l0 S [KB]: on L0, scenario S's region (its first KB KiB) holds its tag and the canary is intact
# outside S's whole region and the regions checked before (e2e_expect_written).
written_on_l0() {
	local bs off size
	IFS=: read -r bs off size <<<"${REGION[$1]}"
	E2E_REGIONS=("$bs:$off:$((${2:-$((size >> 10))} << 10))")
	E2E_WRITTEN_EXTRA+=("$off:$size")
	e2e_expect_written "$IMG" "${TAG[$1]}"
}
# timeout_ms S: the guest script line setting scenario S's command timeout.
timeout_ms() { echo "echo ${TIMEOUT_MS[$1]} >/sys/block/nvme0n1/queue/io_timeout"; }

script="$E2E_GUEST_PAUSE
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
$(timeout_ms 1)
$(e2e_fio_progress_job "${TAG[1]}" "${REGION[1]}" S1)
$(verify_job 1 E2E-S1-VERIFY)
$(nvme_log 1)
e2e_pause reset
$(timeout_ms 4)
$(e2e_fio_progress_job "${TAG[4]}" "${REGION[4]}" S4)
$(verify_job 4 E2E-S4-VERIFY)
$(nvme_log 4)
e2e_pause loss
$(timeout_ms 2)
$(e2e_fio_progress_job "${TAG[2]}" "${REGION[2]}" S2) | tee /tmp/progress
sed -n 's/^E2E-DONE-KB-S2 //p' /tmp/progress | tail -n1 >/tmp/done-kb
for i in \$(seq 300); do [ -e /sys/block/nvme0n1 ] || break; sleep 1; done
echo \"E2E-NVME-DISKS after the outage: \$(ls /sys/block | grep -c nvme)\"
e2e_pause plug
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
echo \"E2E-NVME-DISKS after device_add: \$(ls /sys/block | grep -c nvme)\"
kb=\$(cat /tmp/done-kb)
echo \"E2E-S2-DONE-KB \$kb\"
$(verify_job 2 E2E-S2-VERIFY '${kb}k')
$(verify_job 1 E2E-S1-FINAL)
$(verify_job 4 E2E-S4-FINAL)
$(nvme_log 2)
[ -z \"\$e2e_failed\" ] || { echo \"E2E-FAILED\$e2e_failed\"; false; }"

e2e_canary "$IMG"
r0=$(e2e_resources $B)
e2e_resources_show "$r0"
declare -A klog0=([lender]=$(klog lender | wc -l) [$B]=$(klog $B | wc -l))
e2e_l2_start $B 256M "$script" -device pcie-root-port,id=rp1,chassis=1 \
	-device vfio-pci,id=fp0,bus=rp1,sysfsdev=/sys/bus/mdev/devices/$U
log=$E2E_L2_LOG
# guest_out: the guest's console so far.
guest_out() { tr -d '\r' <"$log"; }
# guest_field S NAME: what the guest printed after "E2E-S<S>-NAME" (its last such line).
guest_field() { guest_out | sed -n "s/^E2E-S$1-$2//p" | tail -n1; }
# bringups S: how many times the guest's nvme driver brought the controller up during scenario S (its
# probe and each reset), from its kernel log at the scenario's end.
bringups() { guest_out | grep "^E2E-NVME-LOG-S$1 " | grep -c 'default/read/poll queues' || true; }
# fault_at S: waits until scenario S's fio has written REL_FAULT_AFTER_KB; the fault comes then.
fault_at() { e2e_wait_done_kb $B "$log" $REL_FAULT_AFTER_KB "S$1"; }
# expect_writing S KB: (Sa) the guest had written KB KiB of scenario S's region when the fault came.
expect_writing() {
	expect "($1a) the guest had completed writes when the fault came: ${2:-none} KiB" test "${2:-0}" -gt 0
	expect "($1a) ... and fio was still writing (less than the region's $SIZE_KB KiB)" test "$2" -lt $SIZE_KB
}
# expect_recovered S T_RESUME NEXT: the guest's driver recovered scenario S's fault by itself: (Sc) a
# command timeout, the controller up again (or, after the outage, the completion polled), the whole region written and read back, in the guest (now
# waiting at its pause NEXT) and on L0. Prints the scenario's table row's last columns.
expect_recovered() {
	local s=$1 ups polled
	expect "($s) the guest finished the scenario and waits" e2e_l2_wait $B "$3" 300
	expect "(${s}c) the guest's writes went on after the fault" test -n "$2"
	expect_eq "(${s}c) ... and completed the whole region (KiB)" "$(e2e_done_kb "$log" "S$s")" $SIZE_KB
	expect "(${s}c) guest: its nvme driver logged a command timeout" \
		grep -qE "^E2E-NVME-LOG-S$s .*QID [0-9]+ timeout" <(guest_out)
	ups=$(bringups "$s")
	if [ "$s" = 1 ]; then
		polled=$(guest_out | grep "^E2E-NVME-LOG-S1 " | grep -c 'timeout, completion polled' || true)
		expect "(1c) ... then brought the controller up again (up $ups times) or polled the completion ($polled)" \
			test "$ups" -ge 2 -o "$polled" -ge 1
	else
		expect "(${s}c) ... and brought the controller up again (up $ups times)" test "$ups" -ge 1
	fi
	expect_eq "(${s}c) guest: the read-back of the whole region (verify-only)" "$(guest_field "$s" 'VERIFY bs=4096 rc=')" 0
	written_on_l0 "$s"
	rel_row 'recovery time' "fio went on $2 s after the fault ended" \
		'blocks checked' "$((SIZE_KB / 4)) of 4 KiB, read back in the guest and on L0"
}

echo "# (1) link 1 goes down for $OUTAGE_S s"
rel_row scenario "1: a short link outage" outage "link 1 cut for $OUTAGE_S s during fio"
fault_at 1
lender_lines=$(ag_log lender | wc -l)
rig_link_cut 1
kb=$(e2e_done_kb "$log" S1)
sleep "$OUTAGE_S"
rig_link_restore 1
t_back=$(date +%s.%N)
# Where fio stood when the link came back: the writes completing just before the cut are in it.
kb_back=$(e2e_done_kb "$log" S1)
expect_writing 1 "$kb"
rel_row 'what the guest saw' "link down after $((kb / 4)) blocks acknowledged: nvme timeout, fio went on"
t_resume=$(rel_resumed_after $B "$log" "$kb_back" "$t_back" S1)
echo "the guest's writes went on ${t_resume:-never (300 s)} s after the link came back"
expect_recovered 1 "$t_resume" reset
for vm in lender $B; do
	new=$(klog $vm | tail -n +$((klog0[$vm] + 1)) | tr '\n' '/')
	expect_eq "(1b) $vm: the link went down and came back (kernel log)" "$new" "link down/link up/link handshake done: peer protocol 2 roles 0x3/"
done
expect_eq "(1d) lender: no lease ended while the link was down (agent log)" \
	"$(ag_log lender | tail -n +$((lender_lines + 1)) | grep -E 'lease of .* (expired|ended)' || true)" ""
r1=$(e2e_resources $B)
rel_row 'resources back to baseline' "checked at the guest's end, after 2"

echo "# (4) the lender resets its NVMe"
rel_row_next
rel_row scenario "4: the lender's device reset" outage "function-level reset of the NVMe on the lender during fio"
e2e_l2_continue $B
fault_at 4
expect "(4b) lender: sysfs reset of $LENDER_NVME" rig_run lender -- "echo 1 >/sys/bus/pci/devices/$LENDER_NVME/reset"
t_reset=$(date +%s.%N)
kb=$(e2e_done_kb "$log" S4)
csts=$(rig_mmio32 "$AG_LENDER" "$LENDER_NVME" 0 0x1c)
echo "lender: csts=$csts after the reset"
expect_writing 4 "$kb"
expect "(4b) lender: the controller is disabled after the reset (CSTS.RDY 0)" test $((csts & 1)) = 0
rel_row 'what the guest saw' "device reset after $((kb / 4)) blocks acknowledged: nvme timeout and controller reset, fio went on"
t_resume=$(rel_resumed_after $B "$log" "$kb" "$t_reset" S4)
echo "the guest's writes went on ${t_resume:-never (300 s)} s after the reset"
csts=$(rig_mmio32 "$AG_LENDER" "$LENDER_NVME" 0 0x1c)
echo "lender: csts=$csts after that"
expect "(4c) lender: the controller enabled again (CSTS.RDY 1) once the writes went on" test $((csts & 1)) = 1
expect_recovered 4 "$t_resume" loss
r4=$(e2e_resources $B)
changed=$(e2e_resources_changed "$r1" "$r4")
rel_row 'resources back to baseline' "as after 1: $([ -z "$changed" ] && echo yes || echo "no: $changed")"
expect_eq "(4d) resources of the lender and borrower1 after this recovery as after (1)'s" "$changed" ""

echo "# (2) link 1 goes down until the guest has lost the device"
rel_row_next
rel_row scenario "2: a long link outage" outage "link 1 cut until the guest lost the device (lease $lease_ms ms)"
e2e_l2_continue $B
fault_at 2
lender_lines=$(ag_log lender | wc -l)
rig_link_cut 1
t_cut=$(date +%s.%N)
kb=$(e2e_done_kb "$log" S2)
expect_writing 2 "$kb"
ended="lease of $LENDER_NVME by $B ended, its link down for ([0-9]+) ms: device unmapped, reset and free"
bound=$((lease_ms / 1000 + REL_RECLAIM_SLACK_S))
t_reclaim=
if ag_wait_log lender $((bound + 60)) "$ended"; then
	t_reclaim=$(_rig_elapsed "$t_cut")
fi
echo "the lender ended the lease ${t_reclaim:-not within $((bound + 60))} s after the cut (bound $bound s)"
expect "(2b) lender: the lease ended for the link being down" test -n "$t_reclaim"
down_ms=$(ag_log lender | tail -n +$((lender_lines + 1)) | sed -nE "s/.*$ended.*/\\1/p" | tail -n1)
expect "(2b) ... once it had been down for lease_ms ($lease_ms): $down_ms ms" test "${down_ms:-0}" -ge "$lease_ms"
expect "(2b) ... within lease_ms + $REL_RECLAIM_SLACK_S s of the cut: $t_reclaim s" \
	awk -v t="$t_reclaim" -v b="$bound" 'BEGIN { exit !(t <= b) }'
ag_expect_free "(2b)"
expect "(2c) borrower1's agent found the lease lost and revoked the instance" ag_wait_log $B 60 \
	"lease on lender/$LENDER_NVME is lost: .*; its instance revoked: the VFIO user is asked to release it"
t_gone=
for _ in $(seq 300); do
	if grep -q '^E2E-NVME-DISKS after the outage' "$log"; then
		t_gone=$(_rig_elapsed "$t_cut")
		break
	fi
	[ ! -e "$(rig_vm_dir $B)/$E2E_L2_NAME.rc" ] || break
	sleep 1
done
echo "the guest lost its disk ${t_gone:-never (300 s)} s after the cut"
expect "(2c) QEMU did not stop the VM (no VFIO error)" not grep -qs 'Unrecoverable error' "$(rig_vm_dir $B)/$E2E_L2_NAME-qemu.log"
expect "(2c) the guest went on without its disk" test -n "$t_gone"
expect_eq "(2c) ... which it no longer has" "$(guest_out | sed -n 's/^E2E-NVME-DISKS after the outage: //p')" 0
rel_row 'what the guest saw' "device unplugged after $((kb / 4)) blocks acknowledged" \
	'recovery time' "reclaimed ${t_reclaim:-never} s after the cut; the guest's disk gone after ${t_gone:-never} s"

echo "# (2) the link comes back; QMP device_add gives the guest the device again"
rig_link_restore 1
expect "borrower1: the link is back" ntb_wait $B 60 "grep -qx 'handshake ok' $FP_DBG/$(ntb_pci $B)/link"
expect "the guest waits for the device" e2e_l2_wait $B plug 120
expect "(2d) QMP device_add" e2e_qmp $B device_add "$DEV"
e2e_l2_continue $B
e2e_l2_end $B
out=$E2E_OUT
grep -E '^(L2-|E2E-)' <<<"$out" | grep -v '^E2E-DONE-KB' | sed 's/^/    L2> /'
expect_eq "(2d) guest: the nvme disk is back after device_add" \
	"$(sed -n 's/^E2E-NVME-DISKS after device_add: //p' <<<"$out")" 1
done_kb=$(guest_field 2 'DONE-KB ')
expect "(2d) guest: its fio's last report before the outage is at least what L0 saw then: $done_kb KiB >= $kb KiB" \
	test "${done_kb:-0}" -ge "$kb"
expect_eq "(2d) guest: the read-back of those $done_kb KiB (verify-only)" "$(guest_field 2 'VERIFY bs=4096 rc=')" 0
for s in 1 4; do
	expect_eq "(2d) guest: the read-back of ($s)'s whole region (verify-only)" "$(guest_field $s 'FINAL bs=4096 rc=')" 0
done
expect_eq "(e) L2's script exited with status" "$(sed -n 's/^L2-SCRIPT-RC //p' <<<"$out")" 0
written_on_l0 2 "$done_kb"
rel_row 'what the guest saw' "device unplugged after $((done_kb / 4)) blocks acknowledged, added back after the link returned" \
	'blocks checked' "$((done_kb / 4)) of 4 KiB, read back in the guest and on L0"
# The borrows, in order: one per bring-up of (1) and (4), each given back at the next reset but the last,
# which (2) ended (lost); one per bring-up after device_add, given back at the next or the power-off.
want=
for ((i = 1; i < $(bringups 1) + $(bringups 4); i++)); do want+="borrowed/gave back/"; done
want+="borrowed/lost/"
for ((i = 0; i < $(bringups 2); i++)); do want+="borrowed/gave back/"; done
rel_expect_back "$r0"
expect_eq "(e) borrower1's agent: a borrow per controller bring-up, given back at the next, but the one (2) lost" \
	"$(ag_log $B | grep -oE "borrowed lender/|gave back lender/|lease on lender/[^ ]* is lost" |
		sed -E 's#(borrowed|gave back) lender/#\1/#; s#lease on .* is lost#lost/#' | tr -d '\n')" "$want"
