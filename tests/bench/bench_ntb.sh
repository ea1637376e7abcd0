#!/bin/bash
# Figures of the emulated NTB fabric: L1 boot times, ntb_perf throughput each way, and the cost of
# reading through a memory window (MW1 uncached: one link round trip per access; MW2 prefetchable).
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"

rig_up --borrowers 1
results=()
figure() { results+=("$(printf '%-52s %s' "$1" "$2")"); }
# empty_ms VM: the cost of an empty rig_run, the least of three (a loaded machine only adds to it).
empty_ms() {
	local i ms min=
	for i in 1 2 3; do
		ms=$(rig_time_ms "$1" true)
		[ -z "$min" ] || ((ms < min)) || continue
		min=$ms
	done
	echo "$min"
}

while read -r vm secs; do
	figure "L1 boot to command server ($vm)" "$secs s"
done <"$RIGDIR/boot-times.txt"

# ntb_perf: 2^TOTAL_ORDER bytes in 1 MiB chunks, CPU copies through the peer's window, one thread.
# The window is capped at 4 MiB: ntb_perf kmalloc()s a source buffer of the window's size. Throughput is
# computed from the run's duration on L0 (ntb_perf's own figure uses the L1 clock, which can stall).
TOTAL_ORDER=24
for vm in lender borrower1; do
	dir=$(ntb_perf_ready "$vm" total_order=$TOTAL_ORDER chunk_order=20 max_mw_size=0x400000)
	base=$(empty_ms "$vm")
	ms=$(rig_time_ms "$vm" "echo 0 > $dir/run")
	line=$(rig_run "$vm" -- "grep -E 'copied|error' $dir/run")
	if ((ms > base)); then
		rate="$(((1 << TOTAL_ORDER) / 1000 / (ms - base))) MB/s"
	else
		rate="n/a (the run took $ms ms, an empty command $base ms: the machine is too loaded)"
	fi
	figure "ntb_perf $vm -> ${NTB_PEER[$vm]} ($((1 << (TOTAL_ORDER - 20))) MiB)" \
		"$rate   (L1's own figure: ${line##*, })"
done
rig_run lender -- "rmmod ntb_perf"
rig_run borrower1 -- "rmmod ntb_perf"

# Window reads: the borrower backs both windows with 64 KiB; the lender reads 4 KiB through each.
# x86 memcpy_fromio reads with 4-byte `rep movsl`: 1024 accesses per 4 KiB. Timed on L0, less the
# cost of an empty rig_run.
ntb_tool_up lender borrower1
rig_run borrower1 -- "$(ntb_tool_dir borrower1); echo 65536 > \$P/mw_trans0; echo 65536 > \$P/mw_trans1"
base=$(empty_ms lender)
for mw in 0 1; do
	rig_run lender -- "$(ntb_tool_dir lender); echo 0:65536 > \$P/peer_mw_trans$mw"
	ms=$(rig_time_ms lender "$(ntb_tool_dir lender)
for i in 1 2 3 4; do dd if=\$P/peer_mw$mw bs=4096 count=1 status=none >/dev/null; done")
	ms=$(((ms - base) / 4))
	if [ $mw = 0 ]; then
		figure "read 4 KiB through MW1 (uncached)" "$ms ms   (~$((ms * 1000 / 1024)) us per 4-byte access)"
	else
		figure "read 4 KiB through MW2 (prefetchable, by a CPU)" "$ms ms"
	fi
done

printf '%s\n' "${results[@]}" | tee "$RIGDIR/figures.txt"
