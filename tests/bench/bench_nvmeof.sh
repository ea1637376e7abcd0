#!/bin/bash
# The lender's NVMe in an L2 guest of borrower1 two ways over the same emulated NTB link, in one rig run,
# one after the other (the lender's device is on vfio-pci for the first and on its nvme driver for the
# second):
#  (a) farpass: the device itself, an mdev of borrower1's NTB passed through to the guest;
#  (b) NVMe over Fabrics/TCP: the lender's nvmet + nvmet-tcp export its namespace on 10.98.0.1, carried
#      by upstream ntb_transport + ntb_netdev on the same NTB (farpass unloaded on both hosts first);
#      borrower1's nvme-tcp connects, and its namespace is the guest's virtio-blk disk (cache=none).
# The guest runs the same fio job files (tests/bench/fio/*.fio, JSON output) on each: QD1 4 KiB random
# read completion latency p50/p99, 128 KiB sequential read MB/s, QD16 4 KiB random read IOPS. Around
# each job and over an idle window before and after them the guest pauses and L0 reads the lender L1's
# /proc/stat: the lender's CPU per 1000 I/Os is its busy time (all but idle and iowait) over the job,
# less its mean idle rate over the same time, divided by the job's I/Os; where that is within the
# idle windows' spread (the lender's own noise: its rig command server, agent, timers) it is printed as
# an upper bound "<X" (the excess plus the spread). Printed side by side with farpass/NVMe-oF and the
# issue's goals (issue 17: latency <= 0.5x, bandwidth >= 1x, lender CPU per I/O < 10%), met or missed.
# Plot beside figures.txt in rig-out/bench_nvmeof/ (tests/bench/plot-lib.sh): latency.svg, the QD1 4 KiB
# job's completion-latency percentiles of both paths, from latency.dat beside it.
# L0's load average is printed before and after. Nested TCG: absolute figures are the emulation's, not
# hardware's; the ratios compare two paths over the same emulated link.
set -euo pipefail
. "$(dirname "$0")/bench-lib.sh"

U=8f7c3ab0-5c6e-4e41-9d3e-00000000be02
MDEV=/sys/bus/mdev/devices/$U
GUEST_MEM=512M
RUNTIME=${BENCH_NVMEOF_RUNTIME:-20}	# seconds of each fio job (guest clock)
JOBS=(rand4k seq128k iops4k)
NQN=nqn.2026-11.org.farpass:bench-nvmeof
NVMF_PORT=4420
PATHS=(farpass nvmeof)
declare -A TITLE=([farpass]=farpass [nvmeof]=NVMe-oF)

# ns_line VM: of a command's output in VM, prints the namespace its "BENCH-NS NAME" line names; the
# other lines (what failed) go to stderr.
ns_line() { awk -v vm="$1" '/^BENCH-NS / { print $2; next } { print "  " vm "> " $0 >"/dev/stderr" }'; }

