#!/bin/bash
# Test of the rig launcher itself (rig.sh): boots two lenders and one borrower (rig_up --lenders 2), and
# checks in each L1 the kernel, the out-of-tree NTB modules, the management LAN, and that intel-iommu is
# in DMA-translation mode. With the patched QEMU it also checks that the emulated NTBs show up and that
# ntb_hw_epf binds them, borrower1 having one per lender, and that both of borrower1's links come up,
# each to the lender rig.sh numbers it for (a scratchpad each lender writes over its link is read on
# borrower1's NTB towards that lender, not on the other). Then rig_run's exit codes and timeout, and
# rig_kill/rig_boot.
#
#   tests/rig/test_rig_launcher.sh   (RIG_NO_NTB=1: no NTB devices, Debian's QEMU if ours is not built)
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

PASS=0 FAIL=0
check() {
	local what=$1
	shift
	if "$@"; then
		printf 'ok   %s\n' "$what"
		PASS=$((PASS + 1))
	else
		printf 'FAIL %s\n' "$what"
		FAIL=$((FAIL + 1))
	fi
}

# Run in a VM, capture the output (printed too, indented) for the checks that follow.
out() {
	local vm=$1
	shift
	OUT=$(rig_run "$vm" -- "$@" 2>&1) || {
		local rc=$?
		printf '%s\n' "$OUT" | sed "s/^/    $vm: /"
		return $rc
	}
	printf '%s\n' "$OUT" | sed "s/^/    $vm: /"
}

# A killed QEMU is gone or at most a zombie not yet reaped by this shell.
_rig_kill_gone() { ! _rig_pid_alive "$1"; }

rig_up --borrowers 1 --lenders 2
KO=$(rig_modules_dir)
NTB=$([ "${RIG_NO_NTB:-0}" = 1 ] && echo 0 || echo 1)

for vm in lender lender2 borrower1; do
	check "$vm: kernel is $KVER" out "$vm" 'uname -r'
	check "$vm: uname matches" test "$OUT" = "$KVER"
	check "$vm: insmod ntb.ko ntb_hw_epf.ko" out "$vm" "insmod $KO/ntb.ko && insmod $KO/ntb_hw_epf.ko && lsmod | grep ^ntb"
	check "$vm: lsmod shows ntb and ntb_hw_epf" grep -q '^ntb_hw_epf .*' <<<"$OUT"
	check "$vm: IOMMU groups exist" out "$vm" 'test "$(ls /sys/kernel/iommu_groups | wc -l)" -gt 0 && ls /sys/kernel/iommu_groups | wc -l'
	check "$vm: DMAR on, translated default domain" out "$vm" \
		'dmesg | grep -iE "DMAR: (Host address|Intel|IOMMU enabled)|Default domain type" | head -5; dmesg | grep -q "Default domain type: Translated"'
	check "$vm: no iommu=pt on the command line" out "$vm" '! grep -q iommu=pt /proc/cmdline'
	if ((NTB)); then
		check "$vm: lspci shows the NTB (104c:b00d)" out "$vm" 'lspci -nnk -d 104c:b00d; lspci -n -d 104c:b00d | grep -q .'
		check "$vm: ntb_hw_epf bound" out "$vm" \
			'ls /sys/bus/pci/drivers/ntb_hw_epf/ | grep -E "^0000:"; ls /sys/bus/ntb/devices/'
	fi
done
check "LAN: lender pings borrower1" out lender 'ping -c 3 -W 2 -i 0.3 10.99.0.2'
check "LAN: borrower1 pings lender" out borrower1 'ping -c 1 -W 2 10.99.0.1'
check "LAN: lender2 pings borrower1" out lender2 'ping -c 1 -W 2 10.99.0.2'
check "LAN: borrower1 pings lender2" out borrower1 'ping -c 1 -W 2 10.99.0.4'
if ((NTB)); then
	L1=$(rig_link lender borrower1) L3=$(rig_link lender2 borrower1)
	check "borrower1: ntb_hw_epf bound its NTB towards each lender ($(ntb_pci borrower1 "$L1"), $(ntb_pci borrower1 "$L3"))" \
		out borrower1 "ls /sys/bus/pci/drivers/ntb_hw_epf/$(ntb_pci borrower1 "$L1") /sys/bus/pci/drivers/ntb_hw_epf/$(ntb_pci borrower1 "$L3") >/dev/null"
	ntb_tool_up "lender:$L1" "lender2:$L3" "borrower1:$L1" "borrower1:$L3"
	for link in $L1 $L3; do
		l=$(rig_link_lender "$link")
		rig_run "$l" -- "$(ntb_tool_dir "$l" "$link"); echo 0x5ca1a00$link > \$P/spad3" >/dev/null
	done
	for link in $L1 $L3; do
		check "borrower1: link $link's NTB holds the scratchpad $(rig_link_lender "$link") wrote (0x5ca1a00$link)" \
			out borrower1 "$(ntb_tool_dir borrower1 "$link"); test \$(cat \$D/spad3) = 0x5ca1a00$link"
	done
fi
t0=$(date +%s%N)
check "rig_run: round trip" out lender 'true'
echo "    rig_run round trip: $((($(date +%s%N) - t0) / 1000000)) ms"
set +e
rig_run lender -- 'exit 7' >/dev/null
rc=$?
rig_run lender --timeout 2 -- 'sleep 30' >/dev/null 2>&1
rc_to=$?
set -e
check "rig_run: exit code 7 passed through" test "$rc" = 7
check "rig_run: timeout returns 124" test "$rc_to" = 124
check "rig_run: timed-out command was killed" out lender 'sleep 0.5; ! pgrep -x sleep'

pid=${RIG_PID[borrower1]}
rig_kill borrower1
check "rig_kill: borrower1 QEMU gone" _rig_kill_gone "$pid"
check "rig_boot: borrower1 boots again" rig_boot borrower1
check "rig_boot: borrower1 answers" out borrower1 'cut -d" " -f1 /proc/uptime'

rig_down
echo "rig launcher: $PASS passed, $FAIL failed"
((FAIL == 0))
