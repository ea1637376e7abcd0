#!/bin/bash
# Discovery and persistence through stock tools, on a borrower booted from the L1 libvirt root with the
# Debian packages installed (what runs is the packaged files: lv_expect_packaged):
#  (a) the lent NVMe's farpass type is listed by `mdevctl types` and `virsh nodedev-list --cap mdev_types`;
#  (b) `virsh nodedev-define` + `nodedev-start` of an mdev XML (UUID from `farpassctl mdev-uuid`) create
#      the instance, `nodedev-autostart` marks it for boot; destroyed and undefined again;
#  (c) `mdevctl define --auto` of the same device; the borrower L1 is rebooted: once udevd, farpass.ko
#      and the agent are up (what systemd does on a real host), the instance is back without any
#      command (the udev rule udev/61-farpass-mdevctl.rules on the parent's registration, and on each
#      device the agent announces into its slot), and libvirt lists it;
#  (d) the borrower's kernel log has no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/../kernel/kernel-lib.sh"
. "$(dirname "$0")/../agent/agent-lib.sh"
. "$(dirname "$0")/libvirt-lib.sh"
lv_check_setup

rig_up --borrowers 1 --l1-root debroot --borrower-mem 2048
B=borrower1
NTB=$(ntb_pci $B)
PARENT=pci_$(tr ':.' '__' <<<"$NTB")
ag_pki
ag_lender_up ", \"peers\": [$(ag_peer_entry $B)]"
B_CONF=", \"poll_ms\": 1000, \"peers\": [$(ag_peer_entry lender "$NTB")]"
lv_host_up $B "$B_CONF"
lv_libvirtd_up $B
lv_expect_type $B
T=$LV_TYPE
U=$(ag_ctl $B mdev-uuid "$T")
echo "type $T, UUID $U"

echo "# (a) discovery"
out=$(rig_run $B -- "mdevctl types")
echo "$out"
expect "mdevctl types lists the type under the NTB" grep -Pzq "$NTB\n(.*\n)*  $T\n" <<<"$out"
expect "... with its name (the lender's slot)" grep -q "Name: lender slot ${T##*-}\$" <<<"$out"
expect "... and the device in its description (lender, PCI IDs, address)" \
	grep -q "Description: lender 1b36:0010 ($LENDER_NVME):" <<<"$out"
out=$(lv_virsh $B nodedev-list --cap mdev_types)
echo "$out"
expect "virsh nodedev-list --cap mdev_types lists the NTB" grep -qx "$PARENT" <<<"$out"
out=$(lv_virsh $B nodedev-dumpxml "$PARENT")
expect "... and its nodedev XML has the type" grep -q "<type id='$T'>" <<<"$out"

echo "# (b) virsh nodedev-define + nodedev-start"
rig_run $B -- "cat >/tmp/mdev.xml <<'EOF'
<device>
  <parent>$PARENT</parent>
  <capability type='mdev'>
    <type id='$T'/>
    <uuid>$U</uuid>
  </capability>
</device>
EOF"
t0=$SECONDS
out=$(lv_virsh $B nodedev-define /tmp/mdev.xml)
echo "$out"
NODE=$(sed -n "s/^Node device '\(.*\)' defined.*/\1/p" <<<"$out")
expect "virsh nodedev-define names the node device after the UUID" grep -q "^mdev_$(tr - _ <<<"$U")" <<<"$NODE"
expect "virsh nodedev-start $NODE" lv_virsh $B nodedev-start "$NODE"
expect "the instance exists" lv_mdev_exists $B "$U"
echo "# define + start: $((SECONDS - t0)) s"
expect "virsh nodedev-autostart" lv_virsh $B nodedev-autostart "$NODE"
expect_eq "mdevctl lists it defined, auto start, active" "$(rig_run $B -- "mdevctl list --defined -u $U")" \
	"$U $NTB $T auto (active)"
expect "virsh nodedev-destroy" lv_virsh $B nodedev-destroy "$NODE"
expect "... the instance is gone" rig_run $B -- "! test -e /sys/bus/mdev/devices/$U"
expect "virsh nodedev-undefine" lv_virsh $B nodedev-undefine "$NODE"
expect_eq "... mdevctl has no definition left" "$(rig_run $B -- "mdevctl list --defined -u $U")" ""

echo "# (c) mdevctl define --auto; the borrower reboots"
expect "mdevctl define --auto" rig_run $B -- "mdevctl define --auto -u $U -p $NTB -t $T"
expect "no instance yet (defined only)" rig_run $B -- "! test -e /sys/bus/mdev/devices/$U"
rig_kill $B
t0=$SECONDS
rig_boot $B
lv_host_up $B "$B_CONF"
expect "the instance is back before libvirtd runs, started by the udev rule" \
	ntb_wait $B 60 "test -e /sys/bus/mdev/devices/$U"
echo "# reboot to instance back: $((SECONDS - t0)) s"
expect_eq "... of the farpass type" "$(rig_run $B -- "basename \$(readlink /sys/bus/mdev/devices/$U/mdev_type)")" "$T"
lv_libvirtd_up $B
expect "libvirt lists it as an active mdev node device" ntb_wait $B 30 "$LV_VIRSH nodedev-list --cap mdev | grep -qx $NODE"
expect_klog_clean $B
