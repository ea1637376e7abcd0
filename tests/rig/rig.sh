# shellcheck shell=bash
# The rig launcher: a library that L0 test scripts source.
#
#   . tests/rig/rig.sh
#   rig_up [--borrowers 1|2] [--lenders 1|2] [--lender-mem MiB] [--borrower-mem MiB]
#          [--l1-root host|rootfs|debroot]
#   rig_run lender [--timeout S] -- 'insmod $(rig_modules_dir)/ntb.ko && lsmod'
#   rig_kill borrower1; rig_boot borrower1; rig_down
#
# VMs: "lender" (10.99.0.1) and "borrower1" (.2), "borrower2" (.3), with --lenders 2 "lender2" (.4), all L1
# guests of $FARPASS_QEMU under TCG with intel-iommu in DMA-translation mode. Each lender is linked to each
# borrower by its own NTB, one device on each side ($RIGDIR/linkN.sock). Links are numbered so that the
# first lender's keep their numbers whatever the rig has: link N = 2 × (lender index - 1) + borrower
# index (rig_link LENDER BORROWER), i.e. lender-borrower1 1, lender-borrower2 2, lender2-borrower1 3,
# lender2-borrower2 4. A lender's NTB towards borrowerB is in slot 9+B (0xa, 0xb); a borrower's towards
# lenderL in slot 0xa+L-1 (0xa towards lender, 0xb towards lender2); QEMU device id ntbN on both ends
# (ntb-lib.sh's ntb_pci VM [LINK]). Each VM's files are in $RIGDIR/<vm>/ (console.log, qemu.log,
# server.log, cmd/), shared into the VM as 9p tag "out" at the same path.
# L1's root is L0's own root (read-only 9p + tmpfs overlay: writes stay in the VM); with
# --l1-root rootfs it is the mmdebstrap'ed libvirt root (setup.sh rootfs), with the repo and the cache
# bind-mounted at their L0 paths and L0's root at /mnt/l0; with --l1-root debroot that root with this
# checkout's Debian packages installed (setup.sh debroot: its layers, which rig_up mounts read-only as one
# overlay at $RIGDIR/l1-root), whose own /lib/modules the L1 keeps (its linux-image's and DKMS's modules).
#
# Environment:
#   RIGDIR           results/logs directory (default <repo>/rig-out/<name of the test script>)
#   RIG_NO_NTB=1     no NTB devices (and Debian's QEMU is accepted when the patched one is not built)
#   RIG_QEMU         QEMU binary (default $FARPASS_QEMU)
#   RIG_NTB_DEVICE   NTB device model (default ntb-epf); RIG_NTB_PROPS: extra ",prop=val" for it
#   RIG_APPEND       extra L1 kernel command line;  RIG_QEMU_EXTRA: extra QEMU arguments (all VMs)
#   RIG_LENDER_EXTRA extra QEMU arguments for the lender only (e.g. "-device edu,addr=0x6");
#   RIG_LENDER2_EXTRA, RIG_BORROWER1_EXTRA, RIG_BORROWER2_EXTRA: the same for one other VM
#   RIG_LENDER_NVMES the lender's NVMe controllers (default 1), each with its own backing file on L0
#                    (rig_lender_nvme_img K, rig_lender_nvme_pci K: K from 0); RIG_LENDER2_NVMES: lender2's
#                    (default 1; rig_lender_nvme_img K lender2)
#   RIG_LENDER_NVME_PROPS, RIG_LENDER2_NVME_PROPS: extra ",prop=val" for that lender's NVMe controllers
#                    (e.g. ",cmb_size_mb=2": a controller memory buffer in BAR2)
#   RIG_LENDER_SRIOV=1 the lender also has an SR-IOV NVMe (PF rig_lender_sriov_pci 0 behind a root port,
#                    2 VFs rig_lender_sriov_pci 1|2) with two detached namespaces, nsid K's backing file
#                    rig_lender_sriov_img K (K 1, 2); agent-lib.sh's ag_sriov_up brings the VFs online,
#                    nsid K attached to VF K only
#   RIG_BOOT_TIMEOUT seconds to wait for a VM to be ready (default 240)
#   RIG_RUN_TIMEOUT  default rig_run timeout (default 600)
#   RIG_TCG_THREAD   the L1s' TCG threading, single (default) or multi (unsafe: see _rig_prepare_vm)
#   RIG_LINK_RELAY=1 each link runs through a relay on L0 ($RIGDIR/relayN.sock, link-relay.cpp) that
#                    rig_link_cut N and rig_link_restore N pull out and plug back

RIG_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$RIG_LIB/../../vm-images/env.sh"
. "$RIG_LIB/l1-hang.sh"
# The management LAN hub, built by meson (make build).
RIG_LAN_HUB=$FARPASS_TOP/build/tests/rig/lan-hub
RIG_LINK_RELAY_BIN=$FARPASS_TOP/build/tests/rig/link-relay

