# shellcheck shell=bash
# Helpers for the NTB rig tests (sourced after rig.sh): load the upstream NTB stack in an L1, find the
# NTB of a link, poll for a condition, and assertions that print what they compared.

# PCI name of the NTB of link N in VM, as rig.sh places them (its header): a lender's NTB towards
# borrowerB is in slot 9+B, a borrower's towards lenderL in slot 0xa+L-1. N defaults to VM's link with
# the first lender or borrower1 (lender: 1, lender2: 3, borrowerB: B).
ntb_pci() {
	local vm=$1 link=${2:-} b
	case $vm in
	lender*)
		link=${link:-$(rig_link "$vm" borrower1)}
		b=$(rig_link_borrower "$link")
		printf '0000:00:%02x.0\n' $((9 + ${b#borrower}))
		;;
	*)
		link=${link:-$(rig_link lender "$vm")}
		printf '0000:00:%02x.0\n' $((0xa + $(_rig_lender_index "$(rig_link_lender "$link")") - 1))
		;;
	esac
}

# ntb_load VM MODULE [PARAM=VALUE...]: the NTB core, ntb_hw_epf and MODULE, each unless loaded.
ntb_load() {
	local vm=$1 module=$2
	shift 2
	rig_run "$vm" -- "set -e; cd $(rig_modules_dir)
lsmod | grep -q '^ntb_hw_epf ' || { insmod ntb.ko; insmod ntb_hw_epf.ko; }
lsmod | grep -q '^$module ' || insmod $module.ko $*"
}

# ntb_wait VM SECONDS SHELL-CONDITION: true once the condition holds in VM, polled every 0.2 s.
ntb_wait() {
	local vm=$1 seconds=$2
	shift 2
	rig_run "$vm" --timeout $((seconds + 10)) -- \
		"for i in \$(seq $((seconds * 5))); do { $*; } >/dev/null 2>&1 && exit 0; sleep 0.2; done; exit 1"
}

# expect_eq WHAT ACTUAL EXPECTED
expect_eq() {
	if [ "$2" = "$3" ]; then
		printf 'ok   %s: %s\n' "$1" "$2"
	else
		printf 'FAIL %s: got "%s", expected "%s"\n' "$1" "$2" "$3"
		return 1
	fi
}

# expect WHAT COMMAND...: the command succeeds.
expect() {
	local what=$1
	shift
	if "$@"; then
		printf 'ok   %s\n' "$what"
	else
		printf 'FAIL %s\n' "$what"
		return 1
	fi
}

# The other end of link 1.
declare -A NTB_PEER=([lender]=borrower1 [borrower1]=lender)

# Shell prelude for ntb_tool's debugfs in VM: $D is the directory of its NTB of link LINK (ntb_pci's
# default), $P that of its peer.
ntb_tool_dir() { echo "D=/sys/kernel/debug/ntb_tool/$(ntb_pci "$1" "${2:-}"); P=\$D/peer0"; }

# ntb_tool_up VM[:LINK]...: ntb_tool loaded and the link (LINK, or ntb_pci's default) requested in each
# VM, then up as each of them sees it.
ntb_tool_up() {
	local end vm link
	for end; do
		vm=${end%%:*} link=${end#"$vm"}
		ntb_load "$vm" ntb_tool
		rig_run "$vm" -- "$(ntb_tool_dir "$vm" "${link#:}"); echo Y > \$D/link"
	done
	for end; do
		vm=${end%%:*} link=${end#"$vm"}
		expect "$vm: link ${link#:}${link:+ }up" ntb_wait "$vm" 30 "$(ntb_tool_dir "$vm" "${link#:}"); grep -q Y \$P/link"
	done
}

# ntb_perf_ready VM MODULE-PARAMS...: ntb_perf loaded on both ends of link 1 with the same parameters,
# and their buffers exchanged. Prints the debugfs directory of VM's ntb_perf.
ntb_perf_ready() {
	local vm=$1 end dir
	shift
	for end in "$vm" "${NTB_PEER[$vm]}"; do
		ntb_load "$end" ntb_perf "$@" >/dev/null
	done
	for end in "$vm" "${NTB_PEER[$vm]}"; do
		dir=/sys/kernel/debug/ntb_perf/$(ntb_pci "$end")
		ntb_wait "$end" 60 "grep -q 'Link status: up' $dir/info && grep -q 'In buffer xlat' $dir/info" || return
	done
	echo "/sys/kernel/debug/ntb_perf/$(ntb_pci "$vm")"
}

# ntb_perf_run VM MODULE-PARAMS...: ntb_perf_ready, then one run from VM to its peer (the write to
# `run` returns when it is over); prints the run's statistics.
ntb_perf_run() {
	local dir
	dir=$(ntb_perf_ready "$@") || return
	rig_run "$1" --timeout 300 -- "echo 0 > $dir/run && cat $dir/run"
}

# rig_time_ms VM COMMAND: run COMMAND in VM and print how long that took in ms, measured on L0: an L1's
# clock can stall while its vCPU waits in the NTB (TCG under host load marks the TSC unstable).
rig_time_ms() {
	local t0
	t0=$(date +%s%N)
	rig_run "$1" -- "$2" >/dev/null
	echo $((($(date +%s%N) - t0) / 1000000))
}

# Ethernet over the NTB (ntb_transport + ntb_netdev) on link 1: 10.98.0.1 on the lender, .2 on borrower1.
declare -A NTB_NET_IP=([lender]=10.98.0.1 [borrower1]=10.98.0.2)
# Shell text printing the interface ntb_netdev created.
NTB_NETDEV='for i in /sys/class/net/*; do if [ "$(basename "$(readlink "$i/device/driver")")" = ntb_netdev ]; then echo "${i##*/}"; fi; done'

# ntb_net_up VM: transport (small inbound buffers: the default would be the whole 1 GiB MW2) and netdev
# loaded, the interface addressed and up. Fails if ntb_netdev makes no interface within 10 s (it appears
# a moment after the insmod).
ntb_net_up() {
	ntb_load "$1" ntb_transport max_mw_size=0x200000
	rig_run "$1" -- "set -e; lsmod | grep -q '^ntb_netdev ' || insmod $(rig_modules_dir)/ntb_netdev.ko
for i in \$(seq 50); do dev=\$($NTB_NETDEV); [ -n \"\$dev\" ] && break; sleep 0.2; done
[ -n \"\$dev\" ]; ip addr add ${NTB_NET_IP[$1]}/24 dev \$dev; ip link set \$dev up"
}

# ntb_net_carrier VM: the NTB interface has carrier within 60 s.
ntb_net_carrier() { ntb_wait "$1" 60 "[ \$(cat /sys/class/net/\$($NTB_NETDEV)/carrier) = 1 ]"; }

# ------------------------------------------------------------------------------ kernel log health

# What no kernel log of a passing test shows: warnings, BUGs (soft lockups too), oopses, RCU stalls,
# hung tasks, hard lockups, and IOMMU (DMAR) faults: fault records, the fault handler's status line,
# rate-limited fault reports.
KLOG_BAD_RE='WARNING|BUG|Oops|general protection fault|Kernel panic|rcu: INFO|detected stall|blocked for more than|hard LOCKUP|DMAR.*fault|dmar_fault'
# A DMAR fault record: "DMAR: [DMA Read NO_PASID] Request device [00:0a.0] fault addr 0xbc000000 [...".
KLOG_FAULT_RE='DMAR: \[DMA (Read|Write)[^]]*\] Request device \[[0-9a-f:.]+\] fault addr 0x[0-9a-f]+'

# klog_bad_lines LOG [ADDRESS[+SIZE]|ir:REASON...]: the lines of kernel log LOG that KLOG_BAD_RE finds,
# except DMAR fault records at a given ADDRESS, or in [ADDRESS, ADDRESS+SIZE), and interrupt-remapping
# fault records of a given REASON ("DMAR: [INTR-REMAP] ... [fault reason 0x25] ...") (faults the test
# provoked), and the fault handler's status lines ("DRHD: handling fault status reg", which the records
# follow).
klog_bad_lines() {
	local log=$1
	shift
	grep -E "$KLOG_BAD_RE" <<<"$log" | awk -v provoked="$*" '
		function norm(a) { a = tolower(a); sub(/^0x0*/, "", a); return a }
		function num(a,   v, i) { a = norm(a); v = 0; for (i = 1; i <= length(a); i++) v = v * 16 + index("0123456789abcdef", substr(a, i, 1)) - 1; return v }
		BEGIN {
			n = split(provoked, p, " ")
			for (i = 1; i <= n; i++) {
				if (p[i] ~ /^ir:/) ir[norm(substr(p[i], 4))] = 1
				else if (split(p[i], r, "+") == 2) { lo[++nr] = num(r[1]); hi[nr] = lo[nr] + num(r[2]) } else prov[norm(p[i])] = 1
			}
		}
		/DMAR: DRHD: handling fault status reg/ { next }
		match($0, /fault addr 0x[0-9a-f]+/) && /DMAR: \[DMA (Read|Write)/ {
			addr = norm(substr($0, RSTART + 11, RLENGTH - 11))
			if (addr in prov) next
			for (i = 1; i <= nr; i++) if (num(addr) >= lo[i] && num(addr) < hi[i]) next
		}
		match($0, /fault reason 0x[0-9a-f]+/) && /DMAR: \[INTR-REMAP\]/ {
			if (norm(substr($0, RSTART + 13, RLENGTH - 13)) in ir) next
		}
		{ print }'
}

# expect_klog_clean VM [--fault ADDRESS[+SIZE]]... [--ir-fault REASON]... [--also REGEX]: VM's kernel log
# (dmesg) has none of KLOG_BAD_RE (nor REGEX), but for DMAR faults at the ADDRESSes (or ranges) and
# interrupt-remapping faults of the REASONs the test provoked; prints the lines that are there. The log is kept in $RIGDIR/VM/dmesg.txt.
expect_klog_clean() {
	local vm=$1 provoked=() also= log bad what
	shift
	while (($#)); do
		case $1 in
		--fault) provoked+=("$2"); shift 2 ;;
		--ir-fault) provoked+=("ir:$2"); shift 2 ;;
		--also) also=$2; shift 2 ;;
		*) echo "expect_klog_clean: unknown argument $1" >&2; return 2 ;;
		esac
	done
	log=$(rig_run "$vm" -- dmesg) || { echo "FAIL $vm: dmesg did not run"; return 1; }
	printf '%s\n' "$log" >"$(rig_vm_dir "$vm")/dmesg.txt"
	what="$vm: kernel log has no warning, BUG, oops, RCU stall, hung task or DMAR fault${also:+, nor /$also/}"
	((${#provoked[@]} == 0)) || what+=" (but the faults provoked: ${provoked[*]})"
	bad=$(
		klog_bad_lines "$log" "${provoked[@]}"
		[ -z "$also" ] || grep -E "$also" <<<"$log" || true
	)
	if [ -z "$bad" ]; then
		printf 'ok   %s\n' "$what"
	else
		printf 'FAIL %s; it has:\n%s\n' "$what" "$bad"
		return 1
	fi
}
