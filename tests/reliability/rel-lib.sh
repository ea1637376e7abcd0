# shellcheck shell=bash
# Helpers for the check-reliability suite, sourced by its tests: the e2e library (a test's guests are e2e
# guests; it brings the rig, kernel and agent libraries), and each test's row of the suite's summary
# table, which tests/run-suites.sh prints at the end of the suite. The row is $RIGDIR/summary.row, a header line and a
# value line per scenario (tab-separated), rewritten whenever the test has measured something, so a test
# that fails half-way still shows what it saw.
REL_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$REL_LIB/../e2e/e2e-lib.sh"

REL_ROW=$RIGDIR/summary.row
REL_COLUMNS=(scenario outage 'what the guest saw' 'recovery time' 'blocks checked' 'resources back to baseline')
declare -gA REL_VALUE=()
REL_ROWS_DONE=()
rm -f "$REL_ROW"

# rel_row COLUMN VALUE...: sets columns of this test's current row (a column not set shows "-").
rel_row() {
	local c line=
	while (($# >= 2)); do
		REL_VALUE[$1]=$2
		shift 2
	done
	for c in "${REL_COLUMNS[@]}"; do
		line+="${line:+$'\t'}${REL_VALUE[$c]:--}"
	done
	REL_LINE=$line
	{
		(IFS=$'\t' && echo "${REL_COLUMNS[*]}")
		printf '%s\n' "${REL_ROWS_DONE[@]}" "$line"
	} >"$REL_ROW"
}

# rel_row_next: the current row is complete; rel_row sets the columns of a new one (for a test of several
# scenarios).
rel_row_next() {
	REL_ROWS_DONE+=("$REL_LINE")
	REL_VALUE=()
}


# rel_count VAR DEFAULT WHAT: the count in environment variable VAR (DEFAULT if unset), a whole number of
# WHAT, at least 1; else a message naming VAR and status 2.
rel_count() {
	local n=${!1:-$2}
	[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "$1 must be a whole number of $3, at least 1: $n" >&2; return 2; }
	echo "$n"
}

# rel_nth_tag BASE K: the tag a churn test's guest writes in its cycle or boot K, as its script computes
# it (BASE xor K).
rel_nth_tag() { printf '%08x' $((0x$1 ^ $2)); }

# rel_per_cycle UNIT SECONDS...: "M s per UNIT (LO to HI)", the mean, least and greatest of the times.
rel_per_cycle() {
	local unit=$1
	shift
	printf '%s\n' "$@" | awk -v u="$unit" '{ s += $1; if (NR == 1 || $1 < lo) lo = $1; if ($1 > hi) hi = $1 }
END { printf "%.1f s per %s (%.1f to %.1f)", s / NR, u, lo, hi }'
}

# A fault under a guest's writes comes once REL_FAULT_AFTER_KB of its fio's region have completed.
REL_FAULT_AFTER_KB=1024

# rel_resumed_after VM LOG KB T0 [NAME]: waits until the progress of fio (its job named NAME) in LOG (a guest
# of VM) passes KB, at most 300 s or until the guest's QEMU ends; prints the seconds from T0 (date +%s.%N)
# to then, nothing if not.
rel_resumed_after() {
	local _
	for _ in $(seq 300); do
		if [ "$(e2e_done_kb "$2" "${5:-}")" -gt "$3" ]; then
			_rig_elapsed "$4"
			return 0
		fi
		[ ! -e "$(rig_vm_dir "$1")/$E2E_L2_NAME.rc" ] || return 0
		sleep 1
	done
}

# rel_expect_back R0: the end of a fault under borrower1's guest, once it powered off and its borrows were
# checked: checks (e) the device returned (free and reset on the lender), then rel_expect_baseline R0.
rel_expect_back() {
	ag_expect_returned $B 60 "(e)"
	rel_expect_baseline "$1"
}

# rel_expect_baseline R0: once borrower1's guests have ended, checks (e) the lender's and borrower1's
# resources are R0 (e2e_resources) again (the summary row says so) and (f) both kernel logs are clean.
rel_expect_baseline() {
	local r1 back
	r1=$(e2e_resources $B)
	e2e_resources_show "$r1"
	back=$(e2e_resources_changed "$1" "$r1")
	rel_row 'resources back to baseline' "$([ -z "$back" ] && echo yes || echo "no: $back")"
	expect_eq "(e) resources of the lender and $B as before the guest" "$back" ""
	expect_klog_clean $B
	expect_klog_clean lender
}