RIG_NTB_DEVICE=${RIG_NTB_DEVICE:-ntb-epf}
RIG_BOOT_TIMEOUT=${RIG_BOOT_TIMEOUT:-240}
RIG_RUN_TIMEOUT=${RIG_RUN_TIMEOUT:-600}
RIG_TCG_THREAD=${RIG_TCG_THREAD:-single}
# The lender's NIC, for RIG_LENDER_EXTRA: QEMU's e1000e (82574L, MSI-X) on user-mode networking (slirp
# on L0: its 10.0.2.2 is L0's loopback), with no option ROM (the mdev passes none).
RIG_NIC_PCI=0000:00:09.0
RIG_NIC_LENDER_EXTRA="-netdev user,id=lnet -device e1000e,netdev=lnet,addr=0x9,romfile="
RIG_VMS=()
declare -gA RIG_PID=()
declare -gA RIG_T0=()
RIG_UP=0

rig_log() { printf 'rig: %s\n' "$*" >&2; }
rig_die() {
	rig_log "ERROR: $*"
	return 1
}

# --------------------------------------------------------------------------------- paths and helpers

rig_dir() { printf '%s\n' "$RIGDIR"; }
rig_vm_dir() { printf '%s/%s\n' "$RIGDIR" "$1"; }
# rig_lender_nvme_img [K [LENDER]], rig_lender_nvme_pci [K]: the backing file of NVMe K of LENDER (default
# the first lender), and its PCI address, the same on each lender (0: the one every lender has, at
# 00:08.0; the others from 00:10.0 on, clear of the NTBs).
rig_lender_nvme_img() { local k=${1:-0}; printf '%s/%s-nvme%s.img\n' "$RIGDIR" "${2:-lender}" "${k#0}"; }
rig_lender_nvme_pci() { printf '0000:00:%02x.0\n' "$(_rig_lender_nvme_slot "${1:-0}")"; }
_rig_lender_nvme_slot() { echo $(($1 ? 0x10 + $1 - 1 : 0x8)); }
# rig_lender_sriov_img K, rig_lender_sriov_pci VF: RIG_LENDER_SRIOV's namespace K's backing file, and its PF
# (VF 0) or VF VF (its root port at 00:0c.0 gives it bus 1).
rig_lender_sriov_img() { printf '%s/lender-sriov-ns%s.img\n' "$RIGDIR" "$1"; }
rig_lender_sriov_pci() { printf '0000:01:00.%s\n' "$1"; }
# Where the built .ko files are; the same path inside L1 (it runs on L0's root).
rig_modules_dir() { printf '%s\n' "$FARPASS_KO_DIR"; }
rig_vm_ip() {
	local n
	n=$(_rig_vm_num "$1") || return
	echo "10.99.0.$n"
}
# A VM's number: its management IP's last byte, its MAC's last byte and its LAN hub port's offset.
_rig_vm_num() {
	case $1 in
	lender) echo 1 ;;
	borrower1) echo 2 ;;
	borrower2) echo 3 ;;
	lender2) echo 4 ;;
	*) return 1 ;;
	esac
}

# rig_link LENDER BORROWER: the number of the link between them (header: the first lender's links keep
# their numbers in a rig with two lenders); rig_link_lender N, rig_link_borrower N: its ends.
rig_link() { echo $((2 * ($(_rig_lender_index "$1") - 1) + ${2#borrower})); }
rig_link_lender() { (($1 <= 2)) && echo lender || echo lender2; }
rig_link_borrower() { echo "borrower$((($1 - 1) % 2 + 1))"; }
_rig_lender_index() {
	case $1 in
	lender) echo 1 ;;
	lender2) echo 2 ;;
	*) return 1 ;;
	esac
}
# rig_links: the numbers of the rig's links, in order.
rig_links() {
	local l b
	for l in "${RIG_LENDER_VMS[@]}"; do
		for b in "${RIG_BORROWER_VMS[@]}"; do
			rig_link "$l" "$b"
		done
	done
}

_rig_now() { date +%s.%N; }
_rig_elapsed() { awk -v a="$1" -v b="$(_rig_now)" 'BEGIN { printf "%.1f", b - a }'; }

# Pick the QEMU: the patched one; Debian's only when the test asks for no NTB.
_rig_pick_qemu() {
	if [ -n "${RIG_QEMU:-}" ]; then
		return 0
	fi
	if [ -x "$FARPASS_QEMU" ]; then
		RIG_QEMU=$FARPASS_QEMU
	elif [ "${RIG_NO_NTB:-0}" = 1 ]; then
		RIG_QEMU=/usr/bin/qemu-system-x86_64
		rig_log "patched QEMU not built ($FARPASS_QEMU); using $RIG_QEMU (RIG_NO_NTB=1)"
	else
		rig_die "patched QEMU missing: run vm-images/setup.sh qemu (or RIG_NO_NTB=1 to run without NTB)"
	fi
}

_rig_check_setup() {
	local f
	for f in "${FARPASS_VMLINUX:-}" "${FARPASS_L1_INITRD:-}" "${FARPASS_KO_DIR:-}/ntb.ko"; do
		if [ -z "$f" ] || [ ! -e "$f" ]; then
			rig_die "rig not set up for kernel $FARPASS_KERNEL (missing ${f:-$FARPASS_RIG_ENV or $(rig_kernel_env "$FARPASS_KERNEL")}): run FARPASS_KERNEL=$FARPASS_KERNEL vm-images/setup.sh rig"
			return 1
		fi
	done
	case ${KVER:-} in
	"$FARPASS_KERNEL".*) ;;
	*) rig_die "FARPASS_KERNEL=$FARPASS_KERNEL but the set-up's L1 kernel is ${KVER:-none}" || return 1 ;;
	esac
	[ -x "$RIG_LAN_HUB" ] || rig_die "LAN hub not built (missing $RIG_LAN_HUB): run make build"
	[ "${RIG_LINK_RELAY:-0}" != 1 ] || [ -x "$RIG_LINK_RELAY_BIN" ] ||
		rig_die "link relay not built (missing $RIG_LINK_RELAY_BIN): run make build"
}

