# shellcheck shell=bash
# The guest-side fio runs of the benches that compare paths to one device (bench_nvmeof.sh,
# bench_irq.sh), sourced by them: it sources e2e-lib.sh and plot-lib.sh and checks the build and set-up.
# One L2 guest of $B (borrower1) per path runs job files of
# tests/bench/fio (JSON output), paused before and after each job and over an idle window before and
# after them, while L0 reads the lender L1's /proc/stat (and whatever BENCH_SAMPLE reads). Sets:
#   JOBS        the job files' names (tests/bench/fio/JOB.fio), set by the bench;
#   RUNTIME     seconds of each job (guest clock); IDLE seconds of each idle window (L0's sleep);
#   BENCH_SAMPLE  optional: a function "BENCH_SAMPLE KEY" that L0 runs just before a job starts and just
#               after it ends (KEY PATH:JOB:pre, PATH:JOB:post), while the guest is paused.
# Results: JSON[PATH:JOB] each job's fio JSON, CPU[PATH:JOB] the lender's "BUSY TOTAL" jiffies over it,
# IDLE_CPU[PATH:0], IDLE_CPU[PATH:1] over the idle windows; lines for figures.txt in results.
. "$(dirname "${BASH_SOURCE[0]}")/../e2e/e2e-lib.sh"
. "$(dirname "${BASH_SOURCE[0]}")/plot-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit

B=borrower1			# the borrower whose L2 guests run the jobs
LOCAL_NVME=0000:00:08.0		# borrower1's own NVMe, where e2e_borrower_nvme puts it
BENCH_JOB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/fio
IDLE=${IDLE:-10}
declare -A JSON CPU IDLE_CPU TITLE # TITLE[PATH]: a path's name in the figures (default PATH)
results=()

line() { results+=("$(printf "$@")"); }
# ratio A B: B/A with two decimals (three below 0.1, where a CPU goal lies), or n/a; "<B" (an upper
# bound) gives "<B/A".
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { lt = sub(/^</, "", b)
		if (a ~ /^[0-9.]+$/ && a > 0 && b ~ /^-?[0-9.]+$/) printf(b / a < 0.1 ? "%s%.3f" : "%s%.2f", lt ? "<" : "", b / a)
		else print "n/a" }'
}
load() { cut -d' ' -f1-3 /proc/loadavg; }

# bench_guest_script DEV: the job files, a pause for the first idle window ("idle"), each job on DEV
# between pauses "pre-JOB" and "post-JOB" (its JSON on one line: "BENCH-JSON JOB rc=RC {...}"), a pause
# for the second idle window ("idle-end").
bench_guest_script() {
	local j
	echo "$E2E_GUEST_PAUSE"
	for j in "${JOBS[@]}"; do
		printf "cat >/tmp/%s.fio <<'EOF'\n%s\nEOF\n" "$j" "$(cat "$BENCH_JOB_DIR/$j.fio")"
	done
	echo "e2e_pause idle"
	for j in "${JOBS[@]}"; do
		cat <<-EOF
			e2e_pause pre-$j
			DEV=$1 RUNTIME=$RUNTIME fio --output-format=json --output=/tmp/$j.json /tmp/$j.fio >/tmp/$j.err 2>&1; rc=\$?
			e2e_pause post-$j
			echo "BENCH-JSON $j rc=\$rc \$(tr -d '\n' </tmp/$j.json)"
			[ \$rc = 0 ] || sed 's/^/BENCH-FIO-ERR $j /' /tmp/$j.err
		EOF
	done
	echo "e2e_pause idle-end"
}

# The lender's CPU: "BUSY TOTAL" jiffies (USER_HZ) of /proc/stat's cpu line, busy = all but idle, iowait.
lender_stat() { rig_run lender -- "head -n1 /proc/stat" | awk '{ print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }'; }
# delta S0 S1: "BUSY TOTAL" of S1 less S0.
delta() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); print y[1] - x[1], y[2] - x[2] }'; }

# idle_window KEY: the lender's "BUSY TOTAL" jiffies over IDLE seconds in IDLE_CPU[KEY], the guest
# paused meanwhile, then the guest continued.
idle_window() {
	local s0
	s0=$(lender_stat)
	sleep "$IDLE"
	IDLE_CPU[$1]=$(delta "$s0" "$(lender_stat)")
	e2e_l2_continue "$B"
}

# run_path PATH DEV MEM QEMU-ARGS...: one guest of MEM on PATH's device DEV runs the jobs (results above).
run_path() {
	local path=$1 dev=$2 mem=$3 j s0 out ok=1
	shift 3
	e2e_l2_start "$B" "$mem" "$(bench_guest_script "$dev")" "$@"
	if e2e_l2_wait "$B" idle 1800; then
		idle_window "$path:0"
		for j in "${JOBS[@]}"; do
			e2e_l2_wait "$B" "pre-$j" 600 || { ok=0 && break; }
			[ -z "${BENCH_SAMPLE:-}" ] || "$BENCH_SAMPLE" "$path:$j:pre"
			s0=$(lender_stat)
			e2e_l2_continue "$B"
			e2e_l2_wait "$B" "post-$j" $((RUNTIME * 20 + 300)) || { ok=0 && break; }
			CPU[$path:$j]=$(delta "$s0" "$(lender_stat)")
			[ -z "${BENCH_SAMPLE:-}" ] || "$BENCH_SAMPLE" "$path:$j:post"
			e2e_l2_continue "$B"
		done
		if ((ok)) && e2e_l2_wait "$B" idle-end 120; then idle_window "$path:1"; else ok=0; fi
	else
		ok=0
	fi
	# e.g. QEMU stopped the guest (its device gone): it would wait for E2E_L2_TIMEOUT.
	((ok)) || e2e_qmp "$B" quit || true
	out=$(e2e_l2_finish "$B") || echo "L2 ($path) QEMU: status $?"
	{ grep -E '^(BENCH-FIO-ERR|L2-)' <<<"$out" || true; } | sed 's/^/    L2> /'
	for j in "${JOBS[@]}"; do
		JSON[$path:$j]=$(sed -n "s/^BENCH-JSON $j rc=0 //p" <<<"$out" | head -n1)
		jq -e .jobs <<<"${JSON[$path:$j]}" >/dev/null 2>&1 ||
			{ JSON[$path:$j]= && echo "$path $j: no fio JSON (see $E2E_L2_LOG)"; }
	done
}

