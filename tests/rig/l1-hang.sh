# shellcheck shell=bash
# Hangs of an L1 kernel under TCG: an RCU stall or a soft lockup on its console. Seen a few times in
# ~200 L1 boots on 2 cores, during boot and later, with no farpass or NTB code in the report; cause unknown
# (docs/rig.md). rig.sh boots a VM whose boot hung again; tests/run-suites.sh runs a test whose rig hung
# once more. Sourced by both.

L1_HANG_RE='rcu: INFO: .*detected stall|watchdog: BUG: soft lockup'
# Our code or the NTB path in a report: that hang may be a bug of ours, so it is never retried.
L1_HANG_OURS_RE='\[(farpass|ntb[a-z_]*)\]'

# l1_hang_report CONSOLE [OFFSET]: print the first hang report in the console log (from byte OFFSET),
# at most 60 lines; status 1 if there is none.
l1_hang_report() {
	tail -c +$((${2:-0} + 1)) "$1" 2>/dev/null | tr -d '\r' |
		awk -v re="$L1_HANG_RE" '$0 ~ re { found = 1 } found && n++ < 60 { print } END { exit !found }'
}

# l1_hang_not_ours CONSOLE [OFFSET]: status 0 if the console has a hang report without our code in it.
l1_hang_not_ours() {
	local report
	report=$(l1_hang_report "$@") && ! grep -qE "$L1_HANG_OURS_RE" <<<"$report"
}
