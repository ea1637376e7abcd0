#!/bin/bash
# Figures of the lender's NVMe in an L2 guest through farpass, against the same emulated NVMe model
# attached to borrower1 itself and passed through locally with vfio-pci, in one rig run:
#  - one L2 guest (3 GiB) with both devices runs fio (O_DIRECT, psync, QD1, time-based) on the local
#    one, then on the remote one: 4 KiB random read (completion latency mean/p50/p99, IOPS) and 128 KiB
#    sequential read (MB/s), printed side by side with the ratio farpass/local;
#  - interrupts relayed per second: borrower1's farpass counters (irq_delivered, irq_signalled) read
#    twice inside the farpass 4 KiB run, over a window timed on L0, with that run's guest IOPS;
#  - borrow latency (bus-master enable -> device usable: RAM probe and layout, pin and map, BORROW
#    upcall, interrupt bridge) of guests of 256 MiB, 1 GiB and 3 GiB with only the farpass device, their
#    RAM in 4 KiB pages, transparent huge pages and hugetlbfs pages, booted one after another, from
#    borrower1's debugfs farpass/last_borrow: each step's time, with pinning and IOMMU mapping apart,
#    the physically contiguous runs mapped and the IOMMU map calls (each ends with one IOTLB sync); the
#    pages pinned ahead from QEMU's first access after opening the device and how long that took, and the borrow's share of
#    staging + borrow (the guest's stall);
#    beside each, the kernel time local vfio-pci takes in borrower1 to pin and map the same RAM.
# Plots beside figures.txt in rig-out/bench_remote_nvme/ (tests/bench/plot-lib.sh), each from the table
# (.dat) beside it: latency.svg, the two 4 KiB jobs' completion-latency percentiles; borrow.svg, the
# borrow's total and local vfio-pci's time against the guest's size, per backing.
# L0's load average is printed before and after: the figures vary with it.
# The rig is nested TCG: absolute figures are the emulation's, not hardware's; the ratios compare two
# paths through the same emulation.
set -euo pipefail
. "$(dirname "$0")/../e2e/e2e-lib.sh"
. "$(dirname "$0")/plot-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000be01
MDEV=/sys/bus/mdev/devices/$U
LOCAL_NVME=0000:00:08.0
RUNTIME=30		# seconds of each fio job (guest clock)
IRQ_SKIP=6 IRQ_WINDOW=15	# the interrupt window: from IRQ_SKIP s into the farpass 4 KiB job, IRQ_WINDOW s
# BENCH_PARTS: the parts to run (default both); BENCH_BORROW_MEMS and BENCH_BORROW_BACKINGS: the borrow
# part's guest sizes and RAM backings (backing_on).
BENCH_PARTS=${BENCH_PARTS:-fio borrow}
read -ra BORROW_MEMS <<<"${BENCH_BORROW_MEMS:-256M 1G 3G}"
read -ra BORROW_BACKINGS <<<"${BENCH_BORROW_BACKINGS:-4k thp huge}"
THP=/sys/kernel/mm/transparent_hugepage/enabled
FIO_MEM=3G
# An earlier run's plots: a part not run now draws none.
rm -f "$RIGDIR"/{latency,borrow}.{dat,svg}

# borrower1's own NVMe (same model and backing as the lender's), and the remote path; the largest
# guest's 3 GiB are pinned in borrower1.
e2e_borrower_nvme 256M
e2e_remote_up $B $U 4608
fp_bind_vfio $B $LOCAL_NVME

results=()
line() { results+=("$(printf "$@")"); }
# ratio A B: B/A with two decimals, or n/a.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b != "") printf "%.2f", b / a; else print "n/a" }'; }
# ms LAST_BORROW NAME: a figure of farpass/last_borrow, us -> ms.
ms() { awk -v v="$(e2e_counter "$1" "$2")" 'BEGIN { printf "%.1f", v / 1000 }'; }
# wait_free: the lender has no borrow (the last guest's device came back) before the next guest.
wait_free() {
	local i
	for ((i = 0; i < 60; i++)); do
		[ "$(ag_ctl lender borrows)" = "no borrows" ] && return 0
		sleep 1
	done
	echo "the lender still shows a borrow" >&2
	return 1
}