# fig PATH:JOB FIGURE: a figure of a job's fio JSON (p50, p99 in us, mbs, iops, ios), or n/a.
fig() {
	[ -n "${JSON[$1]:-}" ] || { echo n/a && return; }
	case $2 in
	p50 | p99) jq -r ".jobs[0].read.clat_ns.percentile[\"${2#p}.000000\"] / 1000 | floor" <<<"${JSON[$1]}" ;;
	mbs) jq -r '.jobs[0].read.bw_bytes / 1e6' <<<"${JSON[$1]}" | awk '{ printf "%.1f\n", $1 }' ;;
	iops) jq -r '.jobs[0].read.iops | floor' <<<"${JSON[$1]}" ;;
	ios) jq -r '.jobs[0].read.total_ios' <<<"${JSON[$1]}" ;;
	esac
}

# cpu_per_kio PATH:JOB: the lender's CPU ms per 1000 I/Os of the job above its mean idle rate (of the
# two windows), or "<BOUND" where that excess is within the idle rates' half-spread over the job's time
# plus 2 jiffies (the reads' granularity): BOUND is the excess plus that. n/a if not measured.
cpu_per_kio() {
	local path=${1%:*} ios
	ios=$(fig "$1" ios)
	[ -n "${CPU[$1]:-}" ] && [ -n "${IDLE_CPU[$path:0]:-}" ] && [ -n "${IDLE_CPU[$path:1]:-}" ] && [ "$ios" != n/a ] ||
		{ echo n/a && return; }
	awk -v c="${CPU[$1]}" -v i0="${IDLE_CPU[$path:0]}" -v i1="${IDLE_CPU[$path:1]}" -v n="$ios" 'BEGIN {
		split(c, x, " "); split(i0, a, " "); split(i1, b, " ")
		r0 = a[1] / a[2]; r1 = b[1] / b[2]
		net = x[1] - (r0 + r1) / 2 * x[2]; noise = (r0 > r1 ? r0 - r1 : r1 - r0) / 2 * x[2] + 2
		if (net > noise) printf "%.1f", net * 10 * 1000 / n
		else printf "<%.1f", ((net > 0 ? net : 0) + noise) * 10 * 1000 / n }'
}

# cpu_lines PATH...: how the lender's CPU figures were taken, and each path's raw jiffies.
cpu_lines() {
	local p
	line '%s' "(lender CPU: busy jiffies of its /proc/stat over the job less its mean idle rate over the same time;"
	line '%s' " <X: within the lender's idle noise, X an upper bound. Busy/total jiffies (2 vCPUs, USER_HZ 100):)"
	for p; do
		line '%s' "  ${TITLE[$p]:-$p}: idle windows ${IDLE_CPU[$p:0]:-n/a}, ${IDLE_CPU[$p:1]:-n/a}$(for j in "${JOBS[@]}"; do
			printf '; %s: %s, %s I/Os' "$j" "${CPU[$p:$j]:-n/a}" "$(fig "$p:$j" ios)"; done)"
	done
}

# percentiles PATH:JOB: the job's completion-latency percentiles, "P MS" lines (none if not measured).
percentiles() {
	[ -z "${JSON[$1]:-}" ] || jq -r '.jobs[0].read.clat_ns.percentile | to_entries[] | "\(.key) \(.value)"' <<<"${JSON[$1]}" |
		awk '{ printf "%s %.3f\n", $1 + 0, $2 / 1e6 }'
}

# goal WHAT MET-WHEN RATIO...: "met" if every ratio satisfies the awk condition on r, "n/a" if one is n/a;
# an upper bound "<R" that does not satisfy it leaves the goal unresolved.
goal() {
	local what=$1 cond=$2 r verdict=met
	shift 2
	for r; do
		[ "$r" != n/a ] || { verdict="n/a (not measured)" && break; }
		awk -v r="${r#<}" "BEGIN { exit !($cond) }" && continue
		if [ "${r#<}" = "$r" ]; then verdict=missed; elif [ $verdict = met ]; then verdict="unresolved (a bound above the goal)"; fi
	done
	line '%-64s %s' "$what: $*" "$verdict"
}

# bench_missing: fails, naming them, when a job of a path has no fio figures.
bench_missing() {
	local missing
	missing=$(for k in "${!JSON[@]}"; do [ -n "${JSON[$k]}" ] || echo "$k"; done)
	[ -z "$missing" ] || { echo "no fio figures for:" $missing && return 1; }
}
