# shellcheck shell=bash
# Helpers for the NTB rig tests (sourced after rig.sh): load the upstream NTB stack in an L1, find the
# NTB of a link, poll for a condition, and assertions that print what they compared.

# PCI name of the NTB of link N (default 1) in VM, as rig.sh places them: the lender's NTB for link N
# is in slot 9+N, a borrower's is in slot 0xa.
ntb_pci() {
	local vm=$1 link=${2:-1}
	if [ "$vm" = lender ]; then
		printf '0000:00:%02x.0\n' $((9 + link))
	else
		printf '0000:00:0a.0\n'
	fi
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

# Shell prelude for ntb_tool's debugfs in VM: $D is its NTB's directory, $P that of its peer.
ntb_tool_dir() { echo "D=/sys/kernel/debug/ntb_tool/$(ntb_pci "$1"); P=\$D/peer0"; }

# ntb_tool_up VM...: ntb_tool loaded and the link requested in each VM, then up as each of them sees it.
ntb_tool_up() {
	local vm
	for vm; do
		ntb_load "$vm" ntb_tool
		rig_run "$vm" -- "$(ntb_tool_dir "$vm"); echo Y > \$D/link"
	done
	for vm; do
		expect "$vm: link up" ntb_wait "$vm" 30 "$(ntb_tool_dir "$vm"); grep -q Y \$P/link"
	done
}
