# shellcheck shell=bash
# Helpers for the check-agent rig tests (sourced after tests/rig/rig.sh, ntb-lib.sh and
# tests/kernel/kernel-lib.sh): one farpass-agent per L1, its config and its TLS credentials (a CA made
# per run, tests/make-pki.sh) written by the test into $RIGDIR/<vm>/ (shared into the VM at the same
# path), farpassctl and the tests-only peer client fp-peer run in the VMs from the meson build directory
# (the L1s see it at the same path).
#
#   ag_pki                      a new cluster CA, and each VM's certificate in $RIGDIR/<vm>/pki
#   ag_config VM JSON-FRAGMENT  agent.conf for VM: host, listen, socket, state, pki + the fragment
#   ag_start VM / ag_stop VM    start (and wait until farpassctl answers) / SIGTERM and wait; with
#                               AG_FDSTORE=1 the agent runs under fp-supervise (systemd's fd store and
#                               Restart=on-failure; its lines in the agent's log), which writes agent.pid
#   ag_ctl VM ARGS...           farpassctl in VM
#   ag_peer VM ARGS...          fp-peer in VM as host VM with VM's certificate, towards the lender's agent
#   ag_kill_restart VM          SIGKILL the agent (under AG_FDSTORE=1); true once a new one answers
#   ag_lease_ids VM             the lease ids of the lender's state.json and of VM's borrower.json
#   ag_log VM                   the agent's log (stderr with <N> priority prefixes)
#   ag_wait_log VM S REGEX      true once the agent's log matches, within S seconds
#   ag_wait_count VM S REGEX N  true once more than N of its lines match, within S seconds
# The helpers about "the lender" act on $AG_LENDER: the rig's first lender unless a test names lender2
# (AG_LENDER=lender2 ag_expect_returned ...).

FP_AGENT=$FARPASS_BUILD/lender-agent/farpass-agent
FP_CTL=$FARPASS_BUILD/lender-agent/farpassctl
FP_PEER=$FARPASS_BUILD/tests/agent/fp-peer
FP_SUPERVISE=$FARPASS_BUILD/tests/agent/fp-supervise
AG_PORT=7450
LENDER_NVME=0000:00:08.0
# The device the lender's agent lends in ag_lender_up/ag_remote_mdev and ag_expect_returned checks: the
# rig's NVMe unless a test gives the lender another device (RIG_LENDER_EXTRA) and names it here.
AG_LENT=${AG_LENT:-$LENDER_NVME}
# More lender devices (PCI addresses, space-separated) lent with it.
AG_LENT_ALSO=${AG_LENT_ALSO:-}
AG_LENDER=${AG_LENDER:-lender}
# In a rig with two lenders: the devices lender2 lends in ag_remote_mdev (its NVMe unless a test says).
AG_LENT2=${AG_LENT2:-$LENDER_NVME}

ag_check_built() {
	local f
	for f in "$FP_AGENT" "$FP_CTL" "$FP_PEER" "$FP_SUPERVISE" "$FP_KO"; do
		[ -e "$f" ] || { echo "missing $f: run make build" >&2; return 1; }
	done
}

# ag_pki: a new cluster CA in $RIGDIR/ca, and for every VM of the rig its credentials from it in
# $RIGDIR/<vm>/pki (the layout farpass-agent reads: cacert.pem, hostcert.pem, private/hostkey.pem).
ag_pki() {
	local vm
	"$FARPASS_TOP/tests/make-pki.sh" ca "$RIGDIR/ca"
	for vm in "${RIG_VMS[@]}"; do
		"$FARPASS_TOP/tests/make-pki.sh" host "$RIGDIR/ca" "$RIGDIR/$vm/pki" "$vm"
	done
}

