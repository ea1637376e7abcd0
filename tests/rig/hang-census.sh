#!/bin/bash
# Count L1 kernel hangs (tests/rig/l1-hang.sh) over many rig boots, and the ntb-epf window reads made in
# each VM: a vCPU that reads through an NTB window waits in ntb-epf holding QEMU's global lock, so a hang
# in a VM that made no window read cannot be that wait's doing (docs/rig.md, "L1 kernel hangs").
# Not a test: a measurement, run by hand.
#
#   tests/rig/hang-census.sh [--rounds N] [--idle S] [--burners N]
#
# Each round boots the lender and two borrowers (3 boots), loads the NTB stack and farpass.ko in each (the
# state of the CI hang: farpass loaded, idle), waits S seconds (default 20) and shuts the rig down.
# --burners N runs N CPU-bound processes on L0 for the whole census (load). Prints one line per round and
# a summary: boots, boots whose console has a hang report, launcher reboots, window reads.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=17 idle=20 burners=0
while (($#)); do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--idle) idle=$2; shift 2 ;;
	--burners) burners=$2; shift 2 ;;
	*) echo "hang-census: unknown option $1" >&2; exit 2 ;;
	esac
done
. "$here/rig.sh"
. "$here/ntb-lib.sh"
. "$here/../kernel/kernel-lib.sh"
fp_check_built
export RIG_QEMU_EXTRA="${RIG_QEMU_EXTRA:-} -trace enable=ntb_epf_mw_read"
base=$FARPASS_TOP/rig-out/hang-census
rm -rf "$base"
mkdir -p "$base"

pids=()
for ((i = 0; i < burners; i++)); do
	sha256sum /dev/zero &
	pids+=($!)
done
trap '((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null; true' EXIT

# boots_with_hang CONSOLE: how many boots (launcher markers) of CONSOLE have a hang report.
boots_with_hang() {
	tr -d '\r' <"$1" | awk -v mark="$L1_BOOT_MARK" -v re="$L1_HANG_RE" '
		index($0, mark) == 1 { n += hung; hung = 0 } $0 ~ re { hung = 1 } END { print n + hung }'
}

boots=0 hung=0 reboots=0 reads=0 failed=0
for ((r = 1; r <= rounds; r++)); do
	export RIGDIR=$base/round-$r
	status=ok
	if rig_up --borrowers 2; then
		for vm in "${RIG_VMS[@]}"; do
			fp_load "$vm" >/dev/null || status="fp_load $vm failed"
		done
		sleep "$idle"
	else
		status="rig_up failed"
	fi
	rig_down
	line="round $r: $status"
	for vm in lender borrower1 borrower2; do
		d=$RIGDIR/$vm
		[ -e "$d/console.log" ] || continue
		b=$(grep -c "^$L1_BOOT_MARK" "$d/console.log")
		h=$(boots_with_hang "$d/console.log")
		a=$(grep -c "$L1_HANG_REBOOT_MARK" "$d/console.log" || true)
		w=$(grep -c 'ntb_epf_mw_read' "$d/qemu.log" || true)
		boots=$((boots + b)) hung=$((hung + h)) reboots=$((reboots + a)) reads=$((reads + w))
		line+="; $vm boots=$b hung=$h window-reads=$w"
	done
	[ "$status" = ok ] || failed=$((failed + 1))
	echo "$line" | tee -a "$base/census.txt"
done
printf 'census: %d rounds (%d failed), %d boots, %d with a hang report, %d launcher reboots, %d window reads; burners=%d idle=%ds\n' \
	"$rounds" "$failed" "$boots" "$hung" "$reboots" "$reads" "$burners" "$idle" | tee -a "$base/census.txt"
