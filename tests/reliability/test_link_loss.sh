#!/bin/bash
# Scenario 2 of issue 15, a link outage longer than the lease: link 1 (lender to borrower1) runs through a
# relay on L0 (RIG_LINK_RELAY), which cuts it while borrower1's 256 MiB L2 guest writes the lender's NVMe
# (the farpass mdev behind a PCIe root port) with fio, and plugs it back only once the guest has lost
# the device. Checks:
#  (a) the guest was writing when the link went down: fio's progress says N KiB of its sequential region
#      had completed, more than none and less than all of it;
#  (b) the lender reclaimed the device: its agent ended the lease for the link being down (logged "ended,
#      its link down for M ms", M >= lease_ms) within lease_ms + REL_RECLAIM_SLACK_S of the cut, although
#      borrower1's agent could renew over the management network; the lender then has no borrow and the
#      device free and reset;
#  (c) the guest saw the device removed and kept running: borrower1's agent found the lease lost and
#      revoked the instance (the VFIO request eventfd, not the error eventfd: QEMU did not stop the VM),
#      the guest then had no nvme disk, and its script went on;
#  (d) with the link back, QMP device_add of the same mdev gave the guest its disk again, and it read
#      back every block its fio had reported completed before the outage (fio verify-only, direct I/O: the
#      pattern of its tag and offset); on L0 the lender's backing file holds them, and the canary is
#      intact outside the region;
#  (e) the guest's script exited 0 and its QEMU powered off, which returned the device (the lender has it
#      free and reset); borrower1's agent logged two borrows (boot, device_add); the lender's and
#      borrower1's resources are what they were before the guest started;
#  (f) the kernel logs of the lender and borrower1 have no warning, BUG, oops, RCU stall, hung task or
#      DMAR fault.
# Prints the times from the cut to the reclaim and to the guest losing its disk; writes its row of the
# suite's summary table (rel-lib.sh).
set -euo pipefail
export RIG_LINK_RELAY=1
. "$(dirname "$0")/rel-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup
# The expiry check's period (1 s), the teardown under a loaded TCG rig and L0's polling of the log.
REL_RECLAIM_SLACK_S=${REL_RECLAIM_SLACK_S:-5}
# A 15 s lease (30 s in e2e rigs, for load), and guest command timeouts longer than the lease and its
# loss's notice (60 s): the device is taken from the guest by the lease's end, not by its own driver
# giving up on a dead controller first (which it does at its first timeout, as test_link_outage shows).
E2E_LENDER_AGENT_CFG='"lease_ms": 15000'
E2E_L2_APPEND='nvme_core.io_timeout=60 nvme_core.admin_timeout=60'
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2f6
rel_guest_up $U
IFS=: read -r bs off size <<<"$REL_REGION"
lease_ms=$(ag_ctl lender --json status | jq -r .lease_ms)
rel_row scenario "2: a long link outage" outage "link 1 cut until the guest lost the device (lease $lease_ms ms)"
DEV="{\"driver\": \"vfio-pci\", \"id\": \"fp0\", \"bus\": \"rp1\", \"sysfsdev\": \"/sys/bus/mdev/devices/$U\"}"

tag=$(e2e_tag)
e2e_canary "$IMG"
r0=$(e2e_resources $B)
e2e_resources_show "$r0"

# The guest keeps what its fio reported last (/tmp/done-kb) to read exactly that back once the disk is
# back.
script="$E2E_GUEST_PAUSE
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
$(e2e_fio_progress_job "$tag" "$REL_REGION") | tee /tmp/progress
sed -n 's/^E2E-DONE-KB //p' /tmp/progress | tail -n1 >/tmp/done-kb
for i in \$(seq 300); do [ -e /sys/block/nvme0n1 ] || break; sleep 1; done
echo \"E2E-NVME-DISKS after the outage: \$(ls /sys/block | grep -c nvme)\"
e2e_pause plug
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
echo \"E2E-NVME-DISKS after device_add: \$(ls /sys/block | grep -c nvme)\"
kb=\$(cat /tmp/done-kb)
rc=0; fio --thread --name=rb --filename=/dev/nvme0n1 --direct=1 --ioengine=psync --rw=write --bs=$bs \
--offset=$off --size=\${kb}k --verify=pattern --verify_pattern=0x$tag%o --do_verify=1 --verify_fatal=1 \
--verify_only >/tmp/fio.out 2>&1 || rc=\$?
[ \$rc = 0 ] || cat /tmp/fio.out
echo \"E2E-LOSS-VERIFY kb=\$kb rc=\$rc\"
dmesg | grep -i nvme | sed 's/^/E2E-NVME-LOG /'
[ \$rc = 0 ]"
e2e_l2_start $B 256M "$script" -device pcie-root-port,id=rp1,chassis=1 \
	-device vfio-pci,id=fp0,bus=rp1,sysfsdev=/sys/bus/mdev/devices/$U
log=$E2E_L2_LOG
e2e_wait_done_kb $B "$log" $REL_FAULT_AFTER_KB