# ag_config VM ',"peers": [...], "lease_ms": 6000': agent.conf for VM (the host name is the VM's).
ag_config() {
	local vm=$1 extra=${2:-} dir=$RIGDIR/$1
	cat >"$dir/agent.conf" <<EOF
{
	// written by $(basename "$0")
	"host": "$vm",
	"listen": "$(rig_vm_ip "$vm"):$AG_PORT",
	"socket": "/run/farpass/agent.sock",
	"state_dir": "/var/lib/farpass",
	"pki": "$dir/pki"
	$extra
}
EOF
}

# A peer entry for ag_config: ag_peer_entry VM [NTB].
ag_peer_entry() {
	printf '{"host": "%s", "address": "%s:%s"%s}' "$1" "$(rig_vm_ip "$1")" "$AG_PORT" \
		"${2:+, \"ntb\": \"$2\"}"
}

ag_start() {
	local vm=$1 dir=$RIGDIR/$1 run=
	[ -n "${AG_FDSTORE:-}" ] && run="$FP_SUPERVISE --socket /run/farpass/notify --pidfile $dir/agent.pid --"
	rig_run "$vm" -- "mkdir -p /run/farpass /var/lib/farpass; rm -f $dir/agent.pid
setsid $run $FP_AGENT --config $dir/agent.conf </dev/null >>$dir/agent.log 2>&1 &
started=\$!
[ -n '$run' ] || echo \$started >$dir/agent.pid
for i in \$(seq 100); do $FP_CTL status >/dev/null 2>&1 && exit 0; kill -0 \$started || break; sleep 0.2; done
echo 'farpass-agent did not come up:'; tail -n 20 $dir/agent.log; exit 1"
}

ag_stop() {
	local vm=$1 dir=$RIGDIR/$1
	rig_run "$vm" -- "pid=\$(cat $dir/agent.pid); kill -TERM \$pid
for i in \$(seq 100); do kill -0 \$pid 2>/dev/null || exit 0; sleep 0.1; done; exit 1"
}

ag_kill_restart() {
	local vm=$1 old
	old=$(rig_run "$vm" -- "cat $RIGDIR/$vm/agent.pid")
	rig_run "$vm" -- "kill -KILL $old"
	rig_run "$vm" --timeout 70 -- "for i in \$(seq 300); do
test \"\$(cat $RIGDIR/$vm/agent.pid)\" != $old && $FP_CTL status >/dev/null 2>&1 && exit 0; sleep 0.2; done; exit 1"
}

ag_lease_ids() {
	echo "$(rig_run "$AG_LENDER" -- "jq -r '.devices[0].lease.id' /var/lib/farpass/state.json")" \
		"$(rig_run "$1" -- "jq -c '[.. | objects | select(has(\"lease\")) | .lease | objects | .id]' /var/lib/farpass/borrower.json")"
}

ag_ctl() {
	local vm=$1
	shift
	rig_run "$vm" --timeout 60 -- "$FP_CTL $*"
}

ag_peer() {
	local vm=$1
	shift
	rig_run "$vm" --timeout 60 -- "$FP_PEER --pki $RIGDIR/$vm/pki --host $vm --lender $AG_LENDER --address $(rig_vm_ip "$AG_LENDER"):$AG_PORT $*"
}

ag_log() { tr -d '\r' <"$RIGDIR/$1/agent.log"; }

# ag_wait_log VM SECONDS REGEX: true once the agent's log of VM matches (read on L0).
ag_wait_log() {
	local vm=$1 seconds=$2 regex=$3 i
	for ((i = 0; i < seconds * 5; i++)); do
		grep -Eq "$regex" "$RIGDIR/$vm/agent.log" 2>/dev/null && return 0
		sleep 0.2
	done
	return 1
}

# ag_wait_count VM SECONDS REGEX N: true once more than N lines of the agent's log of VM match.
ag_wait_count() {
	local vm=$1 seconds=$2 regex=$3 n=$4 i
	for ((i = 0; i < seconds * 5; i++)); do
		(($(grep -Ec "$regex" "$RIGDIR/$vm/agent.log" 2>/dev/null) > n)) && return 0
		sleep 0.2
	done
	return 1
}

