# A fresh Debian 12 machine for the unit suite: a minimal bookworm root made with mmdebstrap (cached in
# $FARPASS_CACHE: made once), and per test a copy-on-write overlay of it with /proc, the source tree
# read-only at /src and the host's resolv.conf. Sourced after vm-images/env.sh and tests/rig/ntb-lib.sh.
# fresh_root_mount DIR: mounts the overlay in DIR/merged (printed in FRESH_ROOT) and unmounts it at exit.

fresh_root_fail() { printf 'FAIL %s\n' "$*"; exit 1; }

fresh_root_mount() {
	local d=$1 root sources lock
	command -v mmdebstrap >/dev/null || fresh_root_fail "mmdebstrap is not installed (run: vm-images/setup.sh apt)"
	# Keyed by what makes it (suite, variant, sources: those of a Debian 12 installation).
	sources=("deb http://deb.debian.org/debian bookworm main"
		"deb http://deb.debian.org/debian bookworm-updates main"
		"deb http://deb.debian.org/debian-security bookworm-security main")
	root=$FARPASS_CACHE/fresh-root-$(printf '%s\n' bookworm minbase "${sources[@]}" | sha256sum | cut -c1-12)
	# One build at a time: a second test would remove the first one's $root.tmp under its mmdebstrap.
	exec {lock}>"$root.lock"
	flock "$lock"
	if [ ! -e "$root/.done" ]; then
		rm -rf "$root.tmp"
		echo "building the minimal root $root (once)"
		# Its whole output goes to a log, whose tail says why it failed.
		if ! mmdebstrap --variant=minbase bookworm "$root.tmp" "${sources[@]}" >"$root.log" 2>&1; then
			grep -vE '^(Get|Selecting|Preparing|Unpacking|Setting up|Processing)' "$root.log" | tail -n 40 | cut -c1-300
			fresh_root_fail "mmdebstrap of a minimal bookworm root failed (log above, whole in $root.log)"
		fi
		touch "$root.tmp/.done"
		mv "$root.tmp" "$root"
	fi
	exec {lock}>&-
	FRESH_ROOT=$d/merged
	mkdir -p "$d/upper" "$d/work" "$FRESH_ROOT"
	trap 'umount -R "$FRESH_ROOT" 2>/dev/null || true; rm -rf "'"$d"'"' EXIT
	mount -t overlay overlay -o "lowerdir=$root,upperdir=$d/upper,workdir=$d/work" "$FRESH_ROOT"
	mount -t proc proc "$FRESH_ROOT/proc"
	mkdir -p "$FRESH_ROOT/src"
	mount --bind -o ro "$FARPASS_TOP" "$FRESH_ROOT/src"
	cp /etc/resolv.conf "$FRESH_ROOT/etc/resolv.conf"
}

# fresh_root_run CMD...: CMD in the root, as root, with a clean environment.
fresh_root_run() {
	chroot "$FRESH_ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"
}
