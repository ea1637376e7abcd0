#!/bin/sh
# /init of the rig's L1 VMs (busybox sh, packed into the L1 initramfs by vm-images/setup.sh).
#
# The L1 root is the L0 host's own root, shared read-only over virtio-9p (tag "host"), made writable by an
# overlay with a tmpfs upper layer (writes stay in L1 RAM), so L1 runs the very binaries, repo and cache
# paths of L0. The VM's result directory is shared read-write (tag "out") at the same path as on L0.
# Kernel command line (set by tests/rig/rig.sh):
#   rig.vm=NAME rig.out=DIR rig.server=SCRIPT rig.kmods=DIR rig.ip=ADDR/LEN
#   rig.l0binds=PATH,...   L0 paths (repo, cache) bind-mounted at the same paths, so scripts and modules
#                          are found wherever the repo is (even under /tmp, which L1 mounts afresh)
#   rig.root=rootfs        the root (tag "host") is not L0's own (e.g. the libvirt root): L0's root is
#                          shared as tag "l0" and mounted at /mnt/l0 for the binds
# Then the rig's command server (tests/rig/rig-server.sh) runs as PID 1 of the new root.
export PATH=/bin
/bin/busybox --install -s /bin

fail() {
	echo "rig-init: FAILED: $*"
	sleep 2
	poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "rig-init: start at uptime $(cut -d' ' -f1 /proc/uptime)"

# virtio + 9p + overlay are modules in Debian's kernel; the order satisfies their dependencies.
for m in $(cat /mods/order); do
	insmod "/mods/$m.ko" || echo "rig-init: insmod $m failed"
done

vm= out= server= kmods= ip= hostcache=mmap l0binds= rootmode=host
for a in $(cat /proc/cmdline); do
	case $a in
	rig.l0binds=*) l0binds=${a#*=} ;;
	rig.root=*) rootmode=${a#*=} ;;
	rig.ip=*) ip=${a#*=} ;;
	rig.hostcache=*) hostcache=${a#*=} ;;
	rig.vm=*) vm=${a#*=} ;;
	rig.out=*) out=${a#*=} ;;
	rig.server=*) server=${a#*=} ;;
	rig.kmods=*) kmods=${a#*=} ;;
	esac
done
[ -n "$vm" ] && [ -n "$out" ] && [ -n "$server" ] || fail "missing rig.vm/rig.out/rig.server on the command line"

# Management LAN: configured here with busybox (an exec of L0's modprobe/ip over 9p costs seconds).
ip link set lo up
if [ -n "$ip" ]; then
	ip addr add "$ip" dev eth0 && ip link set eth0 up || echo "rig-init: network setup failed"
fi

# The out share uses cache=none: L0's writes (command files) are seen at once. The host root caches
# mmap'ed pages (binaries, libraries) by default; rig.hostcache=none|mmap|loose overrides.
# msize: fewer round trips for big reads.
O=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o "$O,cache=$hostcache,ro" host /lower || fail "mount host root"
mount -t tmpfs -o mode=755 upper /upper || fail "mount tmpfs"
mkdir -p /upper/u /upper/w
mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w root /newroot || fail "mount overlay"
R=/newroot
# L1's own /run and /tmp first: they would hide L0's, and the repo may be a clone under /tmp (CI's).
mount -t tmpfs run "$R/run"
mount -t tmpfs tmp "$R/tmp"
# The repo and the cache at their L0 paths, from L0's root: the host root itself ("host", already at
# /lower) or, when the root is another tree, L0's root shared as "l0".
l0=/lower
if [ "$rootmode" = rootfs ]; then
	l0=$R/mnt/l0
	mkdir -p "$l0"
	mount -t 9p -o "$O,cache=$hostcache,ro" l0 "$l0" || fail "mount L0 root"
fi
for p in $(echo "$l0binds" | tr , ' '); do
	mkdir -p "$R$p"
	mount -o bind "$l0$p" "$R$p" || fail "bind $p"
done
mkdir -p "$R$out"
mount -t 9p -o "$O,cache=none" out "$R$out" || fail "mount out share at $out"

mount --move /proc "$R/proc"
mount --move /sys "$R/sys"
mount --move /dev "$R/dev"
mkdir -p "$R/dev/pts" "$R/dev/shm"
mount -t devpts devpts "$R/dev/pts"
mount -t tmpfs shm "$R/dev/shm"
mount -t debugfs debugfs "$R/sys/kernel/debug"
# devtmpfs lacks the links udev would make; tools (mdevctl via libvirt, bash here-strings) need them.
ln -sf /proc/self/fd "$R/dev/fd"
ln -sf /proc/self/fd/0 "$R/dev/stdin"
ln -sf /proc/self/fd/1 "$R/dev/stdout"
ln -sf /proc/self/fd/2 "$R/dev/stderr"
# L0's /lib/modules is for L0's kernel: show the extracted Debian image's modules (depmod'ed) instead.
if [ -n "$kmods" ]; then
	k=$(uname -r)
	mkdir -p "$R/lib/modules/$k"
	mount -o bind "$R$kmods" "$R/lib/modules/$k" || echo "rig-init: bind $kmods failed"
fi
echo "$vm" >"$R/proc/sys/kernel/hostname"

echo "rig-init: $vm root ready at uptime $(cut -d' ' -f1 "$R/proc/uptime")"
# switch_root (not chroot) so the new root is the namespace's real root (libvirt's namespaces need it).
export RIG_VM="$vm" RIG_OUT="$out" HOME=/root TERM=dumb
exec switch_root "$R" /bin/bash "$server"
