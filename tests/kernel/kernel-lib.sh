# shellcheck shell=bash
# Helpers for the check-kernel rig tests (sourced after tests/rig/rig.sh and ntb-lib.sh).
# FARPASS_BUILD: the meson build directory with farpass.ko and farpass-client (default <repo>/build);
# the L1s see it at the same path (they run on L0's root). The module is the one built for the L1 kernel.

FARPASS_BUILD=${FARPASS_BUILD:-$FARPASS_TOP/build}
FP_KO=$FARPASS_BUILD/mdev/farpass-$FARPASS_KERNEL.ko
FP_CLIENT=$FARPASS_BUILD/tests/kernel/farpass-client
FP_DBG=/sys/kernel/debug/farpass

fp_check_built() {
	local f
	for f in "$FP_KO" "$FP_CLIENT"; do
		[ -e "$f" ] || { echo "missing $f: run make build" >&2; return 1; }
	done
	# A test run straight after a pull or an edit would load the old module.
	f=$(find "$FARPASS_TOP/mdev" "$FARPASS_TOP/include" -name '*.[ch]' -newer "$FP_KO" -print -quit)
	[ -z "$f" ] || { echo "$FP_KO is older than $f: run make build" >&2; return 1; }
}

# fp_load VM: VFIO's type1 IOMMU and the Debian modules farpass.ko links against (modprobe), the NTB
# core and ntb_hw_epf (ours), then farpass.ko. Those it links against are its modinfo's: vfio and mdev,
# and vfio_virqfd on 6.1 (a part of vfio.ko since 6.2).
fp_load() {
	local deps
	deps=$(modinfo -F depends "$FP_KO" | tr , '\n' | grep -vx ntb | paste -sd ' ')
	rig_run "$1" -- "set -e
modprobe -a vfio_iommu_type1 $deps
$(fp_ntb_load)
insmod $FP_KO"
}

# fp_ntb_load: the commands (for rig_run) that mount debugfs and load the NTB core and ntb_hw_epf, which
# the rig builds out of tree (Debian's kernels have no CONFIG_NTB), unless loaded.
fp_ntb_load() {
	printf '%s\n' "mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug" \
		"cd $(rig_modules_dir)" "lsmod | grep -q '^ntb_hw_epf ' || { insmod ntb.ko; insmod ntb_hw_epf.ko; }"
}

# fp_bind_vfio VM PCI: device PCI of VM bound to vfio-pci (driver_override, unbound from its driver first).
fp_bind_vfio() {
	rig_run "$1" -- "set -e; modprobe -a vfio-pci vfio_iommu_type1
d=/sys/bus/pci/devices/$2
echo vfio-pci > \$d/driver_override
if [ -e \$d/driver ]; then echo $2 > \$d/driver/unbind; fi
echo $2 > /sys/bus/pci/drivers_probe
test \"\$(basename \$(readlink \$d/driver))\" = vfio-pci"
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

# fp_inbound_iova VM MW: the IOVA farpass reserved in VM's link-1 NTB's DMA domain for its inbound window
# MW ("inbound window MW: ... at IOVA X" in VM's kernel log, the last such line).
fp_inbound_iova() {
	rig_run "$1" -- dmesg | sed -nE "s/.* $(ntb_pci "$1"): inbound window $2: .* at IOVA (0x[0-9a-f]+)\$/\1/p" | tail -n1
}

# fp_types VM [LINK]: the mdev type names on VM's NTB of link LINK (default: towards the first lender), one
# per line, sorted.
fp_types() {
	rig_run "$1" -- "ls /sys/class/mdev_bus/$(ntb_pci "$1" "${2:-}")/mdev_supported_types 2>/dev/null | sort"
}

# fp_field OUT NAME: the value of NAME=VALUE in farpass-client's output (its last line that has one).
fp_field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1" | tail -n1; }

# fp_expect_identify OUT NSZE [HIGH]: the checks on the result line ("ok nvme ...") of farpass-client
# nvme-identify, the same for a local vfio-pci NVMe and a borrowed one: both commands completed with
# status 0 and an MSI-X interrupt each, into the buffers at IOVA 1 MiB and HIGH (4 GiB); QEMU's NVMe
# identified; NSZE as given.
fp_expect_identify() {
	local out nsze=$2 high=${3:-0x100000000} irqs model
	out=$(grep -E '^(ok|err) ' <<<"$1" || true)
	expect "the client's checks passed" grep -q '^ok nvme ' <<<"$out"
	expect_eq "completion status of both commands" "$(fp_field "$out" status)" 0/0
	irqs=$(fp_field "$out" irqs)
	expect "MSI-X vector 0 fired for each command: irqs=$irqs >= 2" test "${irqs:-0}" -ge 2
	expect_eq "buffers at IOVA 1 MiB and $high" "$(fp_field "$out" low) $(fp_field "$out" high)" "0x100000 $high"
	expect_eq "Identify Controller (into the low buffer): VID" "$(fp_field "$out" vid)" 0x1b36
	model=$(sed -n 's/.* model="\([^"]*\)".*/\1/p' <<<"$out")
	expect "... model \"$model\" starts with QEMU NVMe Ctrl" grep -q '^QEMU NVMe Ctrl' <<<"$model"
	expect_eq "Identify Namespace 1 (into the high buffer): NSZE = image size / 512" "$(fp_field "$out" nsze)" "$nsze"
}

# fp_rig_up_edu: a rig of the lender, with QEMU's edu device at EDU_ADDR, and borrower1 (B); NTB and
# LNTB are the borrower's and the lender's NTB.
fp_rig_up_edu() {
	EDU_ADDR=0000:00:06.0
	export RIG_LENDER_EXTRA="-device edu,addr=0x6"
	rig_up --borrowers 1
	B=borrower1
	NTB=$(ntb_pci $B)
	LNTB=$(ntb_pci lender)
}
