#!/bin/bash
# Upstream ntb_perf across the emulated NTB, each direction: the MW set-up handshake (scratchpads and
# doorbells) completes, and a transfer through the memory window finishes without error. The
# throughput is printed; `make bench` reports it, this test only needs the transfer to complete.
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

rig_up --borrowers 1
for vm in lender borrower1; do
	# 1 MiB in 64 KiB chunks into a 1 MiB inbound buffer: enough to cross the link many times.
	out=$(ntb_perf_run "$vm" total_order=20 chunk_order=16 max_mw_size=1048576)
	printf '%s\n' "$out"
	expect "$vm -> peer: no thread error" eval '! grep -q "error status" <<<"$out"'
	expect "$vm -> peer: 1 MiB copied" grep -q 'copied 1048576 bytes' <<<"$out"
done
