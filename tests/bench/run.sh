#!/bin/bash
# `make bench`: run every tests/bench/bench_*.sh and print their figures, then make check's own time per
# suite. A benchmark fails only when it cannot measure, never because of a number.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
rc=0
for b in "$top"/tests/bench/bench_*.sh; do
	echo "=== $(basename "$b" .sh)"
	bash "$b" || { r=$? && echo "bench $(basename "$b" .sh) could not measure (rc=$r)"; rc=1; }
done

# make check's suites (CHECK_SUITES in the Makefile, @other resolved as run-suites.sh does), each with its
# latest run that tests/run-suites.sh recorded in this checkout; make check runs them one after the other.
times=$top/rig-out/suite-times.tsv
other=$(. "$top/vm-images/env.sh" && echo "$FARPASS_KERNEL_OTHER")
read -ra suites <<<"$(make -s -C "$top" print-check-suites | sed "s/@other/@$other/g")"
echo "=== make check's time per suite: the latest run of each in this checkout ($times)"
printf '%-12s %8s %10s  %-20s %-16s %s\n' suite seconds passed "ended (UTC)" "L0 load 1 min" commit
total=0 missing=()
for s in "${suites[@]}"; do
	last=$(awk -F'\t' -v s="$s" '$2 == s' "$times" 2>/dev/null | tail -n1)
	if [ -z "$last" ]; then
		missing+=("$s")
		continue
	fi
	IFS=$'\t' read -r ended _ secs tests load0 load1 commit <<<"$last"
	printf '%-12s %8s %10s  %-20s %-16s %s\n' "$s" "$secs" "$tests" "$ended" "$load0 -> $load1" "$commit"
	total=$((total + secs))
done
echo "sum: $total s ($((total / 60)) min)${missing[*]:+; no run recorded of: ${missing[*]}}"
exit $rc
