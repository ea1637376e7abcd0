#!/bin/bash
# `make bench`: run every tests/bench/bench_*.sh and print their figures. A benchmark fails only when
# it cannot measure, never because of a number.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
rc=0
for b in "$top"/tests/bench/bench_*.sh; do
	echo "=== $(basename "$b" .sh)"
	bash "$b" || { r=$? && echo "bench $(basename "$b" .sh) could not measure (rc=$r)"; rc=1; }
done
exit $rc
