#!/bin/bash
# The interrupt path (issue 17, "interrupt path"): what relaying a lent device's interrupts costs, in one
# rig. The lender's NVMe through farpass, and borrower1's own NVMe (same model and backing) passed
# through locally with vfio-pci, each in its own 512 MiB L2 guest of borrower1 booted with
# nvme.poll_queues=1, one after the other, run the same fio jobs (io_uring, QD1 4 KiB random read,
# tests/bench/fio): irq4k with interrupt-driven completions, poll4k with polled ones (IOPOLL: the
# guest's driver reaps them from its poll queue, which has no interrupt). Figures (bench-lib.sh):
#  - latency p50/p99 and IOPS of the four runs, polled/irq on each path and farpass/local in each mode;
#  - the hops of each job, per guest I/O, from counts L0 reads just before and after it (the guest
#    paused): on the lender, the device's MSI-X interrupts (its vfio-msix lines of /proc/interrupts) and
#    the bridge's mailbox posts, each with a doorbell (farpass counter irq_posted); on borrower1, the
#    NTB's interrupts (its ntb_epf lines), the mailbox entries handed to the mdev (irq_delivered) and the
#    eventfd signals to the L2's QEMU (irq_signalled); for the local device, borrower1's vfio-msix
#    interrupts of it (one hop: device to QEMU's eventfd);
#  - the CPU each interrupt costs in the handlers that carry it, over each job (ftrace's function_graph
#    tracer on those functions only, its own overhead included): on the lender, vfio-pci's MSI handler
#    (vfio_msihandler: its eventfd's wake-up is farpass's hook, which posts to the mailbox and rings the
#    doorbell, all inside it); on borrower1, the NTB's interrupt handler (ntb_epf_vec_isr: farpass drains
#    the mailbox and signals QEMU's eventfd inside it) and, for the local device, vfio_msihandler (it
#    signals QEMU's eventfd): calls and mean microseconds per call;
#  - the lender's CPU per 1000 I/Os of each job from its /proc/stat (its busy time less its idle rate,
#    "<X" within its noise); the local jobs' are a control: the lender is not on their path.
# L0's load average is printed before and after. Nested TCG: absolute figures are the emulation's, not
# hardware's; the ratios compare paths through the same emulation.
set -euo pipefail
. "$(dirname "$0")/bench-lib.sh"

U=8f7c3ab0-5c6e-4e41-9d3e-00000000be03
MDEV=/sys/bus/mdev/devices/$U
GUEST_MEM=512M
RUNTIME=${BENCH_IRQ_RUNTIME:-20}
JOBS=(irq4k poll4k)
PATHS=(local farpass)
TITLE=([local]="local vfio-pci" [farpass]=farpass)
E2E_L2_APPEND="nvme.poll_queues=1"

