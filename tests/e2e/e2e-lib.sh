# shellcheck shell=bash
# Helpers for the e2e suite, sourced by its tests (it sources the rig, NTB, kernel and agent libraries
# they use too): boot an L2 guest (the rig's small kernel and initramfs, with fio) under the stock QEMU in
# a borrower L1 with given devices and memory, run a script in it, and check on L0 what its fio wrote
# into a device's backing file.

E2E_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$E2E_LIB/../rig/rig.sh"
. "$E2E_LIB/../rig/ntb-lib.sh"
. "$E2E_LIB/../kernel/kernel-lib.sh"
. "$E2E_LIB/../agent/agent-lib.sh"
# rig_up's default, fixed here because the borrower's own NVMe image lives in it before rig_up runs.
RIGDIR=${RIGDIR:-$FARPASS_TOP/rig-out/$(basename "$0" .sh)}
mkdir -p "$RIGDIR"
RIGDIR=$(cd "$RIGDIR" && pwd)

# What the guest's fio writes: "BS:OFFSET:SIZE" regions of the namespace, one fio job each, and a region
# nobody writes (the checker must fail there). fio's --size is per job; randwrite with its random map
# writes every block of a region exactly once.
E2E_REGIONS=(4096:$((16 << 20)):$((2 << 20)) 131072:$((64 << 20)):$((16 << 20)))
E2E_UNWRITTEN=4096:$((32 << 20)):$((2 << 20))

# The fio in the L2 initramfs comes from `setup.sh l2`; an initramfs built by an older setup has none.
# The tests boot a copy in $RIGDIR: a set-up running meanwhile (another checkout) cannot swap it.
E2E_L2_INITRD=$RIGDIR/l2-initrd.gz
e2e_check_setup() {
	if [ ! -e "$FARPASS_L2_INITRD" ]; then
		echo "no L2 initramfs $FARPASS_L2_INITRD for this checkout's l2-init.sh: run vm-images/setup.sh l2" >&2
		return 1
	fi
	cp "$FARPASS_L2_INITRD" "$E2E_L2_INITRD"
	if ! gzip -dc "$E2E_L2_INITRD" | cpio -t --quiet 2>/dev/null | grep -qx bin/fio; then
		echo "no fio in $FARPASS_L2_INITRD: run vm-images/setup.sh l2" >&2
		return 1
	fi
}

# e2e_borrower_nvme SIZE: an emulated NVMe of borrower1's own at 0000:00:08.0 (the lender's slot), backed
# by a fresh sparse file on L0, $E2E_BORROWER_IMG; sets RIG_BORROWER1_EXTRA, so call it before rig_up.
E2E_BORROWER_IMG=$RIGDIR/borrower1-nvme.img
e2e_borrower_nvme() {
	rm -f "$E2E_BORROWER_IMG"
	truncate -s "$1" "$E2E_BORROWER_IMG"
	RIG_BORROWER1_EXTRA="-drive file=$E2E_BORROWER_IMG,if=none,id=lnvme,format=raw,cache=writeback"
	RIG_BORROWER1_EXTRA+=" -device nvme,drive=lnvme,serial=borrower-nvme,addr=0x8"
}

# The guest's block device that e2e_fio_jobs, e2e_fio_progress_job and e2e_fio_script use: may be guest
# shell text ('$d2') for a guest with several NVMe controllers, which its driver numbers in probe order.
E2E_NVME=${E2E_NVME:-nvme0n1}

# e2e_fio_jobs TAG [--verify-only [MARK] | --mark MARK]: guest script lines running, for each region of
# E2E_REGIONS, fio randwrite with verify (direct I/O, pattern 0xTAG%o: the tag and each block's offset) on
# /dev/$E2E_NVME ("MARK bs=BS rc=RC" and fio's summary, MARK E2E-FIO unless given). TAG may be guest shell
# text ('$t'). --verify-only writes nothing: fio reads each region back and checks it holds that pattern
# (MARK E2E-FIO-VERIFY unless given). A job that
# fails adds its MARK and BS to the guest's e2e_failed (e2e_fio_script's last line ends the script with
# a failure status then). With E2E_FIO_PFNS=1 each job's I/O buffer is a shared mapping of /tmp/fio-buf
# (fio --mem=mmap:FILE) whose page frames e2e_pfns samples while fio runs ("E2E-PFN bs=BS ..." line).
e2e_fio_jobs() {
	local tag=$1 only= mark=E2E-FIO r bs off size mem= run
	case ${2:-} in
	--verify-only)
		only=' --verify_only'
		mark=${3:-E2E-FIO-VERIFY}
		;;
	--mark) mark=$3 ;;
	esac
	[ "${E2E_FIO_PFNS:-}" != 1 ] || mem=' --mem=mmap:/tmp/fio-buf'
	for r in "${E2E_REGIONS[@]}"; do
		IFS=: read -r bs off size <<<"$r"
		run="fio --thread --name=w$bs --filename=/dev/$E2E_NVME --direct=1 --ioengine=psync \
--rw=randwrite --bs=$bs --offset=$off --size=$size --verify=pattern --verify_pattern=0x$tag%o \
--do_verify=1 --verify_fatal=1$only$mem >/tmp/fio-$E2E_NVME.out 2>&1"
		if [ -n "$mem" ]; then
			printf '%s\n' "$run &" "fio_pid=\$!; e2e_pfns \$fio_pid $bs; rc=0; wait \$fio_pid || rc=\$?"
		else
			printf '%s\n' "rc=0; $run || rc=\$?"
		fi
		printf '%s\n' "if [ \$rc = 0 ]; then grep -E 'err=|WRITE:|READ:' /tmp/fio-$E2E_NVME.out; else cat /tmp/fio-$E2E_NVME.out; fi" \
			"echo \"$mark bs=$bs rc=\$rc\"; [ \$rc = 0 ] || e2e_failed=\"\$e2e_failed $mark-bs$bs\""
	done
}