# ag_sriov_up: in the lender of a RIG_LENDER_SRIOV=1 rig, the SR-IOV NVMe's two VFs made lendable, checked:
# the PF on the lender's nvme driver gives each secondary controller 2 queues (admin and one I/O) and 1
# interrupt from its flexible pools (after taking the PF's own flexible ones to 0 and resetting it, the
# sequence of QEMU's docs/system/devices/nvme.rst), enables the VFs with no driver probing them (the nvme
# driver would find an offline controller and fail), brings both controllers online and attaches nsid K
# to controller K (VF K) only; each VF then has an IOMMU group of its own.
ag_sriov_up() {
	local pf vf1 vf2 groups
	pf=$(rig_lender_sriov_pci 0) vf1=$(rig_lender_sriov_pci 1) vf2=$(rig_lender_sriov_pci 2)
	expect "lender: the nvme driver has the SR-IOV PF $pf" rig_run lender -- "modprobe nvme
for i in \$(seq 40); do ls /sys/bus/pci/devices/$pf/nvme/nvme* >/dev/null 2>&1 && exit 0; sleep 0.5; done; exit 1"
	rig_run lender -- "basename /sys/bus/pci/devices/$pf/nvme/nvme* >/tmp/sriov-pf"
	expect "lender: nvme virt-mgmt gave each VF its queues and interrupt, VFs enabled and online" \
		rig_run lender -- "set -e; c=/dev/\$(cat /tmp/sriov-pf)
nvme virt-mgmt \$c -c 0 -r 1 -a 1 -n 0; nvme virt-mgmt \$c -c 0 -r 0 -a 1 -n 0
echo 1 >/sys/bus/pci/devices/$pf/reset
echo 0 >/sys/bus/pci/devices/$pf/sriov_drivers_autoprobe; echo 2 >/sys/bus/pci/devices/$pf/sriov_numvfs
for k in 1 2; do
	nvme virt-mgmt \$c -c \$k -r 1 -a 8 -n 1; nvme virt-mgmt \$c -c \$k -r 0 -a 8 -n 2; nvme virt-mgmt \$c -c \$k -a 9
	nvme attach-ns \$c -n \$k -c \$k
done"
	expect_eq "lender: both secondary controllers online" \
		"$(rig_run lender -- 'nvme list-secondary /dev/$(cat /tmp/sriov-pf)' | grep -c '(Online)')" 2
	for k in 1 2; do
		expect_eq "lender: nsid $k attached to controller $k only" \
			"$(rig_run lender -- "nvme list-ctrl /dev/\$(cat /tmp/sriov-pf) -n $k" | sed -n 's/^\[ *[0-9]*\]: *//p' | paste -sd ' ')" 0x$k
	done
	groups=$(rig_run lender -- "for d in $pf $vf1 $vf2; do basename \$(readlink /sys/bus/pci/devices/\$d/iommu_group); done" | sort -u | wc -l)
	expect_eq "lender: the PF and each VF in IOMMU groups of their own" "$groups" 3
	expect_eq "lender: the PF on nvme, the VFs on no driver" \
		"$(ag_lender_drivers)" "nvme none none"
}

# ag_lender_drivers: the drivers of RIG_LENDER_SRIOV's PF and VFs 1 and 2 in the lender ("none" for none).
ag_lender_drivers() {
	rig_run lender -- "for d in $(rig_lender_sriov_pci 0) $(rig_lender_sriov_pci 1) $(rig_lender_sriov_pci 2); do
	l=\$(readlink /sys/bus/pci/devices/\$d/driver) && basename \$l || echo none; done" | paste -sd ' '
}

