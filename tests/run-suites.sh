#!/bin/bash
# Run test suites: every tests/<suite>/test_*.sh (and, for "unit", meson's tests), one at a time.
# Prints each test's result and duration, each suite's duration, and a closing "N passed, N failed"
# after the failed tests, each with its first three FAIL lines and the lines each printed after it (what a
# check found, as expect_klog_clean's offending log lines: at most six), or a test's last six lines if no check failed.
# A failed test whose rig shows, in the text its VMs wrote during that attempt, an L1 kernel hang that is
# not ours (tests/rig/l1-hang.sh: l1_hang_verdict) runs once more; the first attempt's logs stay in
# rig-out/<test>.hang. A test that passes only on its rerun is FLAKY: the summary lists it, and more than
# one FLAKY test fails the run.
# A test may leave rows for its suite's summary table in rig-out/<test>/summary.row (a header line and a
# value line per row, tab-separated: tests/reliability/rel-lib.sh); the suite ends with the table of the
# rows its tests left in this run, each with the test's result.
# Each suite's duration is also appended to rig-out/suite-times.tsv (the date it ended, SUITE[@SERIES], seconds,
# its tests passed/run, L0's 1-minute load at its start and end, the checkout's commit then): `make bench` prints
# each suite's latest (tests/bench/run.sh).
# SUITE@SERIES runs the suite's tests on the L1 kernel series SERIES (FARPASS_KERNEL=SERIES, vm-images/env.sh),
# each with its logs in rig-out/<test>@SERIES; SUITE@other, on the other series (FARPASS_KERNEL_OTHER), is named so.
# SUITE/TEST runs that one test of the suite (tests/SUITE/TEST.sh), and takes @SERIES the same way.
# usage: tests/run-suites.sh SUITE[/TEST][@SERIES]...
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tests/rig/l1-hang.sh"
passed=0 failed=0 failures=() flaky=()