# Guest script text (busybox sh): e2e_pfns PID BS samples, once a second while process PID (fio) runs,
# the page frames of its mapping of /tmp/fio-buf from /proc/PID/pagemap (PFN: bits 0-54 of a present
# entry, bit 63), and prints "E2E-PFN bs=BS samples=N present=P below4g=L min=0xPFN max=0xPFN": P page
# frames seen present in N samples, L of them below 4 GiB (PFN < 0x100000).
E2E_GUEST_PFNS='e2e_pfns() {
	n=0 p=0 l=0 min= max=
	while kill -0 $1 2>/dev/null; do
		m=$(grep -m1 " /tmp/fio-buf" /proc/$1/maps 2>/dev/null) || { sleep 1; continue; }
		a=$((0x${m%%-*})); e=${m#*-}; e=$((0x${e%% *}))
		for h in $(dd if=/proc/$1/pagemap bs=8 skip=$((a / 4096)) count=$(((e - a) / 4096)) 2>/dev/null | od -An -v -tx8); do
			case $h in [89a-f]*) ;; *) continue ;; esac
			f=$((0x${h#??} & 0x7fffffffffffff))
			p=$((p + 1))
			[ $f -ge $((0x100000)) ] || l=$((l + 1))
			[ -n "$min" ] && [ $f -ge $min ] || min=$f
			[ -n "$max" ] && [ $f -le $max ] || max=$f
		done
		n=$((n + 1))
		sleep 1
	done
	echo "E2E-PFN bs=$2 samples=$n present=$p below4g=$l min=$(printf %#x ${min:-0}) max=$(printf %#x ${max:-0})"
}'

# e2e_fio_progress_job TAG REGION [NAME]: a guest script line running fio sequential write with verify over
# REGION ("BS:OFFSET:SIZE" on /dev/$E2E_NVME, pattern 0xTAG%o as e2e_fio_jobs), which prints once a second
# how much of it had completed ("E2E-DONE-KB N", or "E2E-DONE-KB-NAME N" for a script with several such
# jobs: fio's write kilobytes, terse field 47). With direct psync I/O at queue depth 1 in offset order, the
# first N KiB of the region were written and acknowledged by the device when the line was printed,
# whatever happens to the guest afterwards.
e2e_fio_progress_job() {
	local tag=$1 bs off size
	IFS=: read -r bs off size <<<"$2"
	echo "fio --thread --name=seq$bs --filename=/dev/$E2E_NVME --direct=1 --ioengine=psync --rw=write --bs=$bs \
--offset=$off --size=$size --verify=pattern --verify_pattern=0x$tag%o --do_verify=1 --verify_fatal=1 \
--status-interval=1 --output-format=terse | awk -F';' '{ print \"E2E-DONE-KB${3:+-$3} \" \$47; fflush() }'"
}

# e2e_done_kb LOG [NAME]: the KiB an e2e_fio_progress_job (named NAME) last said had completed in the guest
# console LOG (empty before its first report).
e2e_done_kb() { [ ! -e "$1" ] || sed -n "s/^E2E-DONE-KB${2:+-$2} \([0-9]*\).*/\1/p" "$1" | tail -n1; }

# e2e_wait_done_kb VM LOG KB [NAME]: wait (up to 900 s) until the progress job (named NAME) in VM's L2 with
# console LOG has completed KB KiB, or that L2 has ended.
e2e_wait_done_kb() {
	local kb
	for _ in $(seq 900); do
		kb=$(e2e_done_kb "$2" "${4:-}")
		if [ "${kb:-0}" -ge "$3" ] || [ -e "$(rig_vm_dir "$1")/$E2E_L2_NAME.rc" ]; then
			return 0
		fi
		sleep 1
	done
}

# e2e_fio_script TAG [--pause|--read-back]: the guest script (busybox sh) for e2e_l2_start. It prints the
# guest's RAM map, the sum of the interrupt counts of $E2E_NVME's controller ("E2E-IRQS before|after N")
# and the requests $E2E_NVME completed (its /sys/block stat reads + writes: "E2E-IOS before|after N")
# around the fio jobs of e2e_fio_jobs TAG, then the kernel's nvme messages ("E2E-NVME-LOG ...") and ends
# with status 0 only if every fio job of the script passed. With --pause it waits before and after the fio jobs
# (e2e_l2_wait fio / fio-done, then e2e_l2_continue), e.g. to read counters around them. With
# --read-back the same jobs only verify (fio --verify_only): every block a run with TAG wrote is read and
# checked, nothing is written.
e2e_fio_script() {
	local tag=$1 pause=${2:-}
	echo "e2e_dev=$E2E_NVME"
	cat <<-'EOF2'
		irqs() { awk -v q="${e2e_dev%n1}q" '$0 ~ q { for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i } END { print n + 0 }' /proc/interrupts; }
		ios() { awk '{ print $1 + $5 }' /sys/block/$e2e_dev/stat; }
		grep 'System RAM' /proc/iomem | sed 's/^/E2E-RAM /'
		echo "E2E-IRQS before $(irqs)"
		echo "E2E-IOS before $(ios)"
	EOF2
	[ "${E2E_FIO_PFNS:-}" != 1 ] || printf '%s\n' "$E2E_GUEST_PFNS"
	if [ "$pause" = --pause ]; then
		printf '%s\n' "$E2E_GUEST_PAUSE" 'e2e_pause fio'
	fi
	if [ "$pause" = --read-back ]; then
		e2e_fio_jobs "$tag" --verify-only E2E-FIO
	else
		e2e_fio_jobs "$tag"
	fi
	if [ "$pause" = --pause ]; then
		echo 'e2e_pause fio-done'
	fi
	cat <<-'EOF2'
		grep "${e2e_dev%n1}q" /proc/interrupts | sed 's/^/E2E-IRQ-LINE /'
		echo "E2E-IRQS after $(irqs)"
		echo "E2E-IOS after $(ios)"
		dmesg | grep -i nvme | sed 's/^/E2E-NVME-LOG /'
		[ -z "$e2e_failed" ] || { echo "E2E-FAILED$e2e_failed"; false; }
	EOF2
}

# e2e_l2_start VM MEM SCRIPT QEMU-ARGS...: boot an L2 guest with MEM of RAM and the given devices in VM
# (in the background), to run SCRIPT (text) and power off. A guest reboot ends QEMU (-no-reboot) unless
# E2E_L2_REBOOT=1: then the guest boots again and runs SCRIPT again. E2E_L2_APPEND adds to the guest
# kernel's command line. Its console goes to $E2E_L2_LOG (on L0, in
# VM's directory; QEMU's own messages to l2-qemu.log there), written by QEMU as it comes. Its second
# serial port is a FIFO pair in the L1 (/tmp/l2ctl.in/.out): a guest script that pauses
# (E2E_GUEST_PAUSE) reads it, e2e_l2_continue writes it. Its QMP socket is /tmp/l2qmp.sock (e2e_qmp).
# Several L2s at once in one VM: each with its own E2E_L2_NAME (default l2), which names those FIFOs,
# the socket, QEMU's messages (NAME-qemu.log) and its exit status (NAME.rc), and its E2E_L2_LOG, for
# e2e_l2_start and the functions below.
E2E_L2_TIMEOUT=${E2E_L2_TIMEOUT:-1200}
E2E_L2_NAME=l2
# How every L2 boots (here and lv_domain_xml). Under nested TCG its kernel spent 8 of its ~35 s start
# making the device nodes of 256 legacy BSD pty pairs, 1-5 s starting IPv6 and 0.3-4 s probing a PS/2
# keyboard and mouse (docs/rig.md): the command line skips those (tests use IPv4 only) and the timer
# interrupt check, and the machine has no PS/2 controller, SATA, SMBus, SMM or VMware port (none used).
E2E_L2_MACHINE=q35,i8042=off,sata=off,smbus=off,smm=off,vmport=off
E2E_L2_CMDLINE="console=ttyS0 quiet panic=-1 pty.legacy_count=0 ipv6.disable=1 no_timer_check"
# Guest script text: defines e2e_pause MARK (prints "E2E-WAIT MARK", waits for e2e_l2_continue). ttyS1
# is opened once here: input arriving while it is closed would be dropped.
E2E_GUEST_PAUSE='exec 3</dev/ttyS1; e2e_pause() { echo "E2E-WAIT $1"; read -r _ <&3; }'
e2e_l2_start() {
	local vm=$1 mem=$2 script=$3 dir run noreboot=(-no-reboot) n=$E2E_L2_NAME
	shift 3
	[ "${E2E_L2_REBOOT:-}" != 1 ] || noreboot=()
	dir=$(rig_vm_dir "$vm")
	E2E_L2_SEQ=$((${E2E_L2_SEQ:-0} + 1))
	E2E_L2_LOG=$dir/l2-$E2E_L2_SEQ.log
	run=$dir/l2-run-$E2E_L2_SEQ.sh
	printf '%s\n' "$script" >"$dir/l2-script-$E2E_L2_SEQ"
	{
		printf '%q ' timeout "$E2E_L2_TIMEOUT" qemu-system-x86_64 -M "$E2E_L2_MACHINE" -accel tcg -m "$mem" -nodefaults \
			-display none "${noreboot[@]}" -chardev "file,id=con,path=$E2E_L2_LOG" -serial chardev:con \
			-chardev pipe,id=ctl,path=/tmp/${n}ctl -serial chardev:ctl -qmp unix:/tmp/${n}qmp.sock,server=on,wait=off \
			-kernel "$FARPASS_L2_KERNEL" -initrd "$E2E_L2_INITRD" \
			-append "$E2E_L2_CMDLINE${E2E_L2_APPEND:+ $E2E_L2_APPEND}" \
			-fw_cfg "name=opt/farpass/script,file=$dir/l2-script-$E2E_L2_SEQ" "$@"
		echo "</dev/null >$dir/$n-qemu.log 2>&1"
		echo "echo \$? >$dir/$n.rc"
	} >"$run"
	rig_run "$vm" -- "rm -f /tmp/${n}ctl.in /tmp/${n}ctl.out $dir/$n.rc; mkfifo /tmp/${n}ctl.in /tmp/${n}ctl.out
setsid bash $run </dev/null >/dev/null 2>&1 &"
}

# e2e_l2_wait VM MARK SECONDS: wait until the L2 pauses at MARK (true) or has ended, stopped or panicked
# (false; a libvirt guest that panicked is only shut off, which leaves no l2.rc).
e2e_l2_wait() {
	local dir t0=$SECONDS
	dir=$(rig_vm_dir "$1")
	until grep -q "^E2E-WAIT $2" "$E2E_L2_LOG" 2>/dev/null; do
		# QEMU stops a guest whose VFIO device reported an error (vfio_err_notifier_handler).
		if [ -e "$dir/$E2E_L2_NAME.rc" ] || ((SECONDS - t0 > $3)) || grep -qs 'Unrecoverable error' "$dir/$E2E_L2_NAME-qemu.log" ||
			grep -qs 'Kernel panic' "$E2E_L2_LOG"; then
			echo "L2 did not reach E2E-WAIT $2" >&2
			grep -s -m1 -B2 'Kernel panic' "$E2E_L2_LOG" | sed 's/^/  L2 console: /' >&2
			return 1
		fi
		sleep 1
	done
}

e2e_l2_continue() { rig_run "$1" -- "echo go >/tmp/${E2E_L2_NAME}ctl.in"; }

# e2e_qmp VM COMMAND [ARGUMENTS-JSON] [--event NAME [--timeout S]]: a QMP command to the L2's QEMU in VM.
e2e_qmp() {
	local vm=$1 a
	shift
	a=$(printf '%q ' "$@")
	rig_run "$vm" --timeout 300 -- "python3 $E2E_LIB/qmp.py /tmp/${E2E_L2_NAME}qmp.sock $a"
}

# e2e_l2_finish VM: wait for the L2's QEMU to exit; prints the guest's console, returns QEMU's status
# (124: the L2 did not finish within E2E_L2_TIMEOUT seconds of its start). For benchmarks; tests use
# e2e_l2_end.
e2e_l2_finish() {
	local dir rc
	dir=$(rig_vm_dir "$1")
	until [ -s "$dir/$E2E_L2_NAME.rc" ]; do
		rig_vm_alive "$1" || { echo "$1 died" >&2; return 125; }
		sleep 1
	done
	tr -d '\r' <"$E2E_L2_LOG"
	cat "$dir/$E2E_L2_NAME-qemu.log"
	read -r rc <"$dir/$E2E_L2_NAME.rc"
	return "$rc"
}

# How long an L2 may take from the end of its script (L2-DONE) until its QEMU has exited.
E2E_L2_POWEROFF_TIMEOUT=${E2E_L2_POWEROFF_TIMEOUT:-60}

# e2e_l2_end VM: the L2's end, checked: the guest's init printed L2-DONE (its script returned) before
# its QEMU ended, and the QEMU then exited within E2E_L2_POWEROFF_TIMEOUT seconds (the power-off), with
# status 0 (124: E2E_L2_TIMEOUT ran out). E2E_OUT: the guest's console and QEMU's messages. On a failure
# it prints their tails.
e2e_l2_end() {
	local vm=$1 dir t0 rc=
	dir=$(rig_vm_dir "$vm")
	until grep -q '^L2-DONE' "$E2E_L2_LOG" 2>/dev/null || [ -s "$dir/$E2E_L2_NAME.rc" ]; do
		rig_vm_alive "$vm" || break
		sleep 1
	done
	t0=$SECONDS
	until [ -s "$dir/$E2E_L2_NAME.rc" ] || ((SECONDS - t0 > E2E_L2_POWEROFF_TIMEOUT)) || ! rig_vm_alive "$vm"; do
		sleep 1
	done
	[ ! -s "$dir/$E2E_L2_NAME.rc" ] || read -r rc <"$dir/$E2E_L2_NAME.rc"
	E2E_OUT=$(tr -d '\r' <"$E2E_L2_LOG"; cat "$dir/$E2E_L2_NAME-qemu.log")
	if ! grep -q '^L2-DONE' <<<"$E2E_OUT" || [ "$rc" != 0 ]; then
		printf -- '----- L2 console and QEMU messages (tail) -----\n%s\n' "$(tail -n 30 <<<"$E2E_OUT")"
	fi
	expect "L2's script returned (L2-DONE)" grep -q '^L2-DONE' <<<"$E2E_OUT"
	expect "L2 powered off: its QEMU exited within ${E2E_L2_POWEROFF_TIMEOUT} s of L2-DONE" test -n "$rc"
	expect_eq "L2 QEMU's exit status" "$rc" 0
}

# e2e_l2_end_with_snapshots VM S0 S1: the snapshots taken around a paused L2's phase kept in $RIGDIR
# (snapshot-0.txt, snapshot-1.txt), then that L2 continued to its end (e2e_l2_end: its output in E2E_OUT).
e2e_l2_end_with_snapshots() {
	printf '%s\n' "$2" >"$RIGDIR/snapshot-0.txt"
	printf '%s\n' "$3" >"$RIGDIR/snapshot-1.txt"
	e2e_l2_continue "$1"
	e2e_l2_end "$1"
}

# e2e_irqs OUT PHASE: the guest's NVMe interrupt count printed by e2e_fio_script.
e2e_irqs() { sed -n "s/^E2E-IRQS $2 //p" <<<"$1"; }

# e2e_ios OUT PHASE: the NVMe's requests completed, printed by e2e_fio_script.
e2e_ios() { sed -n "s/^E2E-IOS $2 //p" <<<"$1"; }

# e2e_expect_guest_fio OUT: the L2 ran the script: its nvme driver took the NVMe (e2e_expect_l2_nvme),
# the fio jobs passed (e2e_expect_fio_jobs), the script's status (what l2-init printed) is 0.
e2e_expect_guest_fio() {
	e2e_expect_l2_nvme "$1"
	e2e_expect_fio_jobs "$1"
	expect_eq "L2's script exited with status" "$(sed -n 's/^L2-SCRIPT-RC //p' <<<"$1")" 0
}

# e2e_expect_l2_nvme OUT: the L2 (its console OUT from the start) booted with the NVMe on its stock driver.
e2e_expect_l2_nvme() {
	expect "L2 booted" grep -q '^L2-BOOTED' <<<"$1"
	expect "L2's stock nvme driver bound the controller" grep -qE '0x1b36:0x0010 .*driver=nvme' <<<"$1"
}

# What the guest's nvme driver logs on a command timeout, an abort, a controller reset or failure
# (drivers/nvme/host: "... timeout, aborting", "... timeout, reset controller", "Abort status", "controller
# is down; will reset", "Removing after probe failure", "Device not ready; aborting reset" ...).
E2E_NVME_TROUBLE_RE='timeout|[Aa]bort|reset|Removing|[Ff]ail|not ready|[Dd]isabl'

# e2e_expect_fio_jobs OUT: OUT (the console of one e2e_fio_script) shows every fio job passed its own
# verify; the NVMe's queue interrupts (MSI-X) reached the guest: during the jobs, at least 90% as many as
# the requests the NVMe completed (psync, queue depth 1: one completion interrupt per request); the
# guest's kernel logged no nvme timeout, abort or controller reset.
e2e_expect_fio_jobs() {
	local out=$1 r bs irqs ios
	grep -E '^(L2-|E2E-)|err=|WRITE:|READ:|verify' <<<"$out" | sed 's/^/    L2> /'
	for r in "${E2E_REGIONS[@]}"; do
		bs=${r%%:*}
		expect_eq "guest fio (with its verify) bs=$bs" "$(sed -n "s/^E2E-FIO bs=$bs rc=//p" <<<"$out")" 0
	done
	irqs=$(($(e2e_irqs "$out" after) - $(e2e_irqs "$out" before)))
	ios=$(($(e2e_ios "$out" after) - $(e2e_ios "$out" before)))
	expect "guest: requests completed on the NVMe during fio: $ios" test "$ios" -gt 0
	expect "guest /proc/interrupts: NVMe interrupts during fio ($irqs) are at least 90% of those requests" \
		test $((irqs * 10)) -ge $((ios * 9))
	expect "the nvme queue interrupts are message-signalled (QEMU's NVMe has only MSI-X)" grep -qE '^E2E-IRQ-LINE .*MSI.*nvme[0-9]+q' <<<"$out"
	expect_eq "guest kernel log: no nvme timeout, abort or controller reset" \
		"$(grep '^E2E-NVME-LOG' <<<"$out" | grep -E "$E2E_NVME_TROUBLE_RE" || true)" ""
}

# e2e_expect_ram_above_4g OUT: the L2's RAM map (printed by e2e_fio_script) has System RAM above 4 GiB.
e2e_expect_ram_above_4g() {
	expect "guest RAM above 4 GiB: $(grep '^E2E-RAM ' <<<"$1" | cut -d' ' -f2 | tr '\n' ' ')" \
		grep -qE '^E2E-RAM +[1-9][0-9a-f]{8}-' <<<"$1"
}

# e2e_expect_buffers_above_4g OUT: for each fio job of a script made with E2E_FIO_PFNS=1, the page frames
# of its I/O buffer, sampled in the guest's pagemap while fio ran (so while the device DMAed to and from
# them: O_DIRECT), were seen present and all at or above 4 GiB.
e2e_expect_buffers_above_4g() {
	local r bs line
	for r in "${E2E_REGIONS[@]}"; do
		bs=${r%%:*}
		line=$(sed -n "s/^E2E-PFN bs=$bs //p" <<<"$1")
		expect "guest pagemap: fio bs=$bs's buffer pages were present while it ran ($line)" \
			grep -qE 'present=[1-9]' <<<"$line"
		expect_eq "... and none of them below 4 GiB" "$(sed -n 's/.*below4g=\([0-9]*\).*/\1/p' <<<"$line")" 0
	done
}

# e2e_canary IMAGE: on L0, a per-run canary pattern (tag E2E_CANARY) over all of IMAGE, the device's
# backing file, before the guest boots; e2e_expect_written then checks it where the guest wrote nothing.
e2e_canary() {
	E2E_CANARY=$(e2e_tag)
	expect "L0: canary $E2E_CANARY written over $(basename "$1")" \
		python3 "$E2E_LIB/check-pattern.py" --fill "$1" "$E2E_CANARY"
}

# e2e_region_blocks: how many blocks the regions of E2E_REGIONS hold together (what one run of
# e2e_fio_jobs writes).
e2e_region_blocks() {
	local r bs size n=0
	for r in "${E2E_REGIONS[@]}"; do
		IFS=: read -r bs _ size <<<"$r"
		n=$((n + size / bs))
	done
	echo $n
}

# Ranges ("OFFSET:SIZE") the guest writes besides E2E_REGIONS (a test's own marker blocks).
E2E_WRITTEN_EXTRA=()

# e2e_expect_written IMAGE TAG: on L0, every block of each region in IMAGE (the device's backing file)
# holds the pattern the guest's fio wrote there; the unwritten region and a wrong tag do not match;
# after e2e_canary, every block outside E2E_REGIONS and E2E_WRITTEN_EXTRA still holds the canary.
e2e_expect_written() {
	local img=$1 tag=$2 r bs off size skip=()
	for r in "${E2E_REGIONS[@]}"; do
		IFS=: read -r bs off size <<<"$r"
		expect "L0 backing file: bs=$bs region at $off holds the guest's pattern" \
			python3 "$E2E_LIB/check-pattern.py" "$img" "$off" "$size" "$bs" "$tag"
		skip+=(--except "$off:$size")
	done
	IFS=: read -r bs off size <<<"$E2E_UNWRITTEN"
	expect "... the checker fails on the unwritten region at $off" \
		not python3 "$E2E_LIB/check-pattern.py" "$img" "$off" "$size" "$bs" "$tag"
	IFS=: read -r bs off size <<<"${E2E_REGIONS[0]}"
	expect "... and on a written region with another tag" \
		not python3 "$E2E_LIB/check-pattern.py" "$img" "$off" "$size" "$bs" "$(e2e_other_tag "$tag")"
	if [ -n "${E2E_CANARY:-}" ]; then
		for r in "${E2E_WRITTEN_EXTRA[@]}"; do
			skip+=(--except "$r")
		done
		expect "L0 backing file: the canary $E2E_CANARY is intact everywhere the guest did not write" \
			python3 "$E2E_LIB/check-pattern.py" "$img" 0 "$(stat -c %s "$img")" 4096 "$E2E_CANARY" "${skip[@]}"
	fi
}

# e2e_http_up MIB: the NIC's far end on L0: a fresh random blob of MIB MiB served by l0-http.py from
# $E2E_HTTP_DIR on port $E2E_HTTP_PORT, stopped when the test exits (call it before rig_up: the rig's
# EXIT trap runs this one after its own).
e2e_http_up() {
	E2E_HTTP_DIR=$RIGDIR/l0-http
	rm -rf "$E2E_HTTP_DIR"
	mkdir -p "$E2E_HTTP_DIR"
	head -c $(($1 << 20)) /dev/urandom >"$E2E_HTTP_DIR/blob"
	python3 "$E2E_LIB/l0-http.py" "$E2E_HTTP_DIR" 2>"$E2E_HTTP_DIR/log" &
	E2E_HTTP_PID=$!
	trap 'kill $E2E_HTTP_PID 2>/dev/null || true' EXIT
	# Python can take seconds to start on a loaded machine.
	for _ in $(seq 300); do
		[ -s "$E2E_HTTP_DIR/port" ] || ! kill -0 $E2E_HTTP_PID 2>/dev/null && break
		sleep 0.2
	done
	expect "L0: the HTTP server listens" test -s "$E2E_HTTP_DIR/port"
	E2E_HTTP_PORT=$(cat "$E2E_HTTP_DIR/port")
	echo "L0 HTTP server on 127.0.0.1:$E2E_HTTP_PORT (pid $E2E_HTTP_PID)"
}

# e2e_nic_up_script: guest script lines that give eth0 slirp's usual guest address (the L2's small kernel
# has no AF_PACKET for a DHCP client) and wait for its link (E2E-ETH0, E2E-CARRIER).
e2e_nic_up_script() {
	cat <<'EOF'
ip addr add 10.0.2.15/24 dev eth0 && ip link set eth0 up && echo "E2E-ETH0 up"
# The link comes up once the emulated PHY's autonegotiation is done.
for i in $(seq 60); do [ "$(cat /sys/class/net/eth0/carrier 2>/dev/null)" = 1 ] && break; sleep 1; done
echo "E2E-CARRIER $(cat /sys/class/net/eth0/carrier 2>/dev/null)"
EOF
}

# e2e_nic_transfer_script TAG: guest script lines that download e2e_http_up's blob through eth0 and upload
# it back under TAG (E2E-GET, E2E-SHA256, E2E-POST); the guest's get and post are their statuses.
e2e_nic_transfer_script() {
	cat <<EOF
# (timeout, not wget -T: busybox 1.35 wget segfaults with -T)
timeout 120 wget -q -O /tmp/blob http://10.0.2.2:$E2E_HTTP_PORT/blob; get=\$?; echo "E2E-GET rc=\$get"
echo "E2E-SHA256 \$(sha256sum /tmp/blob | cut -d' ' -f1)"
# By hand through nc: busybox wget's --post-file stops at the first NUL byte.
{ printf 'POST /upload/$1 HTTP/1.0\r\nContent-Length: %s\r\n\r\n' \$(wc -c </tmp/blob); cat /tmp/blob; } |
	nc -w 60 10.0.2.2 $E2E_HTTP_PORT >/tmp/up.out; grep -q '^HTTP/1.0 200' /tmp/up.out; post=\$?; echo "E2E-POST rc=\$post"
EOF
}

# e2e_expect_nic_transfer OUT TAG LABEL: the guest's console OUT shows eth0 up with its link and the
# transfer of e2e_nic_transfer_script TAG done; on L0 the guest's sha256 of the download is the blob's and
# the server stored its upload under TAG with exactly the blob's bytes (the NIC's DMA both ways: transmit
# descriptors and buffers read from guest RAM, receive buffers written into it).
e2e_expect_nic_transfer() {
	local out=$1 tag=$2 l=$3
	expect "$l eth0 came up" grep -q '^E2E-ETH0 up' <<<"$out"
	expect "$l ... with its link (carrier)" grep -q '^E2E-CARRIER 1' <<<"$out"
	expect_eq "$l guest: the download succeeded" "$(sed -n 's/^E2E-GET rc=//p' <<<"$out")" 0
	expect_eq "$l guest: the upload succeeded" "$(sed -n 's/^E2E-POST rc=//p' <<<"$out")" 0
	expect_eq "$l L0: the guest's sha256 of the download is the blob's" \
		"$(sed -n 's/^E2E-SHA256 //p' <<<"$out")" "$(sha256sum "$E2E_HTTP_DIR/blob" | cut -d' ' -f1)"
	expect "$l L0: the server stored the upload tagged $tag" test -f "$E2E_HTTP_DIR/upload-$tag"
	expect "$l L0: the upload is the blob, byte for byte" cmp "$E2E_HTTP_DIR/blob" "$E2E_HTTP_DIR/upload-$tag"
}

not() { ! "$@"; }
# A per-run pattern tag (4 bytes, hex): data left by another run cannot pass.
e2e_tag() { od -An -N4 -tx1 /dev/urandom | tr -d ' \n'; }
e2e_other_tag() { printf '%08x' $((0x$1 ^ 1)); }

# Timeouts for L2 guests under nested TCG: an L2 boot on a loaded machine can take the lender more than
# the default 1.5 s to answer a forwarded config read (and the upcall's 2 s), which makes the device
# surprise-removed; the timeouts themselves are tested in tests/kernel. A BORROW's lender-side dma.map of
# a 1 GiB guest took 2-7 s with four rigs on the machine, once > 8 s; at a load of 27 the lender once
# expired a 10 s lease whose heartbeats came late. E2E_BORROWER_AGENT_CFG and E2E_LENDER_AGENT_CFG are
# the agents' config fragments, e2e_slow_upcalls VM sets farpass.ko's (before QEMU opens the mdev: no
# upcall comes earlier).
E2E_BORROWER_AGENT_CFG='"call_timeout_ms": 20000'
E2E_LENDER_AGENT_CFG='"lease_ms": 30000'
e2e_slow_upcalls() { rig_run "$1" -- "echo 25000 >/sys/module/farpass/parameters/upcall_timeout_ms"; }

# e2e_remote_mdev "VM..." UUID: the remote path up to a guest-ready mdev on each borrower VM (agent-lib.sh's
# ag_remote_mdev, as tests/kernel/test_remote_nvme.sh), with the timeouts above; E2E_DEVICE_ID is the
# device's announced id (on the first VM: the same on every borrower). Needs kernel-lib.sh and agent-lib.sh.
e2e_remote_mdev() {
	local vm
	ag_remote_mdev "$1" "$2" "$E2E_LENDER_AGENT_CFG" "$E2E_BORROWER_AGENT_CFG"
	for vm in $1; do
		e2e_slow_upcalls "$vm"
	done
	E2E_DEVICE_ID=$(ag_device_id "${1%% *}" "$AG_LENT")
}

# e2e_expect_window_full LAYOUT LABEL: a DMA_LAYOUT answer (fp_client dma-layout) whose pinned pages cover
# its slots: guest RAM that QEMU unmapped and mapped again since the borrow is in the window again. Only
# what SeaBIOS left read-only below 1 MiB (at most the 256 KiB PAM area, a hole to a write pin) may lack.
e2e_expect_window_full() {
	local pinned total=0 s
	pinned=$(sed -n 's/.*pinned=\([0-9]*\).*/\1/p' <<<"$1")
	for s in $(sed -n 's/.*slots=//p' <<<"$1" | tr , ' '); do
		total=$((total + ${s#*+}))
	done
	expect "$2 the DMA window's pinned pages cover the guest's RAM ($((${pinned:-0} * 4096)) of $total bytes)" \
		test "$total" -gt 0 -a $((total - ${pinned:-0} * 4096)) -le $((256 << 10))
}

# e2e_expect_borrows VM COUNT LABEL: VM's agent logged exactly COUNT borrows of the lender's ($AG_LENDER)
# device, each given back before the next ("borrowed lender/", "gave back lender/", ...), waited for up
# to 60 s (the last give-back follows the guest's power-off).
e2e_expect_borrows() {
	local vm=$1 n=$2 want= i l=$AG_LENDER
	for ((i = 0; i < n; i++)); do
		want+="borrowed $l/gave back $l/"
	done
	for _ in $(seq 60); do
		[ "$(ag_log "$vm" | grep -c "gave back $l/")" -lt "$n" ] || break
		sleep 1
	done
	expect_eq "$3" "$(ag_log "$vm" | grep -oE "borrowed $l/|gave back $l/" | tr -d '\n')" "$want"
}

# e2e_expect_reset_works VM: the L2's QEMU reset the mdev (at machine start) without complaint: the
# mdev's VFIO_DEVICE_RESET succeeds with no lease held.
e2e_expect_reset_works() {
	expect "$1: QEMU reset the device without 'no available reset mechanism'" \
		not grep -q 'Cannot reset device' "$(rig_vm_dir "$1")/$E2E_L2_NAME-qemu.log"
}

# e2e_counter COUNTERS NAME: one value from a copy of farpass's debugfs counters ("name value" lines).
e2e_counter() { awk -v n="$2" '$1 == n { print $2 }' <<<"$1"; }

# e2e_snapshot VM [--hold]: farpass's counters on each lender of the rig and on borrower VM, one "HOST NAME VALUE"
# line each. The lenders, VM, the lenders and VM again, until each host's two reads agree (at most 10
# tries: a device may raise an interrupt at any time, e.g. e1000's watchdog every 2 s): nothing was
# posted while VM was read, and nothing posted before was still on its way to VM (the lenders alone
# agreeing let one delivered after VM's read count on VM's side only in the next snapshot), so the
# hosts' counters describe the same interrupts. With --hold, every L2 QEMU running in VM is stopped over
# QMP for the reads and continued after: a guest that does not run neither unmasks an INTx nor submits
# I/O, so its device's interrupts stop once those in flight have arrived (seen without it, 2026-11-28:
# the e1000's watchdog interrupts kept both hosts' counters moving through all 10 tries, and the last
# one's reads saw 1129 posted for 1128 signalled). Not for a guest whose timing a test measures.
e2e_snapshot() {
	local vm=$1 l b l2 b2 i
	[ "${2:-}" != --hold ] || e2e_l2s_hold "$vm" stop || return
	for i in $(seq 10); do
		l=$(e2e_lender_counters) || return
		b=$(rig_run "$vm" -- "cat $FP_DBG/counters") || return
		l2=$(e2e_lender_counters) || return
		b2=$(rig_run "$vm" -- "cat $FP_DBG/counters") || return
		[ "$l" != "$l2" ] || [ "$b" != "$b2" ] || break
		echo "e2e_snapshot: the lenders' or $vm's counters changed while they were read (try $i)" >&2
	done
	[ "${2:-}" != --hold ] || e2e_l2s_hold "$vm" cont || return
	printf '%s\n' "$l2"
	sed "s/^/$vm /" <<<"$b2"
}

# e2e_l2s_hold VM stop|cont: stop every L2 QEMU of e2e_l2_start running in VM (QMP stop; the sockets that
# answer that they run), or continue those it stopped.
e2e_l2s_hold() {
	local held=/tmp/e2e-l2s-held
	if [ "$2" = stop ]; then
		rig_run "$1" -- "for s in /tmp/*qmp.sock; do
	python3 $E2E_LIB/qmp.py \$s query-status 2>/dev/null | grep -q '\"running\": true' || continue
	python3 $E2E_LIB/qmp.py \$s stop >/dev/null && echo \$s || exit
done >$held"
	else
		rig_run "$1" -- "for s in \$(cat $held); do python3 $E2E_LIB/qmp.py \$s cont >/dev/null || exit; done; rm $held"
	fi
}

# e2e_lender_counters: farpass's counters on each lender of the rig, "LENDER NAME VALUE" lines.
e2e_lender_counters() {
	local l c
	for l in "${RIG_LENDER_VMS[@]}"; do
		c=$(rig_run "$l" -- "cat $FP_DBG/counters") || return
		sed "s/^/$l /" <<<"$c"
	done
}

# e2e_resources VM: what the lenders and borrower VM hold, one "HOST NAME VALUE" line each: farpass's
# counters (e2e_snapshot) and the agents' state: each lender's leases and their DMA mappings (what its
# VFIO container maps in the devices' IOMMU domains: state.json), VM's leases (borrower.json).
e2e_resources() {
	local vm=$1 n l
	e2e_snapshot "$vm" || return
	for l in "${RIG_LENDER_VMS[@]}"; do
		n=$(rig_run "$l" -- "jq '[.devices[].lease | objects] | length' /var/lib/farpass/state.json") || return
		echo "$l agent_leases $n"
		n=$(rig_run "$l" -- "jq '[.devices[].lease | objects | .dma[]] | length' /var/lib/farpass/state.json") || return
		echo "$l agent_dma_mappings $n"
	done
	n=$(rig_run "$vm" -- "jq '[.. | objects | select(has(\"lease\")) | .lease | objects] | length' \
/var/lib/farpass/borrower.json") || return
	echo "$vm agent_leases $n"
}

# What a host holds, of e2e_resources: pages pinned and DMA windows (placed and quarantined) of the
# borrower, BAR mappings in the lender's BAR windows, interrupt hooks, upcalls waiting for an answer, mdev
# instances and their VFIO opens, agent files, links up, the agents' leases and the lender's DMA mappings.
E2E_RESOURCES='pinned_pages dma_windows dma_quarantined bar_maps irq_hooks upcalls_pending instances vfio_open
agent_files links_up agent_leases agent_dma_mappings'

# e2e_resources_changed S0 S1 [HOST:NAME...]: for each host of e2e_resources S1, each of E2E_RESOURCES
# whose value is not S0's, as "HOST NAME OLD -> NEW; " (nothing: all as in S0); a name read on one side
# only counts as changed; the HOST:NAME pairs given are left out.
e2e_resources_changed() {
	local s0=$1 s1=$2 host c v0 v1
	shift 2
	for host in $(e2e_hosts "$s1"); do
		for c in $E2E_RESOURCES; do
			[[ " $* " != *" $host:$c "* ]] || continue
			v0=$(e2e_snap "$host" "$s0" "$c")
			v1=$(e2e_snap "$host" "$s1" "$c")
			[ "$v0" = "$v1" ] || printf '%s %s %s -> %s; ' "$host" "$c" "${v0:-none}" "${v1:-none}"
		done
	done
}

# e2e_resources_show S: the E2E_RESOURCES of each host of e2e_resources S (those it has), a line per host.
e2e_resources_show() {
	local host c v line
	for host in $(e2e_hosts "$1"); do
		line=
		for c in $E2E_RESOURCES; do
			v=$(e2e_snap "$host" "$1" "$c")
			[ -z "$v" ] || line+=" $c=$v"
		done
		echo "$host:$line"
	done
}

# e2e_borrower_of S: the borrower of a snapshot (its one host that is not a lender).
e2e_borrower_of() { awk '$1 !~ /^lender/ { print $1; exit }' <<<"$1"; }

# e2e_hosts S: the hosts of a snapshot, in their first line's order.
e2e_hosts() { awk '!seen[$1]++ { print $1 }' <<<"$1"; }

# e2e_snap HOST SNAPSHOT NAME: one counter of one host from an e2e_snapshot.
e2e_snap() { awk -v h="$1" -v n="$3" '$1 == h && $2 == n { print $3 }' <<<"$2"; }

# e2e_snap_delta HOST S0 S1 NAME: how much counter NAME of HOST grew from snapshot S0 to S1.
e2e_snap_delta() { echo $(($(e2e_snap "$1" "$3" "$4") - $(e2e_snap "$1" "$2" "$4"))); }

# The counters that may change while a borrowed device does steady I/O, by host (every other counter
# of either host must not: no upcall, config-space access, control message, dma_unmap, refill, window,
# pin, BAR access trapped outside the MSI-X table/PBA, instance or link change, dropped interrupt ...):
# the lender posts the device's interrupts (irq_posted); the borrower takes its doorbell, delivers and
# signals them, and QEMU may access the trapped MSI-X table/PBA (bounded by E2E_MSIX_TRAPS_MAX).
E2E_IO_COUNTERS_LENDER='irq_posted'
E2E_IO_COUNTERS_BORROWER='doorbell_events irq_delivered irq_signalled bar_trapped_msix'
E2E_MSIX_TRAPS_MAX=${E2E_MSIX_TRAPS_MAX:-0}

# e2e_expect_no_software_in_path S0 S1 WHAT: between two e2e_snapshot (during WHAT), on both hosts, every
# counter outside its host's allow-list above kept its value (those that changed are printed); the
# borrower's trapped MSI-X table/PBA accesses are at most E2E_MSIX_TRAPS_MAX. Prints the allowed
# counters' growth. Checks "(d)".
e2e_expect_no_software_in_path() {
	local s0=$1 s1=$2 what=$3 host allowed c d changed n
	for host in $(awk '{ print $1 }' <<<"$s1" | uniq); do
		allowed=$E2E_IO_COUNTERS_BORROWER
		[[ $host != lender* ]] || allowed=$E2E_IO_COUNTERS_LENDER
		changed=
		n=0
		for c in $(awk -v h="$host" '$1 == h { print $2 }' <<<"$s0$(printf '\n')$s1" | sort -u); do
			n=$((n + 1))
			d=$(e2e_snap_delta "$host" "$s0" "$s1" "$c")
			if [[ " $allowed " == *" $c "* ]]; then
				echo "$host counter $c: +$d during $what"
			elif [ "$d" != 0 ]; then
				changed+="$c $(e2e_snap "$host" "$s0" "$c") -> $(e2e_snap "$host" "$s1" "$c"); "
			fi
		done
		expect "(d) $host: its farpass counters were read ($n)" test "$n" -ge 40
		expect_eq "(d) $host: counters outside the allow-list ($allowed) unchanged during $what" "$changed" ""
	done
	d=$(e2e_snap_delta "$(e2e_borrower_of "$s1")" "$s0" "$s1" bar_trapped_msix)
	expect "(d) trapped MSI-X table/PBA accesses during $what: $d <= $E2E_MSIX_TRAPS_MAX" test "$d" -le "$E2E_MSIX_TRAPS_MAX"
}

# e2e_expect_irq_relay S0 S1 WHAT: between two e2e_snapshot (during WHAT) the lenders posted interrupts,
# the borrower signalled exactly as many to its VFIO user (irq_signalled growth = the sum of irq_posted
# growth), and none was dropped (irq_dropped: no target) or lacked an eventfd (irq_no_eventfd).
e2e_expect_irq_relay() {
	local s0=$1 s1=$2 what=$3 b l posted=0 who
	b=$(e2e_borrower_of "$s1")
	for l in $(e2e_hosts "$s1" | grep '^lender'); do
		posted=$((posted + $(e2e_snap_delta "$l" "$s0" "$s1" irq_posted)))
		who+="${who:+ and }$l"
	done
	expect "the $who posted the device's interrupts during $what: irq_posted +$posted" test "$posted" -gt 0
	expect_eq "$b signalled each to the guest's QEMU: irq_signalled growth" \
		"$(e2e_snap_delta "$b" "$s0" "$s1" irq_signalled)" "$posted"
	expect_eq "$b: irq_dropped growth" "$(e2e_snap_delta "$b" "$s0" "$s1" irq_dropped)" 0
	expect_eq "$b: irq_no_eventfd growth" "$(e2e_snap_delta "$b" "$s0" "$s1" irq_no_eventfd)" 0
}

# e2e_remote_up "VM..." UUID MEM-MiB: the rig for guests of the lender's NVMe on each VM (borrower1, or
# borrower1 and borrower2): the DMA window (the NTB's MW2) of 4 GiB covers a guest of up to 3 GiB (2 GiB
# below 4 GiB, 1 GiB above), each VM has MEM-MiB for the guest's RAM pinned there; then e2e_remote_mdev.
e2e_remote_up() {
	local vms
	read -ra vms <<<"$1"
	export RIG_NTB_PROPS=${RIG_NTB_PROPS:-},mw2-size=4G
	rig_up --borrowers ${#vms[@]} --borrower-mem "$3"
	e2e_remote_mdev "$1" "$2"
}

# e2e_nic_transfer VM UUID TAG: the transfer of e2e_http_up's blob by an L2 guest of VM (512 MiB) whose
# only device is the mdev UUID, the lender's NIC ($AG_LENT): eth0 up, then e2e_nic_transfer_script TAG
# between two pauses, checked (e2e_expect_nic_transfer, labelled "(b)"); E2E_S0 and E2E_S1 are the counters of both hosts (e2e_snapshot) around it, E2E_IRQ_INDEX the
# VFIO IRQ index the lender's agent armed for the lease meanwhile, E2E_OUT the guest's output: the
# transfer's lines, "E2E-NET-IRQS before|after N" (eth0's interrupts in /proc/interrupts), "E2E-IRQ-LINE"
# (its lines there) and "E2E-MSI-IRQ N KIND" (the NIC's msi_irqs: msi or msix). Prints the times.
e2e_nic_transfer() {
	local vm=$1 uuid=$2 tag=$3 script t0 t1 t2
	script=$(
		cat <<EOF
$E2E_GUEST_PAUSE
irqs() { awk '/eth0/ { for (i = 2; i <= NF && \$i ~ /^[0-9]+\$/; i++) n += \$i } END { print n + 0 }' /proc/interrupts; }
$(e2e_nic_up_script)
nic=\$(basename \$(readlink /sys/class/net/eth0/device))
for f in /sys/bus/pci/devices/\$nic/msi_irqs/*; do [ -e \$f ] && echo "E2E-MSI-IRQ \${f##*/} \$(cat \$f)"; done
echo "E2E-NET-IRQS before \$(irqs)"
e2e_pause net
$(e2e_nic_transfer_script "$tag")
e2e_pause net-done
sed -n 's/^ *eth0:/E2E-NETDEV eth0:/p' /proc/net/dev
dmesg | grep -E 'e1000|eth0' | tail -n 8 | sed 's/^/E2E-DMESG /'
grep eth0 /proc/interrupts | sed 's/^/E2E-IRQ-LINE /'
echo "E2E-NET-IRQS after \$(irqs)"
[ \$get = 0 ] && [ \$post = 0 ]
EOF
	)
	t0=$SECONDS
	e2e_l2_start "$vm" 512M "$script" -device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$uuid
	expect "L2 booted and reached the transfer" e2e_l2_wait "$vm" net 900
	E2E_S0=$(e2e_snapshot "$vm" --hold)
	E2E_IRQ_INDEX=$(rig_run "$AG_LENDER" -- "jq -r --arg p $AG_LENT \
'.devices[] | select(.pci == \$p) | .lease.irqs.index' /var/lib/farpass/state.json" || true)
	t1=$SECONDS
	e2e_l2_continue "$vm"
	expect "L2 finished the transfer" e2e_l2_wait "$vm" net-done 1200
	t2=$SECONDS
	E2E_S1=$(e2e_snapshot "$vm" --hold)
	# The lender's side, for a failed transfer: the device's command and status registers (INTx disabled,
	# interrupt pending), its interrupt lines and the kernel's last words.
	rig_run "$AG_LENDER" -- "echo command=\$(setpci -s $AG_LENT COMMAND) status=\$(setpci -s $AG_LENT STATUS)
grep vfio /proc/interrupts; dmesg | tail -n 8" | sed 's/^/    lender> /' || true
	e2e_l2_end_with_snapshots "$vm" "$E2E_S0" "$E2E_S1"
	echo "L2 boot + transfer + power-off: $((SECONDS - t0)) s; the transfer: $((t2 - t1)) s"
	grep -E '^(L2-|E2E-)' <<<"$E2E_OUT" | sed 's/^/    L2> /'
	echo "L0 server log:"
	sed 's/^/    /' "$E2E_HTTP_DIR/log"
	expect "L2 booted" grep -q '^L2-BOOTED' <<<"$E2E_OUT"
	e2e_expect_nic_transfer "$E2E_OUT" "$tag" "(b)"
	expect_eq "L2's script exited with status" "$(sed -n 's/^L2-SCRIPT-RC //p' <<<"$E2E_OUT")" 0
}

# e2e_expect_nic_irqs LABEL: eth0's interrupts of an e2e_nic_transfer were counted during the transfer.
e2e_expect_nic_irqs() {
	local before after
	before=$(sed -n 's/^E2E-NET-IRQS before //p' <<<"$E2E_OUT")
	after=$(sed -n 's/^E2E-NET-IRQS after //p' <<<"$E2E_OUT")
	expect "$1 guest /proc/interrupts: eth0 interrupts counted during the transfer ($before -> $after)" \
		test "${after:-0}" -gt "${before:-0}"
}
