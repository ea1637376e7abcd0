#!/bin/bash
# The libvirt hook and a domain moved between borrowers, driven by stock virsh only (one lender, two
# borrowers booted from the L1 libvirt root, libvirtd on both):
#  (a) the UUID of the lender's NVMe is the same on both borrowers (farpassctl mdev-uuid of the same type);
#  (b) a domain with that mdev hostdev is defined on borrower1 and started there (paused: the guest's
#      data path is not needed here): the hook created the instance; `virsh destroy` removes it (the
#      hook made it, transient); its XML (virsh dumpxml) is undefined on borrower1 and defined on
#      borrower2 unchanged (a cold migration by dumpxml/define), where `virsh start` works the same
#      with no other step;
#  (c) `virsh start` on borrower2 fails with a libvirt error naming the device and the reason, and
#      creates nothing, when the device is borrowed by borrower1 (a lease held through the agents'
#      protocol) and when the lender's agent is down;
#  (d) borrower2's kernel log has no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/../kernel/kernel-lib.sh"
. "$(dirname "$0")/../agent/agent-lib.sh"
. "$(dirname "$0")/libvirt-lib.sh"
ag_check_built && fp_check_built

rig_up --borrowers 2 --l1-root rootfs --lender-mem 1536 --borrower-mem 2048
B2=borrower2
NTB=$(ntb_pci $B2)
ag_pki
ag_lender_up ", \"lease_ms\": 60000, \"peers\": [$(ag_peer_entry borrower1), $(ag_peer_entry $B2)]"
for b in borrower1 $B2; do
	lv_host_up "$b" ", \"poll_ms\": 1000, \"peers\": [$(ag_peer_entry lender "$NTB")]"
	lv_libvirtd_up "$b"
done

echo "# (a) one UUID for the device on every borrower"
T=$(lv_type $B2)
expect_eq "borrower1 has the same type" "$(lv_type borrower1)" "$T"
U=$(ag_ctl borrower1 mdev-uuid "$T")
expect_eq "farpassctl mdev-uuid gives the same UUID on both" "$(ag_ctl $B2 mdev-uuid "$T")" "$U"
echo "type $T, UUID $U"

# start_paused_with_hook VM: `virsh start --paused g` on VM creates the instance (the hook), QEMU opens
# it, `virsh destroy` removes it again.
start_paused_with_hook() {
	local vm=$1 out t0=$SECONDS
	expect "$vm: no instance before the start" rig_run "$vm" -- "! test -e /sys/bus/mdev/devices/$U"
	out=$(lv_virsh "$vm" start --paused g) || { echo "$out"; rig_run "$vm" -- "tail -20 /var/log/libvirt/qemu/g.log"; return 1; }
	echo "$out"
	echo "# $vm: virsh start: $((SECONDS - t0)) s"
	expect_eq "$vm: the domain runs (paused)" "$(lv_virsh "$vm" domstate g)" paused
	expect_eq "$vm: the hook created the instance, of the farpass type" \
		"$(rig_run "$vm" -- "basename \$(readlink /sys/bus/mdev/devices/$U/mdev_type)")" "$T"
	expect "$vm: QEMU has it open (its VFIO group is in use)" rig_run "$vm" -- \
		"ls -l /proc/\$(pgrep -f 'guest=g')/fd | grep -q /dev/vfio/\$(basename \$(readlink /sys/bus/mdev/devices/$U/iommu_group))"
	expect "$vm: virsh destroy" lv_virsh "$vm" destroy g
	expect "$vm: ... the transient instance is gone (release end)" ntb_wait "$vm" 10 "! test -e /sys/bus/mdev/devices/$U"
}

echo "# (b) defined and started on borrower1, moved to borrower2 and started there"
rig_run borrower1 -- "cat >/tmp/g.xml <<'EOF'
<domain type='qemu'>
  <name>g</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices>
    <memballoon model='none'/>
    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>
      <source><address uuid='$U'/></source>
    </hostdev>
  </devices>
</domain>
EOF"
expect "borrower1: virsh define" lv_virsh borrower1 define /tmp/g.xml
start_paused_with_hook borrower1
expect "borrower1: virsh dumpxml --inactive" lv_virsh borrower1 dumpxml --inactive g ">$RIGDIR/borrower1/g.xml"
expect "borrower1: virsh undefine" lv_virsh borrower1 undefine g
cp "$RIGDIR/borrower1/g.xml" "$RIGDIR/$B2/g.xml"
expect "$B2: virsh define of borrower1's XML" lv_virsh $B2 define "$RIGDIR/$B2/g.xml"
start_paused_with_hook $B2

echo "# (c) errors libvirt reports"
start_fails() { # start_fails WHAT REGEX: virsh start fails, its error matches REGEX, nothing created
	local out rc=0
	out=$(lv_virsh $B2 start --paused g 2>&1) || rc=$?
	echo "$out"
	expect "$1: virsh start fails" test "$rc" -ne 0
	expect "... its error names the device and the reason" grep -Eq "$2" <<<"$out"
	expect "... no instance was created" rig_run $B2 -- "! test -e /sys/bus/mdev/devices/$U"
}
out=$(ag_peer borrower1 call lease.acquire "'{\"pci\": \"$LENDER_NVME\"}'")
echo "$out"
expect "borrower1 holds a lease on the NVMe" jq -e .lease <<<"$out"
start_fails "borrowed by borrower1" \
	"farpass: remote device lender/$LENDER_NVME \(mdev type $T\): busy \(EBUSY\), borrowed by borrower1"
lease=$(jq -r .lease <<<"$out")
expect "borrower1 gives it back" ag_peer borrower1 call lease.release "'{\"pci\": \"$LENDER_NVME\", \"lease\": \"$lease\"}'"
expect "lender: the agent stops" ag_stop lender
start_fails "lender down" \
	"farpass: remote device lender/$LENDER_NVME \(mdev type $T\): its lender lender is unreachable: "
expect_klog_clean $B2