# --- fio: one guest with both NVMe controllers, told apart by serial; local first, then farpass.
# Each job prints "BENCH-FIO NAME rc=RC TERSE" (fio's terse v3 line); the farpass 4 KiB job pauses
# first ("irq"), and the guest's interrupt count of that controller is printed around it.
bench_fio() {
	jobs=(rand4k:randread:4k seq128k:read:128k)
	script="$E2E_GUEST_PAUSE
ctrl() { for c in /sys/class/nvme/nvme*; do [ \"\$(tr -d ' ' <\$c/serial)\" = \"\$1\" ] && echo \${c##*/}; done; }
irqs() { awk -v q=\"\$1q\" 'index(\$NF, q) == 1 { for (i = 2; i <= NF && \$i ~ /^[0-9]+\$/; i++) n += \$i } END { print n + 0 }' /proc/interrupts; }
local_ctl=\$(ctrl borrower-nvme) remote_ctl=\$(ctrl farpass-nvme0)
echo \"BENCH-CTRL local=\$local_ctl remote=\$remote_ctl\"
job() {
	fio --thread --name=\$1 --filename=/dev/\${2}n1 --direct=1 --ioengine=psync --iodepth=1 --rw=\$3 --bs=\$4 \\
		--size=128M --time_based --runtime=$RUNTIME --output-format=terse >/tmp/t 2>&1
	echo \"BENCH-FIO \$1 rc=\$? \$(tr '\\n' ' ' </tmp/t)\"
}"
	for path in local remote; do
		for j in "${jobs[@]}"; do
			IFS=: read -r name rw bs <<<"$j"
			if [ "$path:$name" = remote:rand4k ]; then
				script+="
e2e_pause irq
echo \"BENCH-IRQS before \$(irqs \$remote_ctl)\"
job $path-$name \$${path}_ctl $rw $bs
echo \"BENCH-IRQS after \$(irqs \$remote_ctl)\""
			else
				script+="
job $path-$name \$${path}_ctl $rw $bs"
			fi
		done
	done

	wait_free
	e2e_l2_start $B $FIO_MEM "$script" -device vfio-pci,host=$LOCAL_NVME -device vfio-pci,sysfsdev=$MDEV
	c0='' c1=''
	if e2e_l2_wait $B irq 1800; then
		# The window lies inside the job: counters read on borrower1, timed on L0 after each read returns.
		e2e_l2_continue $B
		sleep $IRQ_SKIP
		c0=$(rig_run $B -- "cat $FP_DBG/counters")
		t0=$(date +%s%N)
		sleep $IRQ_WINDOW
		c1=$(rig_run $B -- "cat $FP_DBG/counters")
		t1=$(date +%s%N)
	else
		# e.g. QEMU stopped the guest (the device surprise-removed): it would wait for E2E_L2_TIMEOUT.
		e2e_qmp $B quit || true
	fi
	out=$(e2e_l2_finish $B) || echo "L2 (fio) QEMU: status $?"
	{ grep -E '^(BENCH-|L2-)' <<<"$out" || true; } |
		sed -E "s/^(BENCH-FIO [^ ]+ rc=[0-9]+) .*/\1 (fio's terse line: $(basename "$E2E_L2_LOG"))/; s/^/    L2> /"

	# fio terse v3 (fio's HOWTO): read bandwidth KiB/s at field 7, IOPS 8, completion latency (us) mean 16,
	# percentiles as "P%=us" fields 18-37.
	terse() { sed -n "s/^BENCH-FIO $1 rc=0 //p" <<<"$out" | tr -d '\r' | head -1 || true; }
	field() {
		awk -F';' -v f="$2" '{ if (f ~ /%$/) { for (i = 18; i <= 37; i++) if (index($i, f "=") == 1) print substr($i, length(f) + 2) }
			else if (f == "MB/s") printf "%.1f\n", $7 * 1024 / 1e6; else if (f == 16) printf "%.0f\n", $16; else print $f }' <<<"$1"
	}
	line '%s' ""
	line '%s' "Guest fio, $FIO_MEM L2, O_DIRECT psync QD1, ${RUNTIME} s per job: same NVMe model, local vfio-pci vs farpass"
	line '%-44s %14s %14s %14s' "" "local vfio-pci" farpass farpass/local
	for j in "${jobs[@]}"; do
		IFS=: read -r name rw bs <<<"$j"
		l=$(terse local-$name) r=$(terse remote-$name)
		if [ -z "$l" ] || [ -z "$r" ]; then
			line '%s' "$name: n/a (a fio job failed: see $E2E_L2_LOG)"
			continue
		fi
		case $name in
		rand4k) rows=("4 KiB randread completion latency mean (us):16" "4 KiB randread completion latency p50 (us):50.000000%"
			"4 KiB randread completion latency p99 (us):99.000000%" "4 KiB randread IOPS:8") ;;
		seq128k) rows=("128 KiB seq read bandwidth (MB/s):MB/s" "128 KiB seq read completion latency mean (us):16") ;;
		esac
		for row in "${rows[@]}"; do
			a=$(field "$l" "${row##*:}") b=$(field "$r" "${row##*:}")
			line '%-44s %14s %14s %14s' "${row%:*}" "$a" "$b" "$(ratio "$a" "$b")"
		done
	done

	# The 4 KiB jobs' completion-latency percentiles (terse fields 18-37, "P%=us", unused ones "0%=0"), ms.
	percentiles() { terse "$1" | tr ';' '\n' | sed -n '18,37p' | awk -F'%=' '$1 > 0 { printf "%s %.3f\n", $1 + 0, $2 / 1000 }'; }
	plot_join percentile "local vfio-pci=$(percentiles local-rand4k)" "farpass=$(percentiles remote-rand4k)" >"$RIGDIR/latency.dat"
	plot percentiles "$RIGDIR/latency.dat" "QD1 4 KiB randread completion latency, $FIO_MEM L2: local vfio-pci vs farpass" \
		"percentile (%)" "completion latency (ms, log scale)"
	line '%s' "$PLOT_MSG"

	line '%s' ""
	# guest_irqs: the guest's interrupt count of the farpass controller over its 4 KiB job.
	guest_irqs() {
		local a b
		a=$(sed -n 's/^BENCH-IRQS before //p' <<<"$out" | tr -d '\r') b=$(sed -n 's/^BENCH-IRQS after //p' <<<"$out" | tr -d '\r')
		[ -n "$a" ] && [ -n "$b" ] && echo $((b - a)) || echo n/a
	}
	if [ -n "$c1" ]; then
		secs=$(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.2f", d / 1e9 }')
		line '%s' "Interrupts relayed by farpass on borrower1, during the farpass 4 KiB randread ($secs s window, L0 clock)"
		for c in irq_delivered:"doorbell mailbox entries handed to the mdev" irq_signalled:"eventfd signals to the L2's QEMU"; do
			d=$(($(e2e_counter "$c1" "${c%%:*}") - $(e2e_counter "$c0" "${c%%:*}")))
			line '%-44s %14s %s' "${c%%:*} per second" "$(awk -v d=$d -v s="$secs" 'BEGIN { printf "%.0f", d / s }')" \
				"($d in the window: ${c#*:})"
		done
		r=$(terse remote-rand4k)
		line '%-44s %14s %s' "guest IOPS of that job (fio)" "$([ -n "$r" ] && field "$r" 8 || echo n/a)" \
			"(guest interrupts of that controller over the whole job: $(guest_irqs))"
	else
		line '%s' "Interrupts relayed: n/a (the guest did not reach its farpass 4 KiB job: see $E2E_L2_LOG)"
	fi
}

# --- Borrow latency: one guest per size and RAM backing, which only waits for its disk (the borrow is
# its nvme probe); before it, the same RAM DMA-mapped by local vfio-pci in the same L1.
# backing_on BACKING MEM: borrower1 set for the next guest's RAM; prints QEMU's options for it:
#  4k    transparent huge pages off: 4 KiB pages (QEMU asks for THP on guest RAM: L1's default below);
#  thp   borrower1's THP setting as it is;
#  huge  2 MiB hugetlbfs pages reserved for it (a memfd); fails if borrower1 cannot reserve them all.
backing_on() {
	local pages
	case $1 in
	4k) rig_run $B -- "echo never >$THP" ;;
	huge)
		pages=$(($(numfmt --from=iec "$2") >> 21))
		[ "$(rig_run $B -- "echo $pages >/proc/sys/vm/nr_hugepages; cat /proc/sys/vm/nr_hugepages")" -ge $pages ] ||
			return 1
		echo "-object memory-backend-memfd,id=ram,size=$2,hugetlb=on,hugetlbsize=2M -machine memory-backend=ram"
		;;
	esac
}
backing_off() { rig_run $B -- "echo $thp_mode >$THP; echo 0 >/proc/sys/vm/nr_hugepages"; }
# local_map_ms MEM QEMU-ARGS...: the kernel time of QEMU's VFIO container ioctls (vfio_iommu_type1_ioctl,
# function_graph tracer: its MAP_DMA calls, into which the pinning and mapping are inlined, and a few
# queries of microseconds) when it starts, stopped (-S), with MEM of RAM and borrower1's own NVMe on
# vfio-pci: local pass-through pins and IOMMU-maps all guest RAM then. Prints "MS CALLS", or "n/a 0"
# (QEMU's messages in borrower1's /tmp/lmap.out).
local_map_ms() {
	local mem=$1 r
	shift
	r=$(rig_run $B -- "set -e; T=/sys/kernel/tracing; mountpoint -q \$T || mount -t tracefs none \$T
echo 0 >\$T/tracing_on; echo nop >\$T/current_tracer; echo vfio_iommu_type1_ioctl >\$T/set_graph_function
echo 1 >\$T/max_graph_depth; echo 1 >\$T/options/funcgraph-tail; echo function_graph >\$T/current_tracer
echo >\$T/trace; echo 1 >\$T/tracing_on; rm -f /tmp/lmap.pid; rc=0
timeout 600 qemu-system-x86_64 -M $E2E_L2_MACHINE -accel tcg -m $mem $* -nodefaults -display none -S \
	-daemonize -pidfile /tmp/lmap.pid -device vfio-pci,host=$LOCAL_NVME >/tmp/lmap.out 2>&1 || rc=\$?
echo 0 >\$T/tracing_on
[ \$rc != 0 ] || awk '/vfio_iommu_type1_ioctl/ { for (i = 1; i < NF; i++) if (\$(i + 1) == \"us\") { s += \$i; n++ } }
	END { if (n) printf \"BENCH-LMAP %.1f %d\\n\", s / 1000, n }' \$T/trace
echo nop >\$T/current_tracer; p=\$(cat /tmp/lmap.pid 2>/dev/null || true)
[ -z \"\$p\" ] || { kill \$p; while [ -e /proc/\$p ]; do sleep 0.2; done; }") || true
r=$(sed -n 's/^BENCH-LMAP //p' <<<"$r")
echo "${r:-n/a 0}"
}
bench_borrow() {
	local mem backing qargs lmap lb n0 n1 disk mib series=()
	# The plot's "MiB MS" lines per series ("farpass BACKING", "local BACKING").
	local -A pts
	thp_mode=$(rig_run $B -- "sed 's/.*\[\(.*\)\].*/\1/' $THP")
	line '%s' "Borrow latency: guest bus-master enable -> device usable, borrower1 debugfs farpass/last_borrow;"
	line '%s' "local = the same RAM DMA-mapped by vfio-pci in borrower1 (QEMU's VFIO_IOMMU_MAP_DMA calls, kernel time)"
	line '%s' "(backing: 4k = 4 KiB pages, thp = borrower1's transparent huge pages ($thp_mode), huge = hugetlbfs 2 MiB)"
	line '%s' "(staged: pages pinned ahead, from QEMU's first access after opening the device; staging: from that access"
	line '%s' " until they were all pinned or the borrow took them; stall: the borrow's total, which the guest waits for,"
	line '%s' " over staging + total)"
	line '%-6s %-5s %7s %7s %6s %5s %8s %8s %7s %7s %8s %8s %6s %8s %8s %s' RAM backing pages staged runs maps "RAM scan" \
		staging pin map BORROW total stall local total/local "(ms; maps = IOMMU map calls, each one IOTLB sync)"
	for mem in "${BORROW_MEMS[@]}"; do
		for backing in "${BORROW_BACKINGS[@]}"; do
			wait_free
			if ! qargs=$(backing_on $backing "$mem"); then
				line '%-6s %-5s %s' "$mem" $backing "n/a: borrower1 could not reserve the huge pages"
				backing_off
				continue
			fi
			lmap=$(local_map_ms "$mem" $qargs)
			n0=$(e2e_counter "$(rig_run $B -- "cat $FP_DBG/counters")" upcalls_borrow)
			# (not e2e_l2 in a subshell: E2E_L2_LOG names this guest's log)
			e2e_l2_start $B "$mem" 'for i in $(seq 120); do [ -b /dev/nvme0n1 ] || dmesg | grep -q "nvme0: .*failed" && break; sleep 1; done
echo "BENCH-DISK $([ -b /dev/nvme0n1 ] && echo yes || echo no)"' -device vfio-pci,sysfsdev=$MDEV $qargs
			out=$(e2e_l2_finish $B) || echo "L2 ($mem) QEMU: status $?"
			backing_off
			n1=$(e2e_counter "$(rig_run $B -- "cat $FP_DBG/counters")" upcalls_borrow)
			lb=$(rig_run $B -- "cat $FP_DBG/last_borrow")
			disk=$(sed -n 's/^BENCH-DISK //p' <<<"$out" | tr -d '\r')
			echo "guest $mem $backing: borrows $((n1 - n0)), disk ${disk:-?}; last_borrow: $(tr '\n' ' ' <<<"$lb"); local map: $lmap"
			if ((n1 == n0)); then
				line '%-6s %-5s %s' "$mem" $backing "n/a: no borrow (guest disk: ${disk:-?}; see $E2E_L2_LOG)"
				continue
			fi
			line '%-6s %-5s %7s %7s %6s %5s %8s %8s %7s %7s %8s %8s %6s %8s %8s %s' "$mem" $backing \
				"$(e2e_counter "$lb" pages)" "$(e2e_counter "$lb" staged_pages)" "$(e2e_counter "$lb" runs)" \
				"$(e2e_counter "$lb" map_calls)" "$(ms "$lb" scan_us)" "$(ms "$lb" stage_us)" "$(ms "$lb" pin_us)" \
				"$(ms "$lb" map_us)" "$(ms "$lb" upcall_us)" "$(ms "$lb" total_us)" \
				"$(awk -v s="$(e2e_counter "$lb" stage_us)" -v t="$(e2e_counter "$lb" total_us)" 'BEGIN { printf "%.2f", t / (s + t) }')" \
				"${lmap% *}" \
				"$(ratio "${lmap% *}" "$(ms "$lb" total_us)")" \
				"$( ((n1 - n0 == 1)) || echo "(the last of $((n1 - n0)) borrows)")$([ "$disk" = yes ] || echo "(then the guest's nvme probe failed: no disk)")"
			mib=$(($(numfmt --from=iec "$mem") >> 20))
			pts[farpass $backing]+="$mib $(ms "$lb" total_us)"$'\n'
			[ "${lmap% *}" = n/a ] || pts[local $backing]+="$mib ${lmap% *}"$'\n'
		done
	done
	for backing in "${BORROW_BACKINGS[@]}"; do
		series+=("farpass $backing=${pts[farpass $backing]:-}" "local vfio-pci $backing=${pts[local $backing]:-}")
	done
	plot_join "guest RAM (MiB)" "${series[@]}" >"$RIGDIR/borrow.dat"
	plot paired "$RIGDIR/borrow.dat" "Borrow: farpass bus-master enable -> device usable; local vfio-pci pin+map of the same RAM" \
		"guest RAM (MiB)" "ms (log scale)"
	line '%s' "$PLOT_MSG"
}

load() { cut -d' ' -f1-3 /proc/loadavg; }
line '%s' "L0 load (1/5/15 min) at the start: $(load)"
for part in $BENCH_PARTS; do
	bench_$part
	line '%s' ""
done
line '%s' "L0 load at the end: $(load)"
line '%s' "(nested TCG rig: absolute figures are the emulation's, not hardware figures; compare the ratios)"

printf '%s\n' "${results[@]}" | tee "$RIGDIR/figures.txt"
plot_check