# ag_lender_up [AGENT-CONFIG-FRAGMENT]: vfio-pci in the lender ($AG_LENDER), its agent started, $AG_LENT
# and $AG_LENT_ALSO lent; in a RIG_LENDER_SRIOV=1 rig the lender's VFs made lendable first (ag_sriov_up).
ag_lender_up() {
	local pci l=$AG_LENDER
	[ "${RIG_LENDER_SRIOV:-0}" != 1 ] || [ "$l" != lender ] || ag_sriov_up
	expect "$l: vfio-pci and the IOMMU are there" \
		rig_run "$l" -- "modprobe -a vfio-pci vfio_iommu_type1 && test -e /sys/bus/pci/devices/$AG_LENT/iommu_group"
	ag_config "$l" "${1:-}"
	expect "$l: farpass-agent starts" ag_start "$l"
	for pci in $AG_LENT $AG_LENT_ALSO; do
		expect "$l: farpassctl lend $pci" ag_ctl "$l" lend "$pci"
		expect_eq "$l: $pci is bound to vfio-pci" \
			"$(rig_run "$l" -- "basename \$(readlink /sys/bus/pci/devices/$pci/driver)")" vfio-pci
	done
}

# ag_type_of VM PCI [LENDER]: the mdev type on VM's NTB towards LENDER (default $AG_LENDER) whose slot
# holds that lender's device PCI (its description starts "LENDER VVVV:DDDD (PCI):"; empty if none does).
ag_type_of() {
	rig_run "$1" -- "cd /sys/class/mdev_bus/$(ntb_pci "$1" "$(rig_link "${3:-$AG_LENDER}" "$1")")/mdev_supported_types 2>/dev/null &&
grep -lsF ' ($2):' */description | cut -d/ -f1" || true
}

# ag_device_id VM PCI [LENDER]: the farpass id VM's agent announced LENDER's (default $AG_LENDER) device
# PCI under (what upcalls and DMA_LAYOUT name it by).
ag_device_id() {
	ag_ctl "$1" --json status | jq -r --arg l "${3:-$AG_LENDER}" --arg p "$2" \
		'.remote_devices[] | select(.lender == $l and .pci == $p) | .id'
}

# ag_remote_mdev "VM..." UUID [LENDER-FRAGMENT] [BORROWER-FRAGMENT]: farpass.ko on every lender of the
# rig and each borrower VM, their agents (the lender lends $AG_LENT and $AG_LENT_ALSO, lender2 if the rig
# has it $AG_LENT2, to each VM over their link; each VM's agent has every lender as a peer), the mdev
# types awaited on each VM's NTB towards their lender, and instance UUID of the lender's $AG_LENT created
# there (the same UUID on every borrower, as farpassctl mdev-uuid gives). The fragments add agent config
# keys ('"lease_ms": 6000'). AG_TYPE: the name of $AG_LENT's type (the same on every borrower).
ag_remote_mdev() {
	local vms=$1 uuid=$2 vm l pci peers
	local -A lent=([lender]=$AG_LENT [lender2]=$AG_LENT2) also=([lender]=$AG_LENT_ALSO [lender2]="")
	ag_pki
	for l in "${RIG_LENDER_VMS[@]}"; do
		fp_load "$l"
	done
	for vm in $vms; do
		fp_load "$vm"
	done
	for l in "${RIG_LENDER_VMS[@]}"; do
		peers=
		for vm in $vms; do
			peers+="${peers:+, }$(ag_peer_entry "$vm" "$(ntb_pci "$l" "$(rig_link "$l" "$vm")")")"
		done
		AG_LENDER=$l AG_LENT=${lent[$l]} AG_LENT_ALSO=${also[$l]} ag_lender_up ", ${3:+$3, }\"peers\": [$peers]"
	done
	for vm in $vms; do
		peers=
		for l in "${RIG_LENDER_VMS[@]}"; do
			peers+="${peers:+, }$(ag_peer_entry "$l" "$(ntb_pci "$vm" "$(rig_link "$l" "$vm")")")"
		done
		ag_config "$vm" ", \"poll_ms\": 1000, ${4:+$4, }\"peers\": [$peers]"
		expect "$vm: farpass-agent starts" ag_start "$vm"
		# The first lender's last, so that AG_TYPE ends as $AG_LENT's.
		for l in $(printf '%s\n' "${RIG_LENDER_VMS[@]}" | tac); do
			for pci in ${also[$l]} ${lent[$l]}; do
				AG_TYPE=
				for _ in $(seq 30); do
					AG_TYPE=$(ag_type_of "$vm" "$pci" "$l")
					[ -n "$AG_TYPE" ] && break
					sleep 1
				done
				expect "$vm: the $l's $pci appears as an mdev type on the NTB: $AG_TYPE" test -n "$AG_TYPE"
			done
		done
		expect "$vm: create mdev $uuid" \
			rig_run "$vm" -- "echo $uuid > /sys/class/mdev_bus/$(ntb_pci "$vm")/mdev_supported_types/$AG_TYPE/create"
	done
}

