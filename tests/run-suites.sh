#!/bin/bash
# Run test suites: every tests/<suite>/test_*.sh (and, for "unit", meson's tests), one at a time.
# Prints each test's result and duration, each suite's duration, and a closing "N passed, N failed".
# A failed test whose rig shows an L1 kernel hang with none of our code in it (tests/rig/l1-hang.sh)
# runs once more; the first attempt's logs stay in rig-out/<test>.hang and the result line says so.
# usage: tests/run-suites.sh SUITE...
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tests/rig/l1-hang.sh"
passed=0 failed=0 reruns=0 failures=()

# Print "VM: first line of its hang report" for each VM of rig directory DIR whose console, written
# since STAMP, has a hang that is not ours; status 1 if none has.
rig_hangs_not_ours() {
	local dir=$1 stamp=$2 con found=1
	for con in "$dir"/*/console.log; do
		if [ ! "$con" -nt "$stamp" ] || ! l1_hang_not_ours "$con"; then
			continue
		fi
		printf '%s: %s\n' "$(basename "$(dirname "$con")")" "$(l1_hang_report "$con" | head -n 1)"
		found=0
	done
	return $found
}

run_test() {
	local name=$1 t0=$SECONDS rc stamp hangs rigout note=''
	shift
	rigout=$top/rig-out/$(basename "$name")
	stamp=$(mktemp)
	echo "--- $name"
	"$@"
	rc=$?
	if [ $rc -ne 0 ] && hangs=$(rig_hangs_not_ours "$rigout" "$stamp"); then
		note=", after a rerun: an L1 kernel hung in the first ($(paste -sd ';' <<<"$hangs"))"
		echo "RERUN $name: an L1 kernel hung, with no farpass or NTB code in its report:"
		printf '  %s\n' "$hangs"
		rm -rf "$rigout.hang"
		mv "$rigout" "$rigout.hang"
		reruns=$((reruns + 1))
		"$@"
		rc=$?
	fi
	rm -f "$stamp"
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
		echo "PASS $name ($((SECONDS - t0)) s$note)"
	else
		failed=$((failed + 1))
		failures+=("$name")
		echo "FAIL $name ($((SECONDS - t0)) s, rc=$rc$note)"
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
echo "$passed passed, $failed failed$( ((reruns)) && echo ", $reruns run again after an L1 kernel hang")"
[ $failed -eq 0 ]
