# shellcheck shell=bash
# Helpers for the check-kernel rig tests (sourced after tests/rig/rig.sh and ntb-lib.sh).
# FARPASS_BUILD: the meson build directory with farpass.ko and farpass-client (default <repo>/build);
# the L1s see it at the same path (they run on L0's root).

FARPASS_BUILD=${FARPASS_BUILD:-$FARPASS_TOP/build}
FP_KO=$FARPASS_BUILD/mdev/farpass.ko
FP_CLIENT=$FARPASS_BUILD/tests/kernel/farpass-client
FP_DBG=/sys/kernel/debug/farpass

fp_check_built() {
	local f
	for f in "$FP_KO" "$FP_CLIENT"; do
		[ -e "$f" ] || { echo "missing $f: run make build" >&2; return 1; }
	done
}

# fp_load VM: VFIO (with vfio_virqfd, which farpass.ko links against) and mdev (Debian's, via
# modprobe), the NTB core and ntb_hw_epf, then farpass.ko.
fp_load() {
	rig_run "$1" -- "set -e
modprobe -a vfio vfio_iommu_type1 vfio_virqfd mdev
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
cd $(rig_modules_dir)
lsmod | grep -q '^ntb_hw_epf ' || { insmod ntb.ko; insmod ntb_hw_epf.ko; }
insmod $FP_KO"
}

# fp_client VM ARGS...: run farpass-client in VM (prints its "ok"/"err" line; status as the client's).
fp_client() {
	local vm=$1
	shift
	rig_run "$vm" --timeout 30 -- "$FP_CLIENT $*"
}

# fp_counter VM NAME: the value of one farpass debugfs counter.
fp_counter() {
	rig_run "$1" -- "awk '\$1 == \"$2\" { print \$2 }' $FP_DBG/counters"
}

# fp_types VM [LINK]: the mdev type names on VM's NTB (one per line, sorted).
fp_types() {
	rig_run "$1" -- "ls /sys/class/mdev_bus/$(ntb_pci "$1" "${2:-1}")/mdev_supported_types 2>/dev/null | sort"
}
