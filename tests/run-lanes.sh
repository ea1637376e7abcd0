#!/bin/bash
# Run test suites in two lanes at once, each lane one tests/run-suites.sh of its suites in order: two rigs
# at once is the most a 2-core machine takes (docs/rig.md: 65 minutes for ~88 of suites), and each test
# has its own rig directory and LAN ports. Every line a lane prints is shown as it comes behind its lane's letter ("A| "), and kept in
# rig-out/lane-LETTER.log. Once both have ended: each lane's closing summary (what its run-suites printed
# after its last suite: the failed tests with their checks, the FLAKY ones, its counts), the counts over
# both lanes and the wall time, also appended to rig-out/suite-times.tsv as suite "lanes". The run fails if
# a lane failed, or if more than one test over both lanes is FLAKY (run-suites.sh).
# usage: tests/run-lanes.sh 'SUITE[@SERIES]...' 'SUITE[@SERIES]...'
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
if (($# != 2)); then
	echo "usage: $0 'SUITE[@SERIES]...' 'SUITE[@SERIES]...' (two lanes)" >&2
	exit 2
fi
mkdir -p "$top/rig-out"
t0=$SECONDS load0=$(cut -d' ' -f1 /proc/loadavg)
letters=(A B) lanes=("$1" "$2") pids=()
for i in 0 1; do
	read -ra suites <<<"${lanes[i]}"
	(
		"$top/tests/run-suites.sh" "${suites[@]}" 2>&1 | tee "$top/rig-out/lane-${letters[i]}.log" |
			sed -u "s/^/${letters[i]}| /"
	) &
	pids+=($!)
done

passed=0 failed=0 flaky=0 rc=0 status=()
for i in 0 1; do
	wait "${pids[i]}"
	status+=($?)
done
for i in 0 1; do
	l=${letters[i]} log=$top/rig-out/lane-${letters[i]}.log
	echo "=== lane $l (${lanes[i]}): its summary"
	awk '/^=== suite .*: [0-9]+ s$/ { n = NR } { line[NR] = $0 } END { for (i = n + 1; i <= NR; i++) print line[i] }' "$log"
	if counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ FLAKY$' "$log" | tail -n1) && [ -n "$counts" ]; then
		read -r p _ f _ k _ <<<"$counts"
		passed=$((passed + p)) failed=$((failed + f)) flaky=$((flaky + k))
		if ((status[i] != 0)); then
			rc=1
			((f > 0 || k > 1)) || echo "FAIL lane $l: its run-suites.sh exited with status ${status[i]}"
		fi
	else
		echo "FAIL lane $l: its run-suites.sh ended without its closing counts"
		failed=$((failed + 1)) rc=1
	fi
done
echo "=== both lanes: $passed passed, $failed failed, $flaky FLAKY in $((SECONDS - t0)) s"
printf '%s\tlanes\t%d\t%d/%d\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" $((SECONDS - t0)) "$passed" $((passed + failed)) \
	"$load0" "$(cut -d' ' -f1 /proc/loadavg)" \
	"$(git -C "$top" describe --always --dirty 2>/dev/null || echo unknown)" >>"$top/rig-out/suite-times.tsv"
if ((flaky > 1)); then
	echo "FAIL: $flaky FLAKY tests over both lanes (at most one is accepted)"
	rc=1
fi
exit $rc
