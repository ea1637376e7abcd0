# shellcheck shell=bash
# Helpers for the check-libvirt rig tests (sourced after rig.sh, ntb-lib.sh, kernel-lib.sh and
# agent-lib.sh): borrowers boot the L1 libvirt root (rig_up --l1-root rootfs), which has no systemd, so
# lv_host_up does what a real host's install and units would: the hook and udev rule where `meson install`
# puts them, udevd (the rule starts defined mdevs when a parent registers), farpass.ko, the agent; then
# libvirtd.
#
#   lv_host_up VM AGENT-CONFIG-FRAGMENT   all of the above but libvirtd, in that order (also after rig_boot)
#   lv_libvirtd_up VM                     libvirtd started (after the hook is installed), answering
#   lv_virsh VM ARGS...                   virsh -c qemu:///system in VM (output and status)
#   lv_mdev_exists VM UUID                the mdev instance is there (sysfs)

LV_HOOK=$FARPASS_TOP/libvirt-hooks/qemu.d/farpass
LV_UDEV_RULE=$FARPASS_TOP/udev/61-farpass-mdevctl.rules
LV_VIRSH="virsh -c qemu:///system"

# The rig's L1 root is a tmpfs overlay: /etc/mdevctl.d (mdevctl's and libvirt's persistent mdev
# definitions) is kept in $RIGDIR/VM/mdevctl.d, bind-mounted at each boot, as a disk would keep it.
_lv_persistent_etc() {
	local vm=$1
	mkdir -p "$RIGDIR/$vm/mdevctl.d"
	# Seeded with the package's own content (scripts.d/callouts, which mdevctl requires).
	rig_run "$vm" -- "mountpoint -q /etc/mdevctl.d && exit 0
cp -an /etc/mdevctl.d/. $RIGDIR/$vm/mdevctl.d/ && mount --bind $RIGDIR/$vm/mdevctl.d /etc/mdevctl.d"
}

lv_host_up() {
	local vm=$1 t0=$SECONDS
	expect "$vm: /etc/mdevctl.d persists across reboots" _lv_persistent_etc "$vm"
	# What `meson install` does: farpassctl and the agent on PATH (the hook runs farpassctl), the hook,
	# the udev rule.
	expect "$vm: farpassctl, farpass-agent, the hook and the udev rule installed" rig_run "$vm" -- "set -e
ln -sf $FP_CTL /usr/local/bin/farpassctl && ln -sf $FP_AGENT /usr/local/sbin/farpass-agent
install -D -m 0755 $LV_HOOK /etc/libvirt/hooks/qemu.d/farpass
install -m 0644 $LV_UDEV_RULE /lib/udev/rules.d/"
	expect "$vm: udevd runs" rig_run "$vm" -- "/lib/systemd/systemd-udevd --daemon && udevadm trigger --action=add && udevadm settle -t 30"
	expect "$vm: farpass.ko loads" fp_load "$vm"
	ag_config "$vm" "$2"
	expect "$vm: farpass-agent starts" ag_start "$vm"
	echo "# $vm: host up in $((SECONDS - t0)) s"
}

lv_libvirtd_up() {
	local vm=$1 t0=$SECONDS
	expect "$vm: libvirtd starts and answers" rig_run "$vm" --timeout 180 -- \
		"libvirtd -d && for i in \$(seq 300); do $LV_VIRSH version >/dev/null 2>&1 && exit 0; sleep 0.5; done; exit 1"
	echo "# $vm: libvirtd up in $((SECONDS - t0)) s"
}

lv_virsh() {
	local vm=$1
	shift
	rig_run "$vm" --timeout 120 -- "$LV_VIRSH $*"
}

lv_mdev_exists() { rig_run "$1" -- "test -e /sys/bus/mdev/devices/$2"; }

# lv_type VM: the farpass type of the lender's NVMe on VM's NTB, once announced (waits up to 60 s).
lv_type() {
	local vm=$1 id
	ag_wait_log "$vm" 60 "announced lender $LENDER_NVME" || return 1
	id=$(ag_ctl "$vm" --json status | jq -r ".remote_devices[] | select(.pci == \"$LENDER_NVME\") | .id")
	echo "ntb_hw_epf-farpass-lender-$id"
}
