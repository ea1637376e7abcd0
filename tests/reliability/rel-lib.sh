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


# A fault under one guest's writes (test_lender_reset, test_link_outage): borrower1's guest writes
# REL_REGION with 4 KiB blocks (4 MiB from 64 MiB on), the fault comes once REL_FAULT_AFTER_KB have
# completed. rel_guest_up UUID: the rig with the remote NVMe as mdev UUID on borrower1 (B, IMG).
REL_REGION=4096:$((64 << 20)):$((4 << 20))
REL_FAULT_AFTER_KB=1024
rel_guest_up() {
	B=borrower1
	e2e_remote_up $B "$1" 1024
	IMG=$(rig_lender_nvme_img)
}

# rel_guest_script TAG REGION MARK: an L2 script that writes REGION with fio's progress job (e2e-lib.sh)
# once the remote disk is there, then reads it all back (verify-only, its status on the line
# "MARK bs=4096 rc=N") and prints the guest's nvme log lines as "E2E-NVME-LOG ...".
rel_guest_script() {
	cat <<SCRIPT
for i in \$(seq 300); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
$(e2e_fio_progress_job "$1" "$2")
$(e2e_fio_jobs "$1" --verify-only "$3")
dmesg | grep -i nvme | sed 's/^/E2E-NVME-LOG /'
[ -z "\$e2e_failed" ] || { echo "E2E-FAILED\$e2e_failed"; false; }
SCRIPT
}

# rel_resumed_after VM LOG KB T0: waits until fio's progress in LOG (a guest of VM) passes KB, at most
# 300 s or until the guest's QEMU ends; prints the seconds from T0 (date +%s.%N) to then, nothing if not.
rel_resumed_after() {
	local _
	for _ in $(seq 300); do
		if [ "$(e2e_done_kb "$2")" -gt "$3" ]; then
			_rig_elapsed "$4"
			return 0
		fi
		[ ! -e "$(rig_vm_dir "$1")/l2.rc" ] || return 0
		sleep 1
	done
}

# rel_expect_back R0: the end of a fault under borrower1's guest, once it powered off and its borrows were
# checked: checks (e) the device returned (free and reset on the lender), both hosts' resources are R0
# again (the summary row says so), and (f) both kernel logs are clean.
rel_expect_back() {
	local r1 back
	ag_expect_returned $B 60 "(e)"
	r1=$(e2e_resources $B)
	e2e_resources_show "$r1"
	back=$(e2e_resources_changed "$1" "$r1")
	rel_row 'resources back to baseline' "$([ -z "$back" ] && echo yes || echo "no: $back")"
	expect_eq "(e) resources of the lender and borrower1 as before the guest" "$back" ""
	expect_klog_clean $B
	expect_klog_clean lender
}

# rel_nvme_bringups OUT: how many times the guest's nvme driver brought the controller up (its probe and
# each reset), from the E2E-NVME-LOG lines of the guest's output OUT.
rel_nvme_bringups() {
	grep '^E2E-NVME-LOG' <<<"$1" | grep -c 'default/read/poll queues' || true
}