# ag_extra_mdev VM PCI [LENDER]: an instance on VM of another device the lender lent with $AG_LENT (PCI,
# in $AG_LENT_ALSO), or of LENDER's device PCI (lender2: $AG_LENT2), under the UUID farpassctl mdev-uuid
# gives its type: AG_EXTRA_UUID.
ag_extra_mdev() {
	local type l=${3:-$AG_LENDER}
	type=$(ag_type_of "$1" "$2" "$l")
	AG_EXTRA_UUID=$(ag_ctl "$1" mdev-uuid "$type")
	expect "$1: create mdev $AG_EXTRA_UUID of $2${3:+ (of $3)}" \
		rig_run "$1" -- "echo $AG_EXTRA_UUID > /sys/class/mdev_bus/$(ntb_pci "$1" "$(rig_link "$l" "$1")")/mdev_supported_types/$type/create"
}

# ag_expect_returned VM SECONDS LABEL: VM's agent gave $AG_LENDER's $AG_LENT back within SECONDS, and the
# lender has it free again (ag_expect_free).
ag_expect_returned() {
	expect "$1: the agent gave it back" ag_wait_log "$1" "$2" "gave back $AG_LENDER/$AG_LENT"
	ag_expect_free "$3"
}

# ag_expect_free LABEL: the lender ($AG_LENDER) has no lease on $AG_LENT, lists it free, keeps it on
# vfio-pci, with bus master off (and, the reset seen in the device's registers: an NVMe's CSTS.RDY 0, an
# e1000e's receive control 0).
ag_expect_free() {
	local label=$1 cmd csts rctl l=$AG_LENDER
	expect_eq "$label $l: no lease on $AG_LENT left" \
		"$(ag_ctl "$l" --json borrows | jq -r --arg p "$AG_LENT" '[.leases[] | select(.pci == $p)] | length')" 0
	expect_eq "$label $l: list shows it free" \
		"$(ag_ctl "$l" --json list | jq -r --arg p "$AG_LENT" '.devices[] | select(.pci == $p) | "\(.pci) \(.borrower)"')" "$AG_LENT null"
	expect_eq "$label $l: $AG_LENT is still on vfio-pci" \
		"$(rig_run "$l" -- "basename \$(readlink /sys/bus/pci/devices/$AG_LENT/driver)")" vfio-pci
	cmd=0x$(rig_run "$l" -- "setpci -s $AG_LENT COMMAND")
	echo "$l: command=$cmd"
	expect "$label $l: bus master off" test $((cmd & 4)) = 0
	case $(rig_run "$l" -- "cd /sys/bus/pci/devices/$AG_LENT && echo \$(cat class vendor device)") in
	"0x010802 "*)
		csts=$(rig_mmio32 "$l" "$AG_LENT" 0 0x1c) ||
			{ echo "FAIL $label $l: CSTS not read through sysfs resource0" && return 1; }
		echo "$l: csts=$csts"
		expect "$label $l: controller reset (CSTS.RDY 0)" test $((csts & 1)) = 0
		;;
	"0x020000 0x8086 0x10d3")
		rctl=$(rig_mmio32 "$l" "$AG_LENT" 0 0x100) ||
			{ echo "FAIL $label $l: RCTL not read through sysfs resource0" && return 1; }
		expect_eq "$label $l: NIC reset (receive control)" "$rctl" 0x0
		;;
	esac
}