echo "# link 1 goes down until the guest has lost the device"
lender_lines=$(ag_log lender | wc -l)
rig_link_cut 1
t_cut=$(date +%s.%N)
kb=$(e2e_done_kb "$log")
expect "(a) the guest had completed writes when the link went down: ${kb:-none} KiB" test "${kb:-0}" -gt 0
expect "(a) ... and fio was still writing (less than the region's $((size >> 10)) KiB)" test "$kb" -lt $((size >> 10))

ended="lease of $LENDER_NVME by $B ended, its link down for ([0-9]+) ms: device unmapped, reset and free"
bound=$((lease_ms / 1000 + REL_RECLAIM_SLACK_S))
t_reclaim=
if ag_wait_log lender $((bound + 60)) "$ended"; then
	t_reclaim=$(_rig_elapsed "$t_cut")
fi
echo "the lender ended the lease ${t_reclaim:-not within $((bound + 60))} s after the cut (bound $bound s)"
expect "(b) lender: the lease ended for the link being down" test -n "$t_reclaim"
down_ms=$(ag_log lender | tail -n +$((lender_lines + 1)) | sed -nE "s/.*$ended.*/\\1/p" | tail -n1)
expect "(b) ... once it had been down for lease_ms ($lease_ms): $down_ms ms" test "${down_ms:-0}" -ge "$lease_ms"
expect "(b) ... within lease_ms + $REL_RECLAIM_SLACK_S s of the cut: $t_reclaim s" \
	awk -v t="$t_reclaim" -v b="$bound" 'BEGIN { exit !(t <= b) }'
ag_expect_free "(b)"
expect "(c) borrower1's agent found the lease lost and revoked the instance" ag_wait_log $B 60 \
	"lease on lender/$LENDER_NVME is lost: .*; its instance revoked: the VFIO user is asked to release it"
t_gone=
for _ in $(seq 300); do
	if grep -q '^E2E-NVME-DISKS after the outage' "$log"; then
		t_gone=$(_rig_elapsed "$t_cut")
		break
	fi
	[ ! -e "$(rig_vm_dir $B)/l2.rc" ] || break
	sleep 1
done
echo "the guest lost its disk ${t_gone:-never (300 s)} s after the cut"
expect "(c) QEMU did not stop the VM (no VFIO error)" bash -c "! grep -qs 'Unrecoverable error' '$(rig_vm_dir $B)/l2-qemu.log'"
expect "(c) the guest went on without its disk" test -n "$t_gone"
expect_eq "(c) ... which it no longer has" "$(tr -d '\r' <"$log" | sed -n 's/^E2E-NVME-DISKS after the outage: //p')" 0
rel_row 'what the guest saw' "device unplugged after $((kb / 4)) blocks acknowledged" \
	'recovery time' "reclaimed ${t_reclaim:-never} s after the cut; the guest's disk gone after ${t_gone:-never} s"

echo "# the link comes back; QMP device_add gives the guest the device again"
rig_link_restore 1
expect "borrower1: the link is back" ntb_wait $B 60 "grep -qx 'handshake ok' $FP_DBG/$(ntb_pci $B)/link"
expect "the guest waits for the device" e2e_l2_wait $B plug 120
expect "(d) QMP device_add" e2e_qmp $B device_add "$DEV"
e2e_l2_continue $B
e2e_l2_end $B
out=$E2E_OUT
grep -E '^(L2-|E2E-)' <<<"$out" | grep -v '^E2E-DONE-KB' | sed 's/^/    L2> /'
expect_eq "(d) guest: the nvme disk is back after device_add" \
	"$(sed -n 's/^E2E-NVME-DISKS after device_add: //p' <<<"$out")" 1
done_kb=$(sed -n 's/^E2E-LOSS-VERIFY kb=\([0-9]*\) .*/\1/p' <<<"$out")
expect "(d) guest: its fio's last report before the outage is at least what L0 saw then: $done_kb KiB >= $kb KiB" \
	test "${done_kb:-0}" -ge "$kb"
expect_eq "(d) guest: the read-back of those $done_kb KiB (verify-only)" \
	"$(sed -n 's/^E2E-LOSS-VERIFY kb=[0-9]* rc=//p' <<<"$out")" 0
expect_eq "(e) L2's script exited with status" "$(sed -n 's/^L2-SCRIPT-RC //p' <<<"$out")" 0
E2E_REGIONS=("$bs:$off:$((done_kb << 10))")
E2E_WRITTEN_EXTRA=("$off:$size")
e2e_expect_written "$IMG" "$tag"
rel_row 'what the guest saw' "device unplugged after $((done_kb / 4)) blocks acknowledged, added back after the link returned" \
	'blocks checked' "$((done_kb / 4)) of 4 KiB, read back in the guest and on L0"
expect_eq "(e) borrower1's agent: two borrows (boot, device_add)" "$(ag_log $B | grep -c "borrowed lender/$LENDER_NVME" || true)" 2
rel_expect_back "$r0"
