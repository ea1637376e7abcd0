#!/bin/bash
# Build the rig's L0 QEMU: Debian's QEMU 7.2 source package with Debian's patches, plus ours (series),
# x86_64-softmmu only and only the devices in rig-devices.mak. Installs one binary at $FARPASS_QEMU;
# the directory is keyed by the source version and a hash of our patches, so a rebuild happens only
# when either changes.
set -euo pipefail
. "$(dirname "$0")/../vm-images/env.sh"

if [ -x "$FARPASS_QEMU" ]; then
	step "patched QEMU up to date: $FARPASS_QEMU"
	exit 0
fi

src_cache=$FARPASS_CACHE/qemu-src
work=$FARPASS_QEMU_DIR.work
mkdir -p "$src_cache"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

# Run a step with its output in a log file, shown only if it fails.
logged() {
	local log=$1
	shift
	"$@" >"$log" 2>&1 || { tail -40 "$log" >&2; return 1; }
}

dsc=$src_cache/qemu_${QEMU_DEB_VERSION#*:}.dsc
if [ ! -f "$dsc" ]; then
	apt-cache showsrc qemu >/dev/null 2>&1 || {
		echo "build-qemu: no deb-src entry for Debian; run vm-images/setup.sh first" >&2
		exit 1
	}
	timed "download QEMU source $QEMU_DEB_VERSION" logged "$work/download.log" \
		bash -c "cd '$src_cache' && apt-get source -q --download-only qemu='$QEMU_DEB_VERSION'"
fi
# apt already authenticated the .dsc through the signed Sources index; dpkg-source's own gpgv check
# only complains that no Debian uploader keyring is installed.
timed "unpack QEMU source (Debian patches applied)" \
	logged "$work/unpack.log" dpkg-source -x "$dsc" "$work/src"

cd "$work/src"
while read -r patch; do
	[ -n "$patch" ] || continue
	step "apply $patch"
	patch -p1 --quiet --forward <"$FARPASS_TOP/qemu-patches/$patch"
done <"$FARPASS_TOP/qemu-patches/series"
cp "$FARPASS_TOP/qemu-patches/rig-devices.mak" configs/devices/x86_64-softmmu/farpass-rig.mak

mkdir build
cd build
timed "configure QEMU" logged "$work/configure.log" ../configure --target-list=x86_64-softmmu \
	--without-default-devices --with-devices-x86_64=farpass-rig \
	--meson=/usr/bin/meson --disable-docs --disable-werror --disable-tools \
	--disable-guest-agent --enable-virtfs --enable-slirp --disable-gtk --disable-sdl \
	--disable-vnc --disable-opengl --disable-spice --disable-curses --disable-xen

# ninja prints one line per step; show every 100th so a long build visibly moves.
build() {
	nice ninja -j"$(nproc)" qemu-system-x86_64 2>&1 | tee "$work/build.log" |
		awk '/^\[[0-9]+\/[0-9]+\]/ { split(substr($1, 2), n, "/"); if (n[1] % 100 == 0 || n[1] == n[2]) print "    " $1; fflush(); next } /error|FAILED/ { print; fflush() }'
	return "${PIPESTATUS[0]}"
}
timed "build QEMU (~4-8 min on 2 cores)" build || { tail -40 "$work/build.log" >&2; exit 1; }

mkdir -p "$FARPASS_QEMU_DIR.new/bin"
cp qemu-system-x86_64 "$FARPASS_QEMU_DIR.new/bin/"
rm -rf "$FARPASS_QEMU_DIR"
mv "$FARPASS_QEMU_DIR.new" "$FARPASS_QEMU_DIR"
step "patched QEMU installed: $FARPASS_QEMU"