# farpass gives the NTB and the device back: the mdev removed, both agents stopped, farpass.ko unloaded
# on both hosts (ntb_transport needs the NTB: one client per NTB device), the lender's NVMe from
# vfio-pci to its nvme driver. Prints the lender's namespace block device (the rest to stderr).
farpass_off() {
	{ rig_run $B -- "echo 1 >$MDEV/remove" && ag_stop $B && rig_run $B -- "rmmod farpass" && ag_stop lender; } >&2 &&
		rig_run lender -- "set -e; rmmod farpass
d=/sys/bus/pci/devices/$LENDER_NVME
echo >\$d/driver_override
[ ! -e \$d/driver ] || echo $LENDER_NVME >\$d/driver/unbind
modprobe nvme
echo $LENDER_NVME >/sys/bus/pci/drivers_probe
for i in \$(seq 150); do n=\$(ls \$d/nvme/*/ 2>/dev/null | grep -m1 '^nvme[0-9]*n1\$') && break; sleep 0.2; done
[ -b /dev/\$n ] && echo BENCH-NS \$n" | ns_line lender
}

# nvmeof_up LENDER-NS: the Ethernet over the NTB up on both hosts, the lender's nvmet exporting LENDER-NS
# on a TCP port of 10.98.0.1 (configfs), borrower1 connected with nvme-tcp. Prints borrower1's block
# device of the namespace (the rest to stderr).
nvmeof_up() {
	{ ntb_net_up lender && ntb_net_up $B && ntb_net_carrier lender && ntb_net_carrier $B; } >&2 || return
	rig_run lender -- "set -e; modprobe -a nvmet nvmet-tcp
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
S=/sys/kernel/config/nvmet/subsystems/$NQN P=/sys/kernel/config/nvmet/ports/1
mkdir \$S; echo 1 >\$S/attr_allow_any_host
mkdir \$S/namespaces/1; echo /dev/$1 >\$S/namespaces/1/device_path; echo 1 >\$S/namespaces/1/enable
mkdir \$P; echo tcp >\$P/addr_trtype; echo ipv4 >\$P/addr_adrfam
echo ${NTB_NET_IP[lender]} >\$P/addr_traddr; echo $NVMF_PORT >\$P/addr_trsvcid
ln -s \$S \$P/subsystems/$NQN" >&2 || return
	# The namespace's disk: under its subsystem with native multipath (Debian's default), else under
	# its controller.
	rig_run $B --timeout 120 -- "set -e; modprobe nvme-tcp
nvme connect -t tcp -a ${NTB_NET_IP[lender]} -s $NVMF_PORT -n $NQN --hostnqn=\$(nvme gen-hostnqn)
for i in \$(seq 150); do
	for s in /sys/class/nvme-subsystem/* /sys/class/nvme/*; do
		[ \"\$(cat \$s/subsysnqn 2>/dev/null)\" = $NQN ] || continue
		n=\$(ls \$s | grep -m1 '^nvme[0-9]*n1\$') && { echo BENCH-NS \$n; exit 0; }
	done
	sleep 0.2
done
exit 1" | ns_line $B
}

line '%s' "L0 load (1/5/15 min) at the start: $(load)"
e2e_remote_up $B $U 1024
run_path farpass /dev/nvme0n1 $GUEST_MEM -device vfio-pci,sysfsdev=$MDEV
why=
if ! lender_ns=$(farpass_off); then
	why="farpass did not give the lender's NVMe back to its nvme driver (output above)"
elif ! bdev=$(nvmeof_up "$lender_ns"); then
	why="NVMe-oF did not come up (ntb_netdev, nvmet or nvme connect: their output is above)"
else
	echo "lender namespace /dev/$lender_ns exported; borrower1 sees it as /dev/$bdev"
	run_path nvmeof /dev/vda $GUEST_MEM -drive file="/dev/$bdev",if=none,id=nvmeof,format=raw,cache=none,aio=native \
		-device virtio-blk-pci,drive=nvmeof
fi

line '%s' ""
line '%s' "The lender's NVMe in a $GUEST_MEM L2 guest of borrower1, one rig, fio ${RUNTIME} s per job (guest clock):"
line '%s' "  farpass = the device passed through (mdev of borrower1's NTB)"
line '%s' "  NVMe-oF = nvmet-tcp on the lender, nvme-tcp on borrower1, over ntb_transport + ntb_netdev on the same NTB;"
line '%s' "            the namespace is the guest's virtio-blk disk (cache=none, aio=native)"
line '%-46s %12s %12s %16s' "" farpass NVMe-oF farpass/NVMe-oF
declare -A R
row() {
	local what=$1 key=$2 a b
	a=$3 b=$4
	R[$key]=$(ratio "$b" "$a")
	line '%-46s %12s %12s %16s' "$what" "$a" "$b" "${R[$key]}"
}
row "QD1 4 KiB randread latency p50 (us)" p50 "$(fig farpass:rand4k p50)" "$(fig nvmeof:rand4k p50)"
row "QD1 4 KiB randread latency p99 (us)" p99 "$(fig farpass:rand4k p99)" "$(fig nvmeof:rand4k p99)"
row "QD1 128 KiB seq read bandwidth (MB/s)" mbs "$(fig farpass:seq128k mbs)" "$(fig nvmeof:seq128k mbs)"
row "QD16 4 KiB randread IOPS" iops "$(fig farpass:iops4k iops)" "$(fig nvmeof:iops4k iops)"
for j in "${JOBS[@]}"; do
	row "lender CPU ms per 1000 I/Os ($j)" cpu-$j "$(cpu_per_kio farpass:$j)" "$(cpu_per_kio nvmeof:$j)"
done
cpu_lines "${PATHS[@]}"

series=()
for p in "${PATHS[@]}"; do series+=("${TITLE[$p]}=$(percentiles "$p:rand4k")"); done
plot_join percentile "${series[@]}" >"$RIGDIR/latency.dat"
plot percentiles "$RIGDIR/latency.dat" "QD1 4 KiB randread completion latency, $GUEST_MEM L2: farpass vs NVMe-oF/TCP on the same NTB" \
	"percentile (%)" "completion latency (ms, log scale)"
line '%s' "$PLOT_MSG"

line '%s' ""
line '%s' "Goals (issue 17), farpass/NVMe-oF:"
goal "latency <= 0.5x (p50, p99)" "r <= 0.5" "${R[p50]}" "${R[p99]}"
goal "bandwidth >= 1x (128 KiB seq)" "r >= 1" "${R[mbs]}"
goal "lender CPU per I/O < 10% (each job)" "r < 0.1" "${R[cpu-rand4k]}" "${R[cpu-seq128k]}" "${R[cpu-iops4k]}"
line '%s' ""
line '%s' "L0 load at the end: $(load)"
line '%s' "(nested TCG rig: absolute figures are the emulation's, not hardware figures; compare the ratios)"

printf '%s\n' "${results[@]}" | tee "$RIGDIR/figures.txt"
if [ -n "$why" ]; then
	echo "could not measure NVMe-oF: $why"
	exit 1
fi
bench_missing && plot_check