# rig_hang_verdicts DIR SINCE: one line per VM of rig directory DIR whose console, in the boots that began
# at or after epoch SINCE, has a hang report. Status 0 if there is one and none may be ours (a rerun is
# allowed).
rig_hang_verdicts() {
	local dir=$1 since=$2 vm verdict st hang=0 ours=0
	for vm in "$dir"/*/; do
		[ -e "$vm/console.log" ] || continue
		verdict=$(l1_hang_verdict "$vm/console.log" "$vm/qemu.log" "$since")
		st=$?
		case $st in
		0) hang=1 && printf '%s: %s\n' "$(basename "$vm")" "$verdict" ;;
		2) ours=1 && printf '%s: a kernel hang that may be ours: %s\n' "$(basename "$vm")" "$verdict" ;;
		esac
	done
	((hang && !ours))
}

# suite_table SERIES RESULT...: "NAME PASS|FAIL" of a suite's tests, run on SERIES ("@6.12", or empty for
# the default kernel): the table of their summary rows, if any.
suite_table() {
	local series=$1 r name row header=
	shift
	for r in "$@"; do
		name=${r% *}
		row=$top/rig-out/$(basename "$name")$series/summary.row
		[ -e "$row" ] || continue
		if [ -z "$header" ]; then
			header=$(head -n1 "$row")
			echo "=== summary"
			printf '| test | %s |\n' "${header//$'\t'/ | }"
		fi
		tail -n +2 "$row" | sed 's/\t/ | /g' | while IFS= read -r line; do
			printf '| %s %s | %s |\n' "$name" "${r##* }" "$line"
		done
	done
}

# run_test NAME RIGOUT COMMAND...: COMMAND's rig directory is RIGOUT (the test's RIGDIR).
run_test() {
	local name=$1 rigout=$2 t0=$SECONDS rc since hangs note='' out checks
	shift 2
	out=$(mktemp)
	since=$(date +%s.%N)
	echo "--- $name"
	"$@" 2>&1 | tee "$out"
	rc=$?
	if [ $rc -ne 0 ]; then
		if hangs=$(rig_hang_verdicts "$rigout" "$since"); then
			echo "RERUN $name: an L1 kernel hung, and nothing says it was ours:"
			printf '  %s\n' "$hangs"
			note=", after a rerun: an L1 kernel hung in the first ($(paste -sd ';' <<<"$hangs"))"
			rm -rf "$rigout.hang"
			mv "$rigout" "$rigout.hang"
			since=$(date +%s.%N)
			"$@" 2>&1 | tee "$out"
			rc=$?
			if [ $rc -eq 0 ]; then
				flaky+=("$name")
				note+="; FLAKY: it passed only on its rerun"
			fi
		elif [ -n "$hangs" ]; then
			echo "NO RERUN $name:"
			printf '  %s\n' "$hangs"
		fi
	fi
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
		results+=("$name PASS")
		echo "PASS $name ($((SECONDS - t0)) s$note)"
	else
		results+=("$name FAIL")
		failed=$((failed + 1))
		# The closing summary names the test's first failed checks and what they found: a CI log's tail
		# says what failed.
		checks=$(awk '/^FAIL/ { if (++n > 3) exit; more = 6; print "    " $0; next }
			/^(ok|PASS|SKIP) / { more = 0; next }
			more > 0 { more--; print "      " $0 }' "$out")
		# A test that stopped before any check failed (a missing build, a rig that did not come up): its last lines.
		[ -n "$checks" ] || checks=$(tail -n 6 "$out" | sed 's/^/    /')
		failures+=("$name${checks:+$'\n'$checks}")
		echo "FAIL $name ($((SECONDS - t0)) s, rc=$rc$note)"
	fi
	rm -f "$out"
}

for spec in "$@"; do
	suite=${spec%@*} series=
	[ "$suite" = "$spec" ] || series=@${spec#*@}
	if [ "$series" = @other ]; then
		series=@$(. "$top/vm-images/env.sh" && echo "$FARPASS_KERNEL_OTHER") && spec=$suite$series
	fi
	s0=$SECONDS p0=$passed f0=$failed load0=$(cut -d' ' -f1 /proc/loadavg)
	echo "=== suite $spec"
	if [ "$suite" = unit ]; then
		if [ -f "$top/build/build.ninja" ]; then
			run_test "unit/meson" "$top/rig-out/meson" meson test -C "$top/build" --suite unit --print-errorlogs
		else
			failed=$((failed + 1)) && failures+=("unit/meson")
			echo "FAIL unit/meson: no meson build in $top/build (run: make build)"
		fi
	fi
	if [[ $suite == */* ]]; then
		tests=("$top/tests/$suite.sh")
	else
		tests=("$top"/tests/"$suite"/test_*.sh)
	fi
	if [ ! -e "${tests[0]}" ]; then
		failed=$((failed + 1)) && failures+=("$spec")
		echo "FAIL $spec: no such suite or test (no ${tests[0]#"$top/"})"
	fi
	results=()
	for t in "${tests[@]}"; do
		name=$(basename "$t" .sh)
		rigout=$top/rig-out/$name$series
		[ -e "$t" ] && run_test "${suite%%/*}$series/$name" "$rigout" \
			env ${series:+FARPASS_KERNEL=${series#@}} RIGDIR="$rigout" bash "$t"
	done
	suite_table "$series" "${results[@]}"
	echo "=== suite $spec: $((SECONDS - s0)) s"
	mkdir -p "$top/rig-out"
	printf '%s\t%s\t%d\t%d/%d\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$spec" $((SECONDS - s0)) $((passed - p0)) \
		$((passed - p0 + failed - f0)) "$load0" "$(cut -d' ' -f1 /proc/loadavg)" \
		"$(git -C "$top" describe --always --dirty 2>/dev/null || echo unknown)" >>"$top/rig-out/suite-times.tsv"
done

((${#failures[@]} == 0)) || printf 'failed: %s\n' "${failures[@]}"
((${#flaky[@]} == 0)) || printf 'FLAKY (passed only on a rerun after an L1 kernel hang): %s\n' "${flaky[@]}"
echo "$passed passed, $failed failed, ${#flaky[@]} FLAKY"
if ((${#flaky[@]} > 1)); then
	echo "FAIL: ${#flaky[@]} FLAKY tests in one run (at most one is accepted)"
	exit 1
fi
[ $failed -eq 0 ] || exit 1
