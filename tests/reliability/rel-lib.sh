# shellcheck shell=bash
# Helpers for the check-reliability suite, sourced by its tests: the rig, kernel, agent and e2e libraries
# (a test's guests are e2e guests), and each test's row of the suite's summary table, which
# tests/run-suites.sh prints at the end of the suite. The row is $RIGDIR/summary.row, a header line and a
# value line (tab-separated), rewritten whenever the test has measured something, so a test that fails
# half-way still shows what it saw.
REL_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$REL_LIB/../rig/rig.sh"
. "$REL_LIB/../rig/ntb-lib.sh"
. "$REL_LIB/../kernel/kernel-lib.sh"
. "$REL_LIB/../agent/agent-lib.sh"
. "$REL_LIB/../e2e/e2e-lib.sh"

REL_ROW=$RIGDIR/summary.row
REL_COLUMNS=(scenario outage 'what the guest saw' 'recovery time' 'blocks checked' 'resources back to baseline')
declare -gA REL_VALUE=()
rm -f "$REL_ROW"

# rel_row COLUMN VALUE...: sets columns of this test's row (a column not set shows "-").
rel_row() {
	local c line=
	while (($# >= 2)); do
		REL_VALUE[$1]=$2
		shift 2
	done
	for c in "${REL_COLUMNS[@]}"; do
		line+="${line:+$'\t'}${REL_VALUE[$c]:--}"
	done
	{
		(IFS=$'\t' && echo "${REL_COLUMNS[*]}")
		echo "$line"
	} >"$REL_ROW"
}

