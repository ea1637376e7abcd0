#!/bin/bash
# The rig's in-VM command server: PID 1 of every L1 VM after vm-images/l1-init.sh switched to the root.
#
# Protocol (all files in $RIG_OUT/cmd, a 9p share that L0 sees as $RIGDIR/<vm>/cmd):
#   L0 writes  ID.sh                  (atomically: written as .ID.tmp, then renamed)
#   server     runs it once (remembers the ID), in its own process group:
#              ID.pid                 (process group to kill)
#              ID.out                 (stdout + stderr)
#              ID.rc                  (exit code and a newline, one write, last: L0 waits for it)
#   L0 writes  ID.kill                (timeout on L0: the server kills the command's process group)
#   L0         renames ID.sh to ID.cmd once done, so the server's directory scan stays short
# The server writes $RIG_OUT/ready once the VM is usable (l1-init.sh configured the network).
# Polling, not inotify: 9p shows no L0-side changes as events. 0.1 s costs little CPU even under TCG.
set -uo pipefail

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
: "${RIG_VM:?}" "${RIG_OUT:?}"
CMD=$RIG_OUT/cmd
POLL=0.1

log() { printf 'rig-server[%s]: %s\n' "$RIG_VM" "$*" >/dev/console; }

# The uptime in seconds, without an exec: each exec from L0's root over 9p costs an L1 a few tenths of a
# second under TCG, and the VM is not ready until this script says so.
uptime_now() {
	local up _
	read -r up _ </proc/uptime
	printf '%s' "$up"
}

# Run one command file in a forked subshell (no exec of a new bash: ~0.1 s saved per command under TCG).
# `set -m` in main makes that subshell the leader of its own process group, so a timeout kills the
# command and everything it started. The command sees plain bash defaults, not the server's options.
start_command() {
	local id=$1
	STARTED[$id]=1
	(
		set +u +o pipefail +m
		shopt -u nullglob
		cd / || exit
		(. "$CMD/$id.sh") >"$CMD/$id.out" 2>&1 </dev/null
		echo $? >"$CMD/$id.rc"
	) &
	echo $! >"$CMD/$id.pid"
}

kill_command() {
	local id=$1 pid
	pid=$(<"$CMD/$id.pid") || pid=
	if [ -n "$pid" ]; then
		kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$CMD/$id.kill"
}

main() {
	local f id
	declare -gA STARTED=()
	exec </dev/null >>"$RIG_OUT/server.log" 2>&1
	log "server started at uptime $(uptime_now)"
	set -m
	# A FIFO opened read-write never delivers EOF: `read -t` on it is a sleep without a fork.
	TICK=/run/rig-tick
	mkfifo "$TICK"
	# L0 made the directory before the boot (rig.sh _rig_launch).
	[ -d "$CMD" ] || mkdir -p "$CMD"
	export RIG_VM RIG_OUT
	local kernel
	read -r kernel </proc/sys/kernel/osrelease
	printf 'uptime=%s kernel=%s\n' "$(uptime_now)" "$kernel" >"$RIG_OUT/.ready"
	mv "$RIG_OUT/.ready" "$RIG_OUT/ready"
	log "ready at uptime $(uptime_now)"
	shopt -s nullglob
	while :; do
		for f in "$CMD"/*.sh; do
			id=${f##*/}
			id=${id%.sh}
			[ -n "${STARTED[$id]:-}" ] || start_command "$id"
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