# PIDs of processes of this rig: any process whose command line names $RIGDIR/ (QEMUs and the LAN hub).
# Never matches unrelated QEMUs: those do not have our RIGDIR in their arguments.
_rig_find_pids() {
	local p cmd
	for p in /proc/[0-9]*; do
		cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
		case $cmd in
		*qemu-system*"$RIGDIR/"* | */lan-hub" --tag $RIGDIR "* | */link-relay" --tag $RIGDIR "*) echo "${p#/proc/}" ;;
		esac
	done
}

# Alive = exists and not a zombie (our disowned children are reaped by bash asynchronously).
_rig_pid_alive() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "${st%% *}" != Z ]
}

_rig_kill_pids() {
	local p i
	(($#)) || return 0
	kill -KILL "$@" 2>/dev/null || true
	for i in $(seq 100); do
		for p in "$@"; do
			_rig_pid_alive "$p" && break
			p=
		done
		[ -z "$p" ] && break
		sleep 0.05
	done
	return 0
}

_rig_kill_stale() {
	local pids
	pids=$(_rig_find_pids)
	if [ -n "$pids" ]; then
		rig_log "killing stale processes of $RIGDIR: $(echo $pids)"
		# shellcheck disable=SC2086
		_rig_kill_pids $pids
	fi
}

# ------------------------------------------------------------------------------------ management LAN

# Eight UDP ports on 127.0.0.1 (the hub's, then one per VM number), the first free block from one derived
# from RIGDIR: two rigs at once (two test dirs) never share a LAN, even when their
# directories hash alike.
_rig_lan_ports() {
	local h i base used
	h=$(printf '%s' "$RIGDIR" | cksum | cut -d' ' -f1)
	used=$(ss -Hnlu | awk '{ n = split($4, a, ":"); print a[n] }')
	for ((i = 0; i < 2000; i++)); do
		base=$((20000 + ((h + i) % 2000) * 8))
		awk -v b="$base" '$1 >= b && $1 < b + 8 { found = 1 } END { exit !found }' <<<"$used" || break
	done
	RIG_HUB_PORT=$base
}

_rig_start_hub() {
	local ports=() i
	# A port per VM number: 1 to 3 whatever the borrowers, 4 for lender2.
	for i in $(seq $((RIG_LENDERS == 2 ? 4 : 3))); do
		ports+=($((RIG_HUB_PORT + i)))
	done
	"$RIG_LAN_HUB" --tag "$RIGDIR" "$RIG_HUB_PORT" "${ports[@]}" \
		</dev/null >>"$RIGDIR/lan-hub.log" 2>&1 &
	RIG_HUB_PID=$!
	disown "$RIG_HUB_PID"
}

# ------------------------------------------------------------------------------------- link relays

# The borrower end of link N: the lender's socket, or with RIG_LINK_RELAY=1 the relay's.
_rig_link_socket() {
	if [ "${RIG_LINK_RELAY:-0}" = 1 ]; then
		echo "$RIGDIR/relay$1.sock"
	else
		echo "$RIGDIR/link$1.sock"
	fi
}

# One relay per link, started once the lender's sockets exist; each lasts as long as the rig.
declare -gA RIG_RELAY_PID=()
_rig_start_relays() {
	local link i
	[ "${RIG_LINK_RELAY:-0}" = 1 ] && [ "${RIG_NO_NTB:-0}" != 1 ] || return 0
	for link in $(rig_links); do
		"$RIG_LINK_RELAY_BIN" --tag "$RIGDIR" "$RIGDIR/relay$link.sock" "$RIGDIR/link$link.sock" \
			</dev/null >>"$RIGDIR/link-relay$link.log" 2>&1 &
		RIG_RELAY_PID[$link]=$!
		disown "${RIG_RELAY_PID[$link]}"
		for i in $(seq 100); do
			[ -S "$RIGDIR/relay$link.sock" ] && break
			sleep 0.05
		done
		[ -S "$RIGDIR/relay$link.sock" ] || rig_die "link relay $link did not start: $(cat "$RIGDIR/link-relay$link.log")" ||
			return
	done
}

# rig_link_cut N / rig_link_restore N: pull link N's cable out (both NTB ends see their peer gone, the
# borrower's reconnects are refused) and plug it back (its next reconnect brings the link up).
rig_link_cut() { _rig_link_signal "$1" USR1 cut; }
rig_link_restore() { _rig_link_signal "$1" USR2 restored; }
_rig_link_signal() {
	local pid=${RIG_RELAY_PID[$1]:-} n i
	[ -n "$pid" ] || rig_die "link $1 has no relay (rig_up with RIG_LINK_RELAY=1)" || return
	n=$(grep -c "\] $3" "$RIGDIR/link-relay$1.log" || true)
	kill -"$2" "$pid" || rig_die "link relay $1 (pid $pid) is gone" || return
	# Returns once the relay has acted on it.
	for i in $(seq 100); do
		(($(grep -c "\] $3" "$RIGDIR/link-relay$1.log" || true) > n)) && return 0
		sleep 0.05
	done
	rig_die "link relay $1 did not log '$3' within 5 s"
}

# ------------------------------------------------------------------------------------------ one VM

# Write the VM's QEMU argv (NUL-separated, so rig_boot replays it exactly) and a readable copy.
_rig_prepare_vm() {
	local vm=$1 n=$2 mem=$3 dir append link peer
	local -a a
	dir=$(rig_vm_dir "$vm")
	mkdir -p "$dir"
	# cryptomgr.notests: no crypto self-tests at boot (under TCG one hung a borrower's boot for 4 min).
	# iomem=relaxed: tests read a lent device's registers through sysfs resourceN (rig_mmio32) also
	# once vfio-pci holds the BAR (the lender's agent mmaps a peer's BAR for peer-to-peer), which Debian's
	# IO_STRICT_DEVMEM refuses otherwise.
	append="console=ttyS0 quiet panic=-1 no_timer_check intel_iommu=on cryptomgr.notests iomem=relaxed rig.vm=$vm"
	append+=" rig.out=$dir"
	append+=" rig.server=$RIG_LIB/rig-server.sh rig.ip=$(rig_vm_ip "$vm")/24"
	[ "$RIG_L1_ROOT" = debroot ] || append+=" rig.kmods=$FARPASS_KMODS"
	# l1-init.sh knows L0's root (host) and other trees (rootfs): a debroot is one of those.
	append+=" rig.l0binds=$FARPASS_TOP,$FARPASS_CACHE rig.root=${RIG_L1_ROOT/debroot/rootfs}"
	append+=" ${RIG_APPEND:-}"
	# maxmem reserves hotplug space after RAM, so the firmware puts the 64-bit PCI window above 64 GiB: a
	# device lent from here must not have a BAR at an address a borrowing guest uses as RAM (QEMU's NVMe
	# refuses DMA to an address inside its own BAR0, whatever the IOMMU translates it to).
	# thread=single: one thread runs both vCPUs in turn. QEMU 7.2's multi-threaded TCG can translate a
	# block while another vCPU patches its code and keep the stale block (fixed in QEMU 8.1): the L1
	# kernels' run-time code patching then ends in "Oops: int3" (docs/rig.md, tests/soak/test_code_patching.sh).
	# shellcheck disable=SC2206
	a=("$RIG_QEMU" $FARPASS_QEMU_FW
		-name "rig-$vm" -M q35,kernel-irqchip=split -accel "tcg,thread=$RIG_TCG_THREAD" -cpu max -smp 2
		-m "$mem,slots=1,maxmem=64G"
		-nodefaults -display none -no-reboot
		# DMA translation mode (no iommu=pt): every device's DMA goes through its IOMMU domain.
		-device intel-iommu,intremap=on,caching-mode=on
		# PVH entry of the uncompressed vmlinux: no decompression under TCG.
		-kernel "$FARPASS_VMLINUX" -initrd "$FARPASS_L1_INITRD" -append "$append"
		-chardev "file,id=con,path=$dir/console.log,append=on" -serial chardev:con
		-qmp "unix:$dir/qmp.sock,server=on,wait=off"
		-virtfs "local,path=$dir,mount_tag=out,security_model=none"
		-netdev "socket,id=mgmt,udp=127.0.0.1:$RIG_HUB_PORT,localaddr=127.0.0.1:$((RIG_HUB_PORT + n))"
		-device "virtio-net-pci,netdev=mgmt,mac=52:54:00:99:00:0$n,romfile=,addr=0x3"
	)
	if [ "$RIG_L1_ROOT" != host ]; then
		a+=(-virtfs "local,path=$RIG_L1_ROOT_DIR,mount_tag=host,security_model=none,readonly=on,multidevs=remap"
			-virtfs local,path=/,mount_tag=l0,security_model=none,readonly=on,multidevs=remap)
	else
		a+=(-virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap)
	fi
	if _rig_lender_index "$vm" >/dev/null; then
		local nvmes=RIG_${vm^^}_NVMES props=RIG_${vm^^}_NVME_PROPS
		for ((k = 0; k < ${!nvmes:-1}; k++)); do
			# Serials farpass-nvmeK on the lender, farpass2-nvmeK on lender2: a guest with both tells them apart.
			a+=(-drive "file=$(rig_lender_nvme_img $k "$vm"),if=none,id=nvme$k,format=raw,cache=writeback"
				-device "nvme,drive=nvme$k,serial=farpass${vm#lender}-nvme$k,addr=$(printf 0x%x "$(_rig_lender_nvme_slot $k)")${!props:-}")
		done
	fi
	if [ "$vm" = lender ] && [ "${RIG_LENDER_SRIOV:-0}" = 1 ]; then
		# VFs need a PCIe port above the PF (ARI and VF bus numbers). ag_sriov_up gives each VF 2 queues
		# (admin, one I/O) and 1 interrupt from the flexible pools; QEMU wants max_ioqpairs -
		# sriov_vq_flexible >= 2 for the PF. The namespaces start detached: only ag_sriov_up attaches them.
		a+=(-device pcie-root-port,id=sriovrp,chassis=1,slot=1,addr=0xc
			-device nvme-subsys,id=sriovsubsys,nqn=farpass-sriov
			-device nvme,id=sriovnvme,serial=farpass-sriov,subsys=sriovsubsys,bus=sriovrp,sriov_max_vfs=2,sriov_vq_flexible=8,sriov_vi_flexible=4,max_ioqpairs=10,msix_qsize=8)
		for k in 1 2; do
			a+=(-drive "file=$(rig_lender_sriov_img $k),if=none,id=sriovns$k,format=raw,cache=writeback"
				-device "nvme-ns,drive=sriovns$k,bus=sriovnvme,nsid=$k,detached=true,shared=false")
		done
	fi
	local extra=RIG_${vm^^}_EXTRA
	# shellcheck disable=SC2206
	a+=(${!extra:-})
	if [ "${RIG_NO_NTB:-0}" != 1 ]; then
		if _rig_lender_index "$vm" >/dev/null; then
			for peer in "${RIG_BORROWER_VMS[@]}"; do
				link=$(rig_link "$vm" "$peer")
				a+=(-device "$RIG_NTB_DEVICE,id=ntb$link,socket=$RIGDIR/link$link.sock,server=on,addr=$(printf 0x%x $((9 + ${peer#borrower})))${RIG_NTB_PROPS:-}")
			done
		else
			for peer in "${RIG_LENDER_VMS[@]}"; do
				link=$(rig_link "$peer" "$vm")
				a+=(-device "$RIG_NTB_DEVICE,id=ntb$link,socket=$(_rig_link_socket "$link"),server=off,addr=$(printf 0x%x $((0xa + $(_rig_lender_index "$peer") - 1)))${RIG_NTB_PROPS:-}")
			done
		fi
	fi
	# shellcheck disable=SC2206
	a+=(${RIG_QEMU_EXTRA:-})
	printf '%s\0' "${a[@]}" >"$dir/qemu.argv"
	printf '%q ' "${a[@]}" >"$dir/qemu.cmdline"
	echo >>"$dir/qemu.cmdline"
}

# Start the VM's QEMU in the background (as our child, so the EXIT trap and `wait` can reap it).
# REASON, if given, goes into the boot marker (l1-hang.sh: "after a kernel hang").
_rig_launch() {
	local vm=$1 reason=${2:-} dir
	local -a a
	dir=$(rig_vm_dir "$vm")
	mapfile -d '' a <"$dir/qemu.argv"
	rm -rf "$dir/cmd" "$dir/ready" "$dir/server.log"
	mkdir -p "$dir/cmd"
	RIG_T0[$vm]=$(_rig_now)
	l1_boot_marker "$vm" "${RIG_T0[$vm]}" "$reason" | tee -a "$dir/qemu.log" >>"$dir/console.log"
	# A lender listens on its links' sockets: a killed lender leaves stale ones behind.
	local link
	for link in $(rig_links); do
		[ "$(rig_link_lender "$link")" != "$vm" ] || rm -f "$RIGDIR/link$link.sock"
	done
	"${a[@]}" </dev/null >>"$dir/qemu.log" 2>&1 &
	RIG_PID[$vm]=$!
	# Not a job of the test's shell: no "Killed" notices when rig_kill/rig_down end it.
	disown "${RIG_PID[$vm]}"
	echo "${RIG_PID[$vm]}" >"$dir/pid"
}

rig_vm_alive() {
	local pid=${RIG_PID[$1]:-}
	[ -n "$pid" ] && _rig_pid_alive "$pid"
}

# Whether the VM's current boot hung in the kernel, not by our doing (l1-hang.sh); prints the report's
# first line, or why it may be ours.
_rig_boot_hung() {
	local dir
	dir=$(rig_vm_dir "$1")
	l1_hang_verdict --boot "$dir/console.log" "$dir/qemu.log" "${RIG_T0[$1]}"
}

# Wait until all given VMs' command servers are ready; prints each VM's boot time. A VM whose boot hung
# (_rig_boot_hung, checked once a second), or whose kernel crashed while booting with no frame of ours
# (l1_boot_crash_verdict), is booted again, once.
_rig_wait_ready_all() {
	local timeout=$RIG_BOOT_TIMEOUT t0 vm dir pending=("$@") left rc=0 hang crash
	local -A rebooted=() hang_checked=()
	t0=$SECONDS
	while ((${#pending[@]})); do
		left=()
		for vm in "${pending[@]}"; do
			dir=$(rig_vm_dir "$vm")
			if [ -e "$dir/ready" ]; then
				local secs
				secs=$(_rig_elapsed "${RIG_T0[$vm]}")
				rig_log "$vm ready: boot ${secs}s (guest $(cat "$dir/ready"))"
				printf '%s %s\n' "$vm" "$secs" >>"$RIGDIR/boot-times.txt"
				# Every test runs on the kernel FARPASS_KERNEL selected, or fails saying so.
				if ! grep -qwF "kernel=$KVER" "$dir/ready"; then
					rig_log "$vm booted $(sed -n 's/.*kernel=//p' "$dir/ready"), not $KVER (FARPASS_KERNEL=$FARPASS_KERNEL)"
					rc=1
				fi
			elif ! rig_vm_alive "$vm" && [ -z "${rebooted[$vm]:-}" ] &&
				crash=$(l1_boot_crash_verdict "$dir/console.log" "${RIG_T0[$vm]}"); then
				rig_log "$vm: its kernel crashed while booting ($crash); booting it again"
				rebooted[$vm]=1
				_rig_launch "$vm" "$L1_HANG_REBOOT_MARK"
				t0=$SECONDS
				left+=("$vm")
			elif ! rig_vm_alive "$vm"; then
				rig_log "$vm: QEMU exited during boot"
				_rig_show_logs "$vm"
				rc=1
			elif [ -z "${rebooted[$vm]:-}" ] && [ "${hang_checked[$vm]:-}" != $SECONDS ] &&
				hang_checked[$vm]=$SECONDS && hang=$(_rig_boot_hung "$vm"); then
				rig_log "$vm: its kernel hung while booting ($hang); booting it again"
				_rig_kill_pids "${RIG_PID[$vm]}"
				rebooted[$vm]=1
				_rig_launch "$vm" "$L1_HANG_REBOOT_MARK"
				t0=$SECONDS
				left+=("$vm")
			elif ((SECONDS - t0 > timeout)); then
				rig_log "$vm: not ready after ${timeout}s"
				_rig_show_logs "$vm"
				rc=1
			else
				left+=("$vm")
			fi
		done
		pending=("${left[@]}")
		((${#pending[@]})) && sleep 0.05
	done
	return $rc
}

rig_wait_ready() {
	local vm=$1
	shift
	if [ "${1:-}" = --timeout ]; then
		local RIG_BOOT_TIMEOUT=$2
	fi
	_rig_wait_ready_all "$vm"
}

_rig_show_logs() {
	local vm=$1 dir f report
	RIG_LOGS_SHOWN=1
	dir=$(rig_vm_dir "$vm")
	for f in qemu.log console.log server.log; do
		if [ -s "$dir/$f" ]; then
			printf -- '----- %s/%s (tail) -----\n' "$vm" "$f" >&2
			tail -n 25 "$dir/$f" | tr -d '\r' >&2
		fi
	done
	# A hang report scrolls out of the tail: which CPU stopped, and where, is in its backtraces.
	if report=$(l1_log_window "$dir/console.log" "${RIG_T0[$vm]:-0}" | l1_hang_report); then
		printf -- '----- %s: kernel hang report (%d lines, at most 200 shown) -----\n' "$vm" \
			"$(wc -l <<<"$report")" >&2
		head -n 200 <<<"$report" >&2
	fi
}

# ---------------------------------------------------------------------------------------- public API

rig_up() {
	local borrowers=1 lenders=1 lmem=2048 bmem=3072 vm n
	RIG_L1_ROOT=host
	while (($#)); do
		case $1 in
		--borrowers) borrowers=$2; shift 2 ;;
		--lenders) lenders=$2; shift 2 ;;
		--lender-mem) lmem=$2; shift 2 ;;
		--borrower-mem) bmem=$2; shift 2 ;;
		--l1-root) RIG_L1_ROOT=$2; shift 2 ;;
		*) rig_die "rig_up: unknown option $1" || return ;;
		esac
	done
	case $borrowers in 1 | 2) ;; *) rig_die "rig_up: --borrowers must be 1 or 2" || return ;; esac
	case $lenders in 1 | 2) ;; *) rig_die "rig_up: --lenders must be 1 or 2" || return ;; esac
	case $RIG_L1_ROOT in
	host) ;;
	rootfs)
		[ -e "${FARPASS_ROOTFS:-}/.done" ] || rig_die "no L1 rootfs: run vm-images/setup.sh rootfs" || return
		RIG_L1_ROOT_DIR=$FARPASS_ROOTFS
		;;
	debroot)
		[ -e "$(debroot_path)/.done" ] ||
			rig_die "no L1 root with this checkout's packages: run vm-images/setup.sh debroot" || return
		;;
	*) rig_die "rig_up: --l1-root must be host, rootfs or debroot" || return ;;
	esac
	RIG_LENDERS=$lenders
	RIGDIR=${RIGDIR:-$FARPASS_TOP/rig-out/$(basename "$0" .sh)}
	_rig_check_setup || return
	_rig_pick_qemu || return
	mkdir -p "$RIGDIR"
	RIGDIR=$(cd "$RIGDIR" && pwd)
	# UNIX socket paths (QMP, NTB links) must fit in sun_path (108 bytes with the NUL).
	local longest=$RIGDIR/borrower2/qmp.sock
	if ((${#longest} > 107)); then
		rig_die "RIGDIR $RIGDIR is too long for UNIX socket paths; set a shorter RIGDIR" || return
	fi
	_rig_kill_stale
	_rig_install_trap
	RIG_UP=1
	if [ "$RIG_L1_ROOT" = debroot ]; then
		_rig_mount_debroot || return
	fi
	RIG_LENDER_VMS=(lender)
	((lenders == 1)) || RIG_LENDER_VMS+=(lender2)
	RIG_BORROWER_VMS=()
	for ((n = 1; n <= borrowers; n++)); do
		RIG_BORROWER_VMS+=("borrower$n")
	done
	RIG_VMS=("${RIG_LENDER_VMS[@]}" "${RIG_BORROWER_VMS[@]}")
	rm -rf "$RIGDIR"/lender "$RIGDIR"/lender2 "$RIGDIR"/borrower[12] "$RIGDIR"/link*.sock "$RIGDIR"/relay*.sock \
		"$RIGDIR"/link-relay*.log "$RIGDIR/boot-times.txt"
	# Fresh sparse NVMe backing files per rig: tests start from a known state.
	rm -f "$RIGDIR"/lender-nvme*.img "$RIGDIR"/lender2-nvme*.img "$RIGDIR"/lender-sriov-ns*.img
	for vm in "${RIG_LENDER_VMS[@]}"; do
		local nvmes=RIG_${vm^^}_NVMES
		for ((n = 0; n < ${!nvmes:-1}; n++)); do
			truncate -s 256M "$(rig_lender_nvme_img $n "$vm")"
		done
	done
	if [ "${RIG_LENDER_SRIOV:-0}" = 1 ]; then
		truncate -s 256M "$(rig_lender_sriov_img 1)" "$(rig_lender_sriov_img 2)"
	fi
	_rig_lan_ports
	_rig_start_hub
	for vm in "${RIG_VMS[@]}"; do
		_rig_prepare_vm "$vm" "$(_rig_vm_num "$vm")" "$(_rig_lender_index "$vm" >/dev/null && echo "$lmem" || echo "$bmem")"
	done
	rig_log "up: ${RIG_VMS[*]} in $RIGDIR with $RIG_QEMU$([ "${RIG_NO_NTB:-0}" = 1 ] && echo ' (no NTB)')"
	for vm in "${RIG_LENDER_VMS[@]}"; do
		_rig_launch "$vm"
	done
	_rig_wait_ntb_sockets || return
	_rig_start_relays || return
	for vm in "${RIG_BORROWER_VMS[@]}"; do
		_rig_launch "$vm"
	done
	_rig_wait_ready_all "${RIG_VMS[@]}"
}

# The debroot layers as one read-only overlay (no upper: the L1 writes to its own tmpfs), mounted anew per rig.
_rig_mount_debroot() {
	local base pkg
	base=$(debroot_base_path) pkg=$(debroot_path)
	RIG_L1_ROOT_DIR=$RIGDIR/l1-root
	_rig_umount_debroot
	mkdir -p "$RIG_L1_ROOT_DIR"
	mount -t overlay overlay -o "ro,lowerdir=$pkg/upper:$base/upper:$FARPASS_ROOTFS" "$RIG_L1_ROOT_DIR" ||
		rig_die "cannot mount the debroot layers at $RIG_L1_ROOT_DIR"
}
# Lazily if a QEMU just killed still holds it.
_rig_umount_debroot() {
	! mountpoint -q "$RIGDIR/l1-root" || umount "$RIGDIR/l1-root" 2>/dev/null || umount -l "$RIGDIR/l1-root"
}

# The lenders' NTB ends listen (server=on): start borrowers once the sockets exist, so that their
# connect does not race a lender's QEMU start-up.
_rig_wait_ntb_sockets() {
	local link lender i
	[ "${RIG_NO_NTB:-0}" = 1 ] && return 0
	for link in $(rig_links); do
		lender=$(rig_link_lender "$link")
		for i in $(seq 200); do
			[ -S "$RIGDIR/link$link.sock" ] && break
			rig_vm_alive "$lender" || break
			sleep 0.05
		done
		if [ ! -S "$RIGDIR/link$link.sock" ]; then
			rig_log "$lender did not create $RIGDIR/link$link.sock"
			_rig_show_logs "$lender"
			return 1
		fi
	done
}

# rig_run VM [--timeout S] -- COMMAND...: run COMMAND (a bash script text) in VM; prints its output
# (stdout+stderr) and returns its exit code; 124 on timeout (the command is killed in the VM), 125 if
# the VM is down.
rig_run() {
	local vm=$1 timeout=$RIG_RUN_TIMEOUT dir id t0 rc
	shift
	while (($#)); do
		case $1 in
		--timeout) timeout=$2; shift 2 ;;
		--) shift && break ;;
		*) break ;;
		esac
	done
	dir=$(rig_vm_dir "$vm")/cmd
	if [ ! -e "$(rig_vm_dir "$vm")/ready" ] || ! rig_vm_alive "$vm"; then
		rig_log "rig_run $vm: VM is not up"
		return 125
	fi
	RIG_SEQ=$((${RIG_SEQ:-0} + 1))
	id=$(date +%s%N)-$$-$RIG_SEQ
	printf '%s\n' "$*" >"$dir/.$id.tmp"
	mv "$dir/.$id.tmp" "$dir/$id.sh"
	t0=$SECONDS
	# The server writes "CODE\n" in one write: a complete line means the command has finished.
	until [ -s "$dir/$id.rc" ] && read -r rc <"$dir/$id.rc"; do
		if ((SECONDS - t0 >= timeout)); then
			touch "$dir/$id.kill"
			mv "$dir/$id.sh" "$dir/$id.cmd" 2>/dev/null || true
			cat "$dir/$id.out" 2>/dev/null || true
			rig_log "rig_run $vm: timeout after ${timeout}s: $*"
			return 124
		fi
		if ! rig_vm_alive "$vm"; then
			cat "$dir/$id.out" 2>/dev/null || true
			rig_log "rig_run $vm: VM died while running: $*"
			return 125
		fi
		sleep 0.02
	done
	mv "$dir/$id.sh" "$dir/$id.cmd" 2>/dev/null || true
	cat "$dir/$id.out"
	return "$rc"
}

# rig_mmio32 VM PCI BAR OFFSET [VALUE]: a 32-bit register of device PCI's memory BAR in VM, reached
# around its driver through sysfs resourceBAR: VALUE written first when given, then read (printed in hex).
rig_mmio32() {
	rig_run "$1" -- "python3 -c 'import mmap, struct, sys
f = open(\"/sys/bus/pci/devices/$2/resource$3\", \"r+b\")
m = mmap.mmap(f.fileno(), ($4 // 4096 + 1) * 4096)
if len(sys.argv) > 1:
    struct.pack_into(\"<I\", m, $4, int(sys.argv[1], 0))
print(\"%#x\" % struct.unpack_from(\"<I\", m, $4)[0])' ${5:-}"
}

# SIGKILL the VM's QEMU (a crashed host: its NTB peers see the link go down).
rig_kill() {
	local vm=$1 pid=${RIG_PID[$1]:-}
	[ -n "$pid" ] && _rig_kill_pids "$pid"
	rm -f "$(rig_vm_dir "$vm")/ready"
	RIG_PID[$vm]=
	rig_log "$vm killed"
}

# Boot the VM again with the same arguments and wait for it (--no-wait: return at once).
rig_boot() {
	local vm=$1
	if rig_vm_alive "$vm"; then
		rig_die "rig_boot $vm: already running" || return
	fi
	_rig_launch "$vm"
	[ "${2:-}" = --no-wait ] && return 0
	_rig_wait_ready_all "$vm"
}

# Kill all VMs and the LAN; console logs stay in $RIGDIR/<vm>/console.log.
rig_down() {
	local vm pids=()
	[ "$RIG_UP" = 1 ] || return 0
	for vm in "${RIG_VMS[@]}"; do
		[ -n "${RIG_PID[$vm]:-}" ] && pids+=("${RIG_PID[$vm]}")
		RIG_PID[$vm]=
	done
	[ -n "${RIG_HUB_PID:-}" ] && pids+=("$RIG_HUB_PID")
	_rig_kill_pids "${pids[@]}"
	_rig_kill_stale
	_rig_umount_debroot
	rm -f "$RIGDIR"/link*.sock "$RIGDIR"/relay*.sock "$RIGDIR"/*/qmp.sock
	RIG_RELAY_PID=()
	RIG_UP=0
	rig_log "down; logs in $RIGDIR/{$(
		IFS=,
		echo "${RIG_VMS[*]}"
	)}/console.log"
}

# EXIT trap: whatever happens to the test (failure, set -e, Ctrl-C), no QEMU outlives it. On failure
# print the tails of the logs. A trap the test had set before rig_up still runs afterwards.
_rig_install_trap() {
	local prev
	prev=$(trap -p EXIT | sed -e "s/^trap -- '//" -e "s/' EXIT\$//")
	# A second rig_up in one script finds our own trap: calling it from itself would recurse until bash
	# crashes (status 139).
	[ "$prev" = _rig_on_exit ] || RIG_PREV_EXIT_TRAP=$prev
	trap '_rig_on_exit' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

_rig_on_exit() {
	local rc=$? vm
	set +e
	if [ "$RIG_UP" = 1 ]; then
		if ((rc != 0)) && [ -z "${RIG_LOGS_SHOWN:-}" ]; then
			rig_log "test failed (rc=$rc): log tails follow"
			for vm in "${RIG_VMS[@]}"; do
				_rig_show_logs "$vm"
			done
		fi
		rig_down
	fi
	if [ -n "${RIG_PREV_EXIT_TRAP:-}" ]; then
		eval "$RIG_PREV_EXIT_TRAP"
	fi
	exit $rc
}
