#!/bin/bash
# The rig's in-VM command server: PID 1 of every L1 VM after vm-images/l1-init.sh switched to the root.
#
# Protocol (all files in $RIG_OUT/cmd, a 9p share that L0 sees as $RIGDIR/<vm>/cmd):
#   L0 writes  ID.sh                  (atomically: written as .ID.tmp, then renamed)
#   server     ID.sh -> ID.run        (claimed), runs it with bash in its own session
#              ID.pid                 (process group to kill)
#              ID.out                 (stdout + stderr)
#              ID.rc                  (exit code; written last, atomically: L0 waits for this file)
#   L0 writes  ID.kill                (timeout on L0: the server kills the command's process group)
# The server writes $RIG_OUT/ready once the VM is usable (network configured).
# Polling, not inotify: 9p shows no L0-side changes as events. 0.1 s costs little CPU even under TCG.
set -uo pipefail

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
: "${RIG_VM:?}" "${RIG_OUT:?}"
CMD=$RIG_OUT/cmd
POLL=0.1

log() { printf 'rig-server[%s]: %s\n' "$RIG_VM" "$*" >/dev/console; }

# Arguments from the kernel command line written by rig.sh (rig.ip=ADDR/LEN).
cmdline_arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^$1=//p" | tail -n1; }

setup_network() {
	local ip
	ip=$(cmdline_arg rig.ip)
	ip link set lo up
	[ -n "$ip" ] || return 0
	modprobe virtio_net 2>/dev/null || true
	# -nodefaults: the management NIC is the only one; wait for the driver to create it.
	local i
	for i in $(seq 50); do
		[ -e /sys/class/net/eth0 ] && break
		read -rt 0.1 <>"$TICK" || true
	done
	ip addr add "$ip" dev eth0 && ip link set eth0 up || log "network setup failed"
}

# Run one command file; the wrapper subshell waits for it and publishes the exit code.
start_command() {
	local id=$1
	mv "$CMD/$id.sh" "$CMD/$id.run" || return 0
	(
		cd / || exit
		setsid bash "$CMD/$id.run" >"$CMD/$id.out" 2>&1 </dev/null &
		pid=$!
		echo "$pid" >"$CMD/$id.pid"
		wait "$pid"
		echo $? >"$CMD/.$id.rc"
		mv "$CMD/.$id.rc" "$CMD/$id.rc"
	) &
}

kill_command() {
	local id=$1 pid
	pid=$(cat "$CMD/$id.pid" 2>/dev/null) || pid=
	if [ -n "$pid" ]; then
		kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$CMD/$id.kill"
}

main() {
	local f id
	exec </dev/null >>"$RIG_OUT/server.log" 2>&1
	# A FIFO opened read-write never delivers EOF: `read -t` on it is a sleep without a fork.
	TICK=/run/rig-tick
	mkfifo "$TICK"
	mkdir -p "$CMD"
	setup_network
	export RIG_VM RIG_OUT
	printf 'uptime=%s\n' "$(cut -d' ' -f1 /proc/uptime)" >"$RIG_OUT/.ready"
	mv "$RIG_OUT/.ready" "$RIG_OUT/ready"
	log "ready at uptime $(cut -d' ' -f1 /proc/uptime)"
	shopt -s nullglob
	while :; do
		for f in "$CMD"/*.sh; do
			id=${f##*/}
			start_command "${id%.sh}"
		done
		for f in "$CMD"/*.kill; do
			id=${f##*/}
			kill_command "${id%.kill}"
		done
		read -rt "$POLL" <>"$TICK" || true
	done
}

main
# PID 1 must never return (the kernel would panic); if the loop ends, power off cleanly.
exec /bin/busybox poweroff -f