# irq_count VM REGEX: the sum over CPUs of VM's /proc/interrupts lines that match REGEX.
irq_count() {
	rig_run "$1" -- "cat /proc/interrupts" |
		awk -v re="$2" '$0 ~ re { for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i } END { print n + 0 }'
}
declare -A HANDLERS=([lender]=vfio_msihandler [$B]="vfio_msihandler ntb_epf_vec_isr")
# graph_on VM: the function_graph tracer on VM for its HANDLERS only (set_ftrace_filter: nothing else is
# hooked, so each call is one line with its duration), the buffer emptied.
graph_on() {
	rig_run "$1" -- "set -e; T=/sys/kernel/tracing; mountpoint -q \$T || mount -t tracefs none \$T
echo 0 >\$T/tracing_on; echo nop >\$T/current_tracer; echo '${HANDLERS[$1]}' >\$T/set_ftrace_filter || true
for f in ${HANDLERS[$1]}; do grep -q \"^\$f\\b\" \$T/set_ftrace_filter || echo \"bench_irq: \$f cannot be traced on $1\"; done
echo 1 >\$T/options/funcgraph-tail; echo function_graph >\$T/current_tracer; echo >\$T/trace; echo 1 >\$T/tracing_on"
}
# graph_off VM KEY: the tracer stopped, its trace kept in $RIGDIR/graph-VM-KEY.txt; "VM handler_calls:FUNC N"
# and "VM handler_us:FUNC US" lines, US the sum of the calls' durations.
graph_off() {
	rig_run "$1" -- "T=/sys/kernel/tracing; echo 0 >\$T/tracing_on; cat \$T/trace; echo nop >\$T/current_tracer
echo >\$T/set_ftrace_filter" |
		tee "$RIGDIR/graph-$1-${2//:/-}.txt" | graph_sum "$1"
}
# graph_sum VM: of function_graph's output, the lines that end a call with its duration: a call with
# nothing recorded inside ("CPU) [+!#] DURATION us | FUNC [MODULE]();") or the end of one (funcgraph-tail:
# "... DURATION us | } /* FUNC [MODULE] */"); "VM handler_calls:FUNC N" and "VM handler_us:FUNC US".
graph_sum() {
	awk -v vm="$1" 'match($0, /[0-9.]+ us +\| +(} \/\* )?[a-z_0-9]+( \[[a-z_0-9]+\])?(\(\);| \*\/)/) {
			split(substr($0, RSTART), w, /[ |(\[}\/*]+/); n[w[3]]++; t[w[3]] += w[1] }
		END { for (f in n) printf "%s handler_calls:%s %d\n%s handler_us:%s %.1f\n", vm, f, n[f], vm, f, t[f] }'
}
# sample KEY: the hops' counts now, "HOST NAME VALUE" lines in SAMPLE[KEY] (BENCH_SAMPLE); the handlers
# traced from a job's start (KEY PATH:JOB:pre), their calls and time added at its end.
declare -A SAMPLE
sample() {
	local vm
	SAMPLE[$1]="$(e2e_snapshot $B)
lender device_msix $(irq_count lender "vfio-msix.*$LENDER_NVME")
$B ntb_irqs $(irq_count $B ntb_epf)
$B local_msix $(irq_count $B "vfio-msix.*$LOCAL_NVME")"
	for vm in lender $B; do
		if [ "${1##*:}" = pre ]; then graph_on $vm; else SAMPLE[$1]+=$'\n'"$(graph_off $vm "${1%:post}")"; fi
	done
}
BENCH_SAMPLE=sample
# count PATH:JOB HOST NAME: HOST's count NAME sampled at the job's end (0 if none), or n/a.
count() {
	local v
	[ -n "${SAMPLE[$1:post]:-}" ] || { echo n/a && return; }
	v=$(e2e_snap "$2" "${SAMPLE[$1:post]}" "$3")
	echo "${v:-0}"
}
# per_call PATH:JOB HOST FUNC: "CALLS US-PER-CALL" of HOST's handler FUNC over the job.
per_call() {
	local n t
	n=$(count "$1" "$2" "handler_calls:$3") t=$(count "$1" "$2" "handler_us:$3")
	awk -v n="$n" -v t="$t" 'BEGIN { if (n ~ /^[0-9]+$/ && n > 0) printf "%d %.1f", n, t / n; else print n, "n/a" }'
}
# hops PATH:JOB HOST NAME: how many HOST's count NAME grew over the job, per guest I/O, or n/a.
hops() {
	local ios a b
	ios=$(fig "$1" ios)
	a=$(e2e_snap "$2" "${SAMPLE[$1:pre]:-}" "$3")
	b=$(e2e_snap "$2" "${SAMPLE[$1:post]:-}" "$3")
	[ -n "$a" ] && [ -n "$b" ] && [ "$ios" != n/a ] && [ "$ios" -gt 0 ] || { echo n/a && return; }
	awk -v d=$((b - a)) -v n="$ios" 'BEGIN { printf "%.2f", d / n }'
}

line '%s' "L0 load (1/5/15 min) at the start: $(load)"
e2e_borrower_nvme 256M
e2e_remote_up $B $U 1024
fp_bind_vfio $B $LOCAL_NVME
run_path local /dev/nvme0n1 $GUEST_MEM -device vfio-pci,host=$LOCAL_NVME
run_path farpass /dev/nvme0n1 $GUEST_MEM -device vfio-pci,sysfsdev=$MDEV

line '%s' ""
line '%s' "The interrupt path: a $GUEST_MEM L2 guest of borrower1 (nvme.poll_queues=1), fio io_uring QD1 4 KiB randread,"
line '%s' "${RUNTIME} s per job (guest clock); irq = interrupt-driven completions, polled = IOPOLL (no interrupt)"
line '%-40s %12s %12s %12s %12s' "" "local irq" "local polled" "farpass irq" "farpass poll"
for f in p50:"latency p50 (us)" p99:"latency p99 (us)" iops:IOPS; do
	line '%-40s %12s %12s %12s %12s' "${f#*:}" "$(fig local:irq4k "${f%%:*}")" "$(fig local:poll4k "${f%%:*}")" \
		"$(fig farpass:irq4k "${f%%:*}")" "$(fig farpass:poll4k "${f%%:*}")"
done
line '%-40s %12s %12s' "" local farpass
line '%-40s %12s %12s' "p50 polled/irq" "$(ratio "$(fig local:irq4k p50)" "$(fig local:poll4k p50)")" \
	"$(ratio "$(fig farpass:irq4k p50)" "$(fig farpass:poll4k p50)")"
line '%-40s %12s %12s' "" irq polled
line '%-40s %12s %12s' "p50 farpass/local" "$(ratio "$(fig local:irq4k p50)" "$(fig farpass:irq4k p50)")" \
	"$(ratio "$(fig local:poll4k p50)" "$(fig farpass:poll4k p50)")"

line '%s' ""
line '%s' "Hops per guest I/O (count over the job / the job's I/Os):"
line '%-64s %10s %10s' "" irq polled
for h in "lender device_msix:lender: the device's MSI-X interrupts" \
	"lender irq_posted:lender: mailbox posts, a doorbell each" \
	"$B ntb_irqs:$B: NTB interrupts" \
	"$B irq_delivered:$B: mailbox entries handed to the mdev" \
	"$B irq_signalled:$B: eventfd signals to the L2's QEMU"; do
	k=${h%%:*}
	line '%-64s %10s %10s' "farpass, ${h#*:}" "$(hops farpass:irq4k $k)" "$(hops farpass:poll4k $k)"
done
line '%-64s %10s %10s' "local, $B: the device's MSI-X interrupts (to QEMU's eventfd)" \
	"$(hops local:irq4k $B local_msix)" "$(hops local:poll4k $B local_msix)"

line '%s' ""
line '%s' "CPU per interrupt in the handlers that carry it, over the irq job (function_graph on them only; calls, us per call):"
for h in "farpass lender vfio_msihandler:farpass, lender: vfio-pci's MSI handler (eventfd, mailbox post, doorbell)" \
	"farpass $B ntb_epf_vec_isr:farpass, $B: the NTB's handler (mailbox drain, eventfd to QEMU)" \
	"local $B vfio_msihandler:local, $B: vfio-pci's MSI handler (eventfd to QEMU)"; do
	read -r p vm f <<<"${h%%:*}"
	read -r n us <<<"$(per_call "$p:irq4k" "$vm" "$f")"
	line '%-64s %10s %10s' "${h#*:}" "$n" "$us"
done
line '%s' ""
line '%-64s %10s %10s' "lender CPU ms per 1000 I/Os (/proc/stat)" irq polled
line '%-64s %10s %10s' "farpass" "$(cpu_per_kio farpass:irq4k)" "$(cpu_per_kio farpass:poll4k)"
line '%-64s %10s %10s' "local vfio-pci (the lender is not on its path: its noise)" "$(cpu_per_kio local:irq4k)" \
	"$(cpu_per_kio local:poll4k)"
cpu_lines "${PATHS[@]}"

series=()
for p in "${PATHS[@]}"; do
	for j in "${JOBS[@]}"; do series+=("${TITLE[$p]} ${j%4k}=$(percentiles "$p:$j")"); done
done
plot_join percentile "${series[@]}" >"$RIGDIR/latency.dat"
plot percentiles "$RIGDIR/latency.dat" "QD1 4 KiB randread completion latency, $GUEST_MEM L2: interrupts vs polling, local vs farpass" \
	"percentile (%)" "completion latency (ms, log scale)"
line '%s' "$PLOT_MSG"
line '%s' ""
line '%s' "L0 load at the end: $(load)"
line '%s' "(nested TCG rig: absolute figures are the emulation's, not hardware figures; compare the ratios)"

printf '%s\n' "${results[@]}" | tee "$RIGDIR/figures.txt"
bench_missing && plot_check
