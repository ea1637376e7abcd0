#!/bin/bash
# Upstream ntb_perf across the emulated NTB, each direction: the MW set-up handshake (scratchpads and
# doorbells) completes, and a transfer through the memory window finishes without error. The
# throughput is printed; `make bench` reports it, this test only needs the transfer to complete.
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

rig_up --borrowers 1
# 1 MiB in 64 KiB chunks into a 1 MiB inbound buffer: enough to cross the link many times.
PARAMS="total_order=20 chunk_order=16 max_mw_size=1048576"
perf() { echo "D=/sys/kernel/debug/ntb_perf/$(ntb_pci "$1")"; }

for vm in lender borrower1; do
	ntb_load "$vm" ntb_perf "$PARAMS"
done
for vm in lender borrower1; do
	expect "$vm: ntb_perf peer link up and inbound buffer set" ntb_wait "$vm" 60 \
		"$(perf "$vm"); grep -q 'Link status: up' \$D/info && grep -q 'In buffer xlat' \$D/info"
done
for vm in lender borrower1; do
	rig_run "$vm" -- "$(perf "$vm"); echo 0 > \$D/run"
	expect "$vm -> peer: ntb_perf run completes" ntb_wait "$vm" 120 \
		"$(perf "$vm"); grep -qE 'copied|error' \$D/run"
	out=$(rig_run "$vm" -- "$(perf "$vm"); cat \$D/run")
	printf '%s\n' "$out"
	expect "$vm -> peer: no thread error" eval '! grep -q "error status" <<<"$out"'
	expect "$vm -> peer: 1 MiB copied" grep -q 'copied 1048576 bytes' <<<"$out"
done
