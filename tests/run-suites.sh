#!/bin/bash
# Run test suites: every tests/<suite>/test_*.sh (and, for "unit", meson's tests), one at a time.
# Prints each test's result and duration, each suite's duration, and a closing "N passed, N failed".
# usage: tests/run-suites.sh SUITE...
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
passed=0 failed=0 failures=()

run_test() {
	local name=$1 t0=$SECONDS rc
	shift
	echo "--- $name"
	"$@"
	rc=$?
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
		echo "PASS $name ($((SECONDS - t0)) s)"
	else
		failed=$((failed + 1))
		failures+=("$name")
		echo "FAIL $name ($((SECONDS - t0)) s, rc=$rc)"
	fi
}

for suite in "$@"; do
	s0=$SECONDS
	echo "=== suite $suite"
	if [ "$suite" = unit ] && [ -f "$top/build/build.ninja" ]; then
		run_test "unit/meson" meson test -C "$top/build" --suite unit --print-errorlogs
	fi
	for t in "$top"/tests/"$suite"/test_*.sh; do
		[ -e "$t" ] || continue
		run_test "$suite/$(basename "$t" .sh)" bash "$t"
	done
	echo "=== suite $suite: $((SECONDS - s0)) s"
done

[ ${#failures[@]} -eq 0 ] || printf 'failed: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
