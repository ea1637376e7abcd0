#!/bin/bash
# Idempotent set-up of the farpass rig on a fresh Debian 12 machine.
#
#   [FARPASS_KERNEL=6.1|6.12] vm-images/setup.sh [step|group ...]        (default: all)
#
# Steps:  apt kernel modules l1initrd qemu l2 rootfs debbase debroot
# Groups: rig = apt kernel modules l1initrd qemu   (what check-rig needs; fast once cached)
#         all = rig l2 rootfs debbase               (adds the L2 guest kernel/initrd, the L1 libvirt root and
#                                                    its layer for the Debian packages; debroot, this
#                                                    checkout's packages installed, is made by the libvirt suite)
#
# Everything is cached under $FARPASS_CACHE, keyed by the Debian kernel version (kernel-$KDEB_VERSION/) or by
# a hash of the inputs (stamp files), so a second run only checks. Resolved versions and paths are written
# to $FARPASS_CACHE/rig.env, which vm-images/env.sh sources for every other script.
#
# FARPASS_KERNEL picks the L1 kernel series (vm-images/env.sh); apt, kernel, modules and l1initrd set up that
# one (its paths in rig-kernel-SERIES.env). qemu, l2 and rootfs are shared by both series: they always run
# as the shared series (FARPASS_KERNEL_SHARED: the L2 guest kernel is built from its source), which alone
# writes rig.env.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
VM_IMAGES=$FARPASS_TOP/vm-images

# Build/run dependencies (each checked against apt-cache). The linux-headers package of the chosen ABI is
# added by resolve_kernel. kmod/pciutils/iputils-ping/procps/nvme-cli (SR-IOV set-up) are also used inside
# L1 (it runs on our root); jq and libxml2-utils (xmllint) by the libvirt hook, which the unit suite runs
# here; gnuplot-nox draws `make bench`'s plots (SVG); ccache keeps the compiler outputs of
# `make build` and `make deb` (Makefile).
APT_PACKAGES=(
	flex bison bc libelf-dev libssl-dev cpio busybox-static dpkg-dev gcc g++ make file patch
	libglib2.0-dev libpixman-1-dev meson ninja-build libfdt-dev libattr1-dev libcap-ng-dev libslirp-dev
	pkg-config python3 qemu-system-x86 qemu-utils seabios ipxe-qemu qemu-system-data mmdebstrap
	nlohmann-json3-dev doctest-dev iproute2 iputils-ping xz-utils kmod pciutils procps nvme-cli
	debian-archive-keyring clang libclang-rt-14-dev openssl debhelper dh-dkms lintian jq libxml2-utils zstd
	gnuplot-nox ccache
)
SRC_LIST=/etc/apt/sources.list.d/farpass-src.sources
APT_UPDATED=0

die() { printf 'setup.sh: %s\n' "$*" >&2; exit 1; }

# What to do when a step fails, printed with the failing command.
declare -A STEP_HINT=(
	[apt]="apt-get could not update or install: check that deb.debian.org is reachable and that apt-get update works by hand"
	[kernel]="Debian's kernel image or source could not be downloaded or unpacked: run apt-get update, then this step again"
	[modules]="the NTB modules did not build: see logs/build-ntb-modules.log; the headers must be the kernel's version (setup.sh apt)"
	[l1initrd]="the L1 initramfs could not be made: the kernel step's image must be complete (delete its kernel-* directory to redo it)"
	[qemu]="the patched QEMU did not build: see the build-qemu log named above; a patch that no longer applies names its file"
	[l2]="the L2 guest kernel or fio did not build: see logs/build-l2-kernel.log or logs/build-fio.log"
	[rootfs]="mmdebstrap could not make the L1 libvirt root: see logs/mmdebstrap.log (it needs deb.debian.org)"
)
SETUP_STEP=

# Under set -e a failing command ends the script: say which one, where, and what to do (never a silent exit).
on_error() {
	local rc=$? line=$1
	((BASH_SUBSHELL == 0)) || return "$rc" # the subshell's failure is reported once, by its parent
	local i where="line $line"
	for ((i = 1; i < ${#FUNCNAME[@]} - 1; i++)); do
		where+=" in ${FUNCNAME[i]}, called from line ${BASH_LINENO[i]}"
	done
	printf 'setup.sh: step %s: "%s" failed (status %d) at %s.\n' "${SETUP_STEP:-none}" "$BASH_COMMAND" "$rc" "$where" >&2
	printf 'setup.sh: %s. Logs: %s/logs. Run it again once fixed: finished steps are kept.\n' \
		"${STEP_HINT[${SETUP_STEP:-none}]:-see the output above}" "$FARPASS_CACHE" >&2
}
set -E
trap 'on_error $LINENO' ERR

# Run a long command with its output in a log, printing a progress line every 20 s and the log's tail
# on failure (a 5-minute kernel build must not look hung, nor flood the terminal).
with_progress() {
	local log=$1 t0=$SECONDS pid rc=0
	shift
	mkdir -p "$(dirname "$log")"
	"$@" >"$log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 2
		if (((SECONDS - t0) % 20 < 2)) && ((SECONDS - t0 >= 20)); then
			printf '    ... %ds: %s\n' $((SECONDS - t0)) "$(tail -n1 "$log" | cut -c1-100)" >&2
		fi
	done
	wait "$pid" || rc=$?
	if ((rc != 0)); then
		tail -n 30 "$log" >&2
		printf '    failed (rc=%d), full log: %s\n' "$rc" "$log" >&2
	fi
	return "$rc"
}

# Stamp files make content-keyed steps idempotent: <out>.stamp holds the hash of the step's inputs.
inputs_hash() { cat "$@" | sha256sum | cut -c1-16; }
is_current() { [ -e "$1" ] && [ "$(cat "$1.stamp" 2>/dev/null)" = "$2" ]; }
mark_current() { printf '%s\n' "$2" >"$1.stamp"; }

# ---------------------------------------------------------------------------------------------- apt

# deb-src entries (deb822); Signed-By is mandatory or apt refuses the entries. Returns 0 if changed.
write_src_list() {
	local want
	want=$(cat <<-'EOF'
		Types: deb-src
		URIs: http://deb.debian.org/debian
		Suites: bookworm bookworm-updates
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

		Types: deb-src
		URIs: http://deb.debian.org/debian-security
		Suites: bookworm-security
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
	EOF
	)
	if [ "$(cat "$SRC_LIST" 2>/dev/null)" = "$want" ]; then
		return 1
	fi
	printf '%s\n' "$want" >"$SRC_LIST"
}

apt_update() {
	if ((APT_UPDATED)); then
		return 0
	fi
	timed apt-update with_progress "$FARPASS_CACHE/logs/apt-update.log" apt-get update
	APT_UPDATED=1
}

has_candidate() { [ -n "$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ && $2 != "(none)" {print $2}')" ]; }

# The L1 kernel is whatever the series' meta-package depends on today (e.g. linux-image-amd64:
# linux-image-6.1.0-56-amd64, version 6.1.192-2); headers, image and source must all be that exact version.
resolve_kernel() {
	local img meta=${FARPASS_KERNEL_META[$FARPASS_KERNEL]}
	img=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	[ -n "$img" ] || return 1
	KVER=${img#linux-image-}
	KDEB_VERSION=$(apt-cache policy "$img" | awk '/Candidate:/ {print $2}')
	[ -n "$KDEB_VERSION" ] && [ "$KDEB_VERSION" != "(none)" ]
}

# The newest QEMU 7.2 source package apt offers (needs the deb-src entry); our series applies to 7.2.
resolve_qemu_source() {
	local v
	v=$(apt-cache showsrc qemu 2>/dev/null | awk '/^Version: 1:7\.2[+.~]/ {print $2}' | sort -V | tail -1)
	[ -n "$v" ] || return 1
	QEMU_DEB_VERSION=$v
	qemu_paths
}

apt_install() {
	timed "apt-install $*" with_progress "$FARPASS_CACHE/logs/apt-install.log" \
		env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

step_apt() {
	local p missing=() unknown=()
	if write_src_list; then
		step "apt: wrote $SRC_LIST"
		APT_UPDATED=0
		apt_update
	fi
	# Fresh machine: empty lists. Otherwise trust the lists we have (apt-get update only when needed).
	if ! resolve_kernel || ! has_candidate "${APT_PACKAGES[0]}"; then
		apt_update
		resolve_kernel || die "cannot resolve ${FARPASS_KERNEL_META[$FARPASS_KERNEL]} from apt"
	fi
	# One dpkg-query for all packages (a no-op set-up should take seconds). Without package names it lists
	# every package dpkg knows and exits 0; with names it exits 1 as soon as one was never installed.
	local installed
	installed=$(dpkg-query -W -f='${Status} ${Package}\n' | awk '/^install ok installed / {print $4}')
	for p in "${APT_PACKAGES[@]}" "linux-headers-$KVER"; do
		if grep -qxF "$p" <<<"$installed"; then
			continue
		fi
		has_candidate "$p" || unknown+=("$p")
		missing+=("$p")
	done
	if ((${#unknown[@]})); then
		apt_update
		for p in "${unknown[@]}"; do
			has_candidate "$p" || die "package $p not available from apt"
		done
	fi
	if ((${#missing[@]})) && ! apt_install "${missing[@]}"; then
		# Lists older than the mirror (a 404 on a superseded version): update once and retry.
		APT_UPDATED=0
		apt_update
		apt_install "${missing[@]}"
	fi
	# The headers must be the same Debian version as the image we boot (modules are built against them).
	local hv
	hv=$(dpkg-query -W -f='${Version}' "linux-headers-$KVER" 2>/dev/null) || hv=
	[ -n "$hv" ] || die "linux-headers-$KVER is not installed after apt-get install (see $FARPASS_CACHE/logs/apt-install.log)"
	[ "$hv" = "$KDEB_VERSION" ] || die "linux-headers-$KVER is $hv, linux-image is $KDEB_VERSION (run apt-get upgrade)"
}

# ------------------------------------------------------------------------------------------- kernel

# Paths derived from the resolved versions; written to rig.env for every other script.
kernel_paths() {
	FARPASS_KDIR=$FARPASS_CACHE/kernel-$KDEB_VERSION
	FARPASS_KIMG=$FARPASS_KDIR/image
	FARPASS_KMODS=$FARPASS_KIMG/lib/modules/$KVER
	FARPASS_VMLINUZ=$FARPASS_KIMG/boot/vmlinuz-$KVER
	FARPASS_VMLINUX=$FARPASS_KDIR/vmlinux-$KVER
	FARPASS_KHEADERS=/usr/src/linux-headers-$KVER
	FARPASS_KSRC=$FARPASS_KDIR/src/linux-source-$FARPASS_KERNEL
	FARPASS_KSRC_FULL=$FARPASS_KDIR/src-full/linux-source-$FARPASS_KERNEL
	FARPASS_KBUILD=$FARPASS_KDIR/build
	FARPASS_KO_DIR=$FARPASS_KDIR/ko
	FARPASS_NTB_SYMVERS=$FARPASS_KBUILD/ntb/Module.symvers
	FARPASS_L1_INITRD=$FARPASS_KDIR/l1-initrd.gz
	FARPASS_L2_KERNEL=$(l2_kernel_path)
	FARPASS_L2_FIO=$FARPASS_KDIR/l2/fio
	FARPASS_ROOTFS=$FARPASS_CACHE/rootfs-bookworm-$(rootfs_hash)
}

# write_env_file FILE VAR...: FILE assigns each VAR its current value (replaced whole, never half-written).
write_env_file() {
	local v f=$1 tmp=$1.tmp
	shift
	{
		echo "# Written by vm-images/setup.sh on $(date -u +%FT%TZ); sourced by vm-images/env.sh."
		for v in "$@"; do
			printf '%s=%q\n' "$v" "${!v:-}"
		done
	} >"$tmp"
	mv "$tmp" "$f"
}

# The series' own file always; rig.env (the shared series' paths and the shared artefacts) only as the shared series.
write_rig_env() {
	write_env_file "$(rig_kernel_env "$FARPASS_KERNEL")" "${FARPASS_KERNEL_VARS[@]}"
	if [ "$FARPASS_KERNEL" = "$FARPASS_KERNEL_SHARED" ]; then
		# rig.env's L2 kernel is for checkouts older than env.sh's key: the unkeyed file they build and keyed
		# checkouts never write, so that a keyed set-up never changes the kernel they boot.
		local FARPASS_L2_KERNEL=$FARPASS_KDIR/l2/vmlinux
		write_env_file "$FARPASS_RIG_ENV" "${FARPASS_KERNEL_VARS[@]}" FARPASS_L2_KERNEL FARPASS_L2_INITRD \
			FARPASS_ROOTFS QEMU_DEB_VERSION
	fi
}

# apt-get download of an exact version into the cache (reusing a copy in apt's own cache if any).
# A 404 means our package lists are older than the mirror: update once and retry.
download_deb() {
	local pkg=$1 ver=$2 dir=$3 f
	f=$(ls "$dir/${pkg}_${ver#*:}_"*.deb 2>/dev/null | head -1 || true)
	if [ -n "$f" ]; then
		return 0
	fi
	mkdir -p "$dir"
	f=$(ls /var/cache/apt/archives/"${pkg}_${ver#*:}_"*.deb 2>/dev/null | head -1 || true)
	if [ -n "$f" ]; then
		cp "$f" "$dir/"
		return 0
	fi
	if ! (cd "$dir" && timed "download $pkg=$ver" with_progress "$FARPASS_CACHE/logs/download-$pkg.log" \
		apt-get download -q "$pkg=$ver"); then
		APT_UPDATED=0
		apt_update
		(cd "$dir" && timed "download $pkg=$ver" with_progress "$FARPASS_CACHE/logs/download-$pkg.log" \
			apt-get download -q "$pkg=$ver")
	fi
}

# Debian's bzImage is a compressed payload behind a stub (XZ in 6.1, zstd in 6.12); the uncompressed ELF has
# a PVH note, which QEMU's -kernel boots directly (no decompression under TCG: saves 2-5 s per L1 boot).
magic_offset() { { LC_ALL=C grep -abo -F "$1" "$2" || true; } | head -1 | cut -d: -f1; }
extract_vmlinux() {
	local in=$1 out=$2 off unpack=(xz -dc --single-stream)
	off=$(magic_offset $'\xfd7zXZ' "$in")
	if [ -z "$off" ]; then
		off=$(magic_offset $'\x28\xb5\x2f\xfd' "$in")
		unpack=(zstd -dcq)
	fi
	[ -n "$off" ] || die "no XZ or zstd payload in $in"
	# The payload is followed by the rest of the stub: the decompressor stops at its end and complains.
	tail -c +$((off + 1)) "$in" | "${unpack[@]}" >"$out.tmp" 2>/dev/null || true
	[ "$(head -c4 "$out.tmp" | od -An -c | tr -d ' ')" = '177ELF' ] || die "extracted vmlinux is not ELF"
	mv "$out.tmp" "$out"
}

step_kernel() {
	resolve_kernel || die "cannot resolve the kernel (run: setup.sh apt)"
	kernel_paths
	local debs=$FARPASS_KDIR/debs
	mkdir -p "$FARPASS_KDIR"
	download_deb "linux-image-$KVER" "$KDEB_VERSION" "$debs"
	download_deb "linux-source-$FARPASS_KERNEL" "$KDEB_VERSION" "$debs"

	if [ ! -e "$FARPASS_KIMG/.done" ]; then
		rm -rf "$FARPASS_KIMG"
		timed extract-linux-image dpkg-deb -x "$debs/linux-image-${KVER}_${KDEB_VERSION}_amd64.deb" "$FARPASS_KIMG"
		# The package ships no modules.dep (postinst runs depmod): make modprobe work inside L1.
		depmod -b "$FARPASS_KIMG" "$KVER"
		touch "$FARPASS_KIMG/.done"
	fi
	if [ ! -e "$FARPASS_VMLINUX" ]; then
		timed extract-vmlinux extract_vmlinux "$FARPASS_VMLINUZ" "$FARPASS_VMLINUX"
	fi
	# Only the sources the out-of-tree NTB modules need (the full tree is unpacked by the l2 step).
	if [ ! -e "$FARPASS_KDIR/src/.done" ]; then
		rm -rf "$FARPASS_KDIR/src"
		mkdir -p "$FARPASS_KDIR/src"
		timed extract-ntb-sources extract_source "$FARPASS_KDIR/src" \
			"linux-source-$FARPASS_KERNEL/drivers/ntb/*" "linux-source-$FARPASS_KERNEL/drivers/net/ntb_netdev.c"
		touch "$FARPASS_KDIR/src/.done"
	fi
	write_rig_env
	# Debian builds no NTB support at all; if that changes, the rig should use Debian's modules.
	if grep -q '^CONFIG_NTB=[my]' "$FARPASS_KHEADERS/.config"; then
		step "NOTE: Debian's $KVER now has CONFIG_NTB; consider using its modules"
	fi
}

# linux-source-SERIES_*.deb holds usr/src/linux-source-SERIES.tar.xz; stream it out without unpacking the deb.
extract_source() {
	local dest=$1 src=linux-source-$FARPASS_KERNEL
	shift
	dpkg-deb --fsys-tarfile "$FARPASS_KDIR/debs/${src}_${KDEB_VERSION}_all.deb" |
		tar -xO "./usr/src/$src.tar.xz" | tar -C "$dest" -xJ --wildcards "$@"
}

need_kernel() {
	if [ -z "${KDEB_VERSION:-}" ] || [ ! -e "$FARPASS_KIMG/.done" ]; then
		step_kernel
	fi
	kernel_paths
}

# ------------------------------------------------------------------------------------------ modules

# Copy a file only when its content changed, so `make` stays incremental across set-up runs.
sync_file() { cmp -s "$1" "$2" 2>/dev/null || cp "$1" "$2"; }

write_kbuild_makefile() {
	# The Makefile lets a developer rebuild by hand: make -C <dir>.
	printf 'KDIR ?= %s\nall:\n\t$(MAKE) -C $(KDIR) M=$(CURDIR) %s modules\n' "$FARPASS_KHEADERS" "$2" >"$1/Makefile.new"
	sync_file "$1/Makefile.new" "$1/Makefile"
	rm -f "$1/Makefile.new"
}

# make in a module dir unless its inputs (sources, Kbuild, headers version, extra files) are unchanged:
# even a no-op kbuild run costs seconds.
build_if_changed() {
	local dir=$1 name=$2 hash log=$FARPASS_CACHE/logs/$2.log
	shift 2
	hash=$( (echo "$KDEB_VERSION" && cat "$dir"/*.[ch] "$dir"/Kbuild "$dir"/Makefile "$@") | sha256sum | cut -c1-16)
	if is_current "$dir/.built" "$hash" && ls "$dir"/*.ko >/dev/null 2>&1; then
		return 0
	fi
	timed "$name" with_progress "$log" nice make -C "$dir" -j"$(nproc)"
	grep -iE 'warning|error' "$log" >&2 || true
	touch "$dir/.built"
	mark_current "$dir/.built" "$hash"
}

step_modules() {
	need_kernel
	local s=$FARPASS_KSRC/drivers b=$FARPASS_KBUILD/ntb f=$FARPASS_KBUILD/ntb-fidelity x
	mkdir -p "$b" "$f" "$FARPASS_KO_DIR"
	# NTB core, the EPF hardware driver our emulated NTB presents, the upstream test clients, transport and
	# netdev. No CONFIG_NTB_MSI anywhere: every module sharing ntb.ko's symbols must agree on it.
	for x in core.c ntb_transport.c hw/epf/ntb_hw_epf.c test/ntb_tool.c test/ntb_perf.c test/ntb_pingpong.c; do
		sync_file "$s/ntb/$x" "$b/$(basename "$x")"
	done
	sync_file "$s/net/ntb_netdev.c" "$b/ntb_netdev.c"
	printf '%s\n' '# Generated by vm-images/setup.sh (Debian builds CONFIG_NTB=n; no CONFIG_NTB_MSI)' \
		'obj-m := ntb.o ntb_hw_epf.o ntb_transport.o ntb_netdev.o ntb_tool.o ntb_perf.o ntb_pingpong.o' \
		'ntb-y := core.o' >"$b/Kbuild.new"
	sync_file "$b/Kbuild.new" "$b/Kbuild"
	rm -f "$b/Kbuild.new"
	write_kbuild_makefile "$b" ""
	build_if_changed "$b" build-ntb-modules

	# The rig's own test client lives in the repo; build it in the cache (keeps the clone clean).
	for x in "$FARPASS_TOP"/tests/rig/ntb-fidelity/*; do
		sync_file "$x" "$f/$(basename "$x")"
	done
	write_kbuild_makefile "$f" "KBUILD_EXTRA_SYMBOLS=$FARPASS_NTB_SYMVERS"
	build_if_changed "$f" build-ntb-fidelity "$FARPASS_NTB_SYMVERS"

	# One flat directory of .ko files: what rig_modules_dir returns (same path inside L1).
	for x in "$b"/*.ko "$f"/*.ko; do
		sync_file "$x" "$FARPASS_KO_DIR/$(basename "$x")"
	done
	write_rig_env
	step "modules: $(cd "$FARPASS_KO_DIR" && echo *.ko)"
}

# ----------------------------------------------------------------------------------------- l1initrd

# Debian modules the L1 initramfs needs to mount the host root over virtio-9p; their dependencies (which
# differ between kernels: 6.12 has no fscache.ko) come from the image's modules.dep.
L1_INITRD_MODULES=(virtio_pci 9pnet_virtio 9p overlay virtio_net)

# The .ko files (their paths in the image), each once, dependencies first.
l1_initrd_modules() {
	local deps
	deps=$(modprobe -d "$FARPASS_KIMG" -S "$KVER" --show-depends -a "${L1_INITRD_MODULES[@]}") ||
		die "modprobe cannot resolve the L1 initramfs modules in $FARPASS_KMODS"
	awk '$1 == "insmod" && !seen[$2]++ {print $2}' <<<"$deps"
}

step_l1initrd() {
	need_kernel
	local init=$VM_IMAGES/l1-init.sh hash d m mods
	mods=$(l1_initrd_modules)
	hash=$( (printf '%s\n' "$KVER" "$mods" && cat "$init" /bin/busybox "$VM_IMAGES/setup.sh") | sha256sum | cut -c1-16)
	if is_current "$FARPASS_L1_INITRD" "$hash"; then
		step "l1initrd: up to date ($FARPASS_L1_INITRD)"
		write_rig_env
		return 0
	fi
	d=$(mktemp -d "$FARPASS_KDIR/l1-initrd.XXXXXX")
	mkdir -p "$d"/{bin,dev,proc,sys,mods,newroot,lower,upper}
	cp /bin/busybox "$d/bin/busybox"
	ln -s busybox "$d/bin/sh"
	# 6.12's modules are xz-compressed; busybox's insmod takes plain ones.
	for m in $mods; do
		m=${m%.xz}
		if [ -e "$m.xz" ]; then xz -dc "$m.xz" >"$d/mods/$(basename "$m")"; else cp "$m" "$d/mods/"; fi
		basename "$m" .ko >>"$d/mods/order"
	done
	cp "$init" "$d/init"
	chmod 755 "$d/init"
	(cd "$d" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) >"$FARPASS_L1_INITRD.tmp"
	mv "$FARPASS_L1_INITRD.tmp" "$FARPASS_L1_INITRD"
	rm -rf "$d"
	mark_current "$FARPASS_L1_INITRD" "$hash"
	write_rig_env
	step "l1initrd: $(du -h "$FARPASS_L1_INITRD" | cut -f1) $FARPASS_L1_INITRD"
}

# --------------------------------------------------------------------------------------------- qemu

# The patched QEMU is built (and cached by its patch hash) by qemu-patches/build-qemu.sh.
step_qemu() {
	resolve_qemu_source || { apt_update && resolve_qemu_source; } || die "no QEMU 7.2 source package in apt"
	write_rig_env
	if [ -x "$FARPASS_QEMU" ]; then
		step "qemu: up to date ($FARPASS_QEMU)"
		return 0
	fi
	timed build-qemu nice bash "$FARPASS_TOP/qemu-patches/build-qemu.sh"
}

# ----------------------------------------------------------------------------------------------- l2

# L2 guest kernel: tinyconfig plus what an L2 guest of the rig needs (PCI/MSI/PCIe hotplug, ACPI, serial
# console, initramfs, PVH entry for fast -kernel boot, NVMe/e1000e/e1000 for borrowed devices, ext4,
# virtio-blk for the NVMe-oF namespace tests/bench/bench_nvmeof.sh gives its guest, io_uring for its QD16).
# Tickless when idle (NO_HZ_IDLE) at 100 Hz: under nested TCG every tick of an idle L2 costs its L1's one
# TCG thread, which that L1's other L2s share; with tinyconfig's periodic 250 Hz tick four guests of one L1
# booted one after the other took 43, 58, 122 and 216 s while the earlier ones waited idle, tickless 42,
# 37, 43 and 38 s (docs/rig.md, "Measured here").
L2_CONFIG=(
	-e 64BIT -e PRINTK -e PRINTK_TIME -e TTY -e SERIAL_8250 -e SERIAL_8250_CONSOLE -e SERIAL_8250_PCI
	--set-val SERIAL_8250_NR_UARTS 4 --set-val SERIAL_8250_RUNTIME_UARTS 4
	-e PCI -e PCIEPORTBUS -e PCI_MSI -e HOTPLUG_PCI -e HOTPLUG_PCI_PCIE -e HOTPLUG_PCI_ACPI -e ACPI
	-e BLK_DEV_INITRD -e RD_GZIP -e DEVTMPFS -e DEVTMPFS_MOUNT -e PROC_FS -e SYSFS -e TMPFS -e SHMEM
	-e BINFMT_ELF -e BINFMT_SCRIPT -e MULTIUSER -e FUTEX -e POSIX_TIMERS -e EPOLL -e SIGNALFD -e TIMERFD
	-e EVENTFD -e HYPERVISOR_GUEST -e PVH -e X86_MPPARSE -e X86_LOCAL_APIC -e X86_IO_APIC
	-e SMP -e BLOCK -e BLK_DEV -e BLK_DEV_NVME -e NVME_CORE -e NET -e UNIX -e INET -e NETDEVICES
	-e ETHERNET -e NET_VENDOR_INTEL -e E1000E -e E1000 -e EXT4_FS -e PROC_PAGE_MONITOR -e FW_CFG_SYSFS
	-e VIRTIO_MENU -e VIRTIO_PCI -e VIRTIO_BLK -e IO_URING -d HZ_PERIODIC -e NO_HZ_IDLE -d HZ_250 -e HZ_100
)
L2_CHECK=(PCI PCI_MSI PCIEPORTBUS HOTPLUG_PCI_PCIE ACPI SERIAL_8250_CONSOLE BLK_DEV_INITRD PVH BLK_DEV_NVME E1000E E1000
	EXT4_FS FW_CFG_SYSFS VIRTIO_PCI VIRTIO_BLK IO_URING NO_HZ_IDLE HZ_100)

build_l2_kernel() {
	# Its own build directory too: checkouts with other L2 configs may build theirs at the same time.
	local s=$FARPASS_KSRC_FULL o=$FARPASS_KBUILD/l2-kernel-${FARPASS_L2_KERNEL##*-} c
	mkdir -p "$o"
	nice make -C "$s" O="$o" ARCH=x86_64 tinyconfig
	"$s/scripts/config" --file "$o/.config" "${L2_CONFIG[@]}"
	nice make -C "$s" O="$o" ARCH=x86_64 olddefconfig
	for c in "${L2_CHECK[@]}"; do
		grep -q "^CONFIG_$c=y" "$o/.config" || die "l2 kernel: CONFIG_$c did not stick"
	done
	nice make -C "$s" O="$o" ARCH=x86_64 -j"$(nproc)" vmlinux
	mkdir -p "$(dirname "$FARPASS_L2_KERNEL")"
	cp "$o/vmlinux" "$FARPASS_L2_KERNEL"
}

# fio for the L2 guests (tests/e2e). Debian's binary links ~80 MB of libraries (ceph, gluster, rdma...) that
# every nested-TCG L2 boot would unpack; built from Debian's source without those engines, statically,
# it is ~3 MB; --disable-shm: the L2 kernel has no SysV IPC. Keyed by the source version and these flags.
FIO_CONFIGURE=(--build-static --disable-shm --disable-native --disable-numa --disable-rdma --disable-rados --disable-rbd
	--disable-http --disable-gfapi --disable-libnfs --disable-lex --disable-pmem --disable-xnvme
	--disable-libzbc --disable-tcmalloc --disable-dfs)

build_fio() {
	local d=$FARPASS_KBUILD/fio
	rm -rf "$d"
	mkdir -p "$d"
	(cd "$d" && apt-get source -q "fio=$1")
	(cd "$d"/fio-*/ && ./configure "${FIO_CONFIGURE[@]}" && nice make -j"$(nproc)" fio)
	strip -o "$FARPASS_L2_FIO" "$d"/fio-*/fio
	rm -rf "$d"
}

step_l2_fio() {
	local v hash
	v=$(apt-cache showsrc fio 2>/dev/null | awk '/^Version:/ {print $2; exit}')
	[ -n "$v" ] || die "no source package for fio (run: setup.sh apt)"
	hash=$(printf '%s\n' "$v" "${FIO_CONFIGURE[@]}" | sha256sum | cut -c1-16)
	if ! is_current "$FARPASS_L2_FIO" "$hash"; then
		mkdir -p "$(dirname "$FARPASS_L2_FIO")"
		timed "build-fio $v" with_progress "$FARPASS_CACHE/logs/build-fio.log" build_fio "$v"
		mark_current "$FARPASS_L2_FIO" "$hash"
	fi
}

# The L2 initramfs ($FARPASS_L2_INITRD, keyed by env.sh): busybox with its applets linked in /bin (the
# guest's init then starts no process to make them), the fio above, l2-init.sh as /init.
pack_l2_initrd() {
	local d a
	d=$(mktemp -d "$FARPASS_KDIR/l2-initrd.XXXXXX")
	mkdir -p "$d"/{bin,dev,proc,sys,tmp}
	cp /bin/busybox "$FARPASS_L2_FIO" "$d/bin/"
	for a in $(/bin/busybox --list); do
		[ -e "$d/bin/$a" ] || ln -s busybox "$d/bin/$a"
	done
	cp "$VM_IMAGES/l2-init.sh" "$d/init"
	chmod 755 "$d/init"
	(cd "$d" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) >"$FARPASS_L2_INITRD.tmp"
	mv "$FARPASS_L2_INITRD.tmp" "$FARPASS_L2_INITRD"
	rm -rf "$d"
}

step_l2() {
	need_kernel
	local hash
	hash=$( (printf '%s\n' "$KDEB_VERSION" "${L2_CONFIG[@]}") | sha256sum | cut -c1-16)
	if ! is_current "$FARPASS_L2_KERNEL" "$hash"; then
		if [ ! -e "$FARPASS_KDIR/src-full/.done" ]; then
			rm -rf "$FARPASS_KDIR/src-full"
			mkdir -p "$FARPASS_KDIR/src-full"
			timed extract-full-source extract_source "$FARPASS_KDIR/src-full"
			touch "$FARPASS_KDIR/src-full/.done"
		fi
		timed build-l2-kernel with_progress "$FARPASS_CACHE/logs/build-l2-kernel.log" build_l2_kernel
		mark_current "$FARPASS_L2_KERNEL" "$hash"
	fi
	step_l2_fio
	hash=$(inputs_hash "$VM_IMAGES/l2-init.sh" /bin/busybox "$FARPASS_L2_FIO")
	if ! is_current "$FARPASS_L2_INITRD" "$hash"; then
		pack_l2_initrd
		mark_current "$FARPASS_L2_INITRD" "$hash"
	fi
	write_rig_env
	step "l2: $FARPASS_L2_KERNEL ($(du -h "$FARPASS_L2_KERNEL" | cut -f1)), $FARPASS_L2_INITRD"
}

# ------------------------------------------------------------------------------------------- rootfs

# The L1 Debian root for the libvirt suites (booted instead of the host root). Keyed by its package list.
ROOTFS_PACKAGES=libvirt-daemon-system,libvirt-clients,libvirt-daemon-driver-qemu,qemu-system-x86,mdevctl,fio,kmod,pciutils,iproute2,iputils-ping,procps,busybox,jq,libxml2-utils,util-linux
rootfs_hash() { (printf '%s\n' "$ROOTFS_PACKAGES" && declare -f prep_rootfs) | sha256sum | cut -c1-12; }

# What the root needs beyond its packages to run libvirtd in an L1 without systemd (rig facts):
# no virtlogd running, so QEMU's stdio goes to files. L1 boots it with `rig_up --l1-root rootfs`.
prep_rootfs() {
	local r=$1
	printf '\n# farpass rig: libvirtd runs without virtlogd\nstdio_handler = "file"\n' >>"$r/etc/libvirt/qemu.conf"
	echo rig >"$r/etc/hostname"
}

build_rootfs() {
	nice mmdebstrap --variant=minbase --mode=root --aptopt='APT::Install-Recommends "false"' \
		--include="$ROOTFS_PACKAGES" bookworm "$1" \
		"deb http://deb.debian.org/debian bookworm main" \
		"deb http://deb.debian.org/debian bookworm-updates main" \
		"deb http://deb.debian.org/debian-security bookworm-security main"
}

step_rootfs() {
	need_kernel
	if [ -e "$FARPASS_ROOTFS/.done" ]; then
		step "rootfs: up to date ($FARPASS_ROOTFS)"
		write_rig_env
		return 0
	fi
	rm -rf "$FARPASS_ROOTFS.tmp"
	timed mmdebstrap with_progress "$FARPASS_CACHE/logs/mmdebstrap.log" build_rootfs "$FARPASS_ROOTFS.tmp"
	prep_rootfs "$FARPASS_ROOTFS.tmp"
	rm -rf "$FARPASS_ROOTFS"
	mv "$FARPASS_ROOTFS.tmp" "$FARPASS_ROOTFS"
	touch "$FARPASS_ROOTFS/.done"
	write_rig_env
	step "rootfs: $(du -sh "$FARPASS_ROOTFS" | cut -f1) $FARPASS_ROOTFS"
}

# ---------------------------------------------------------------------------------- debbase, debroot

# The L1 libvirt root as an operator's host is after `apt install ./farpass*.deb` (docs/install.md), for the
# libvirt suite (rig_up --l1-root debroot): two overlay layers over the rootfs (paths from env.sh).
#   debbase  the L1 kernel's linux-image (the very deb the kernel step took the L1's vmlinux from), its
#            linux-headers and dkms, with their toolchain, from the archive. Keyed by the kernel: made
#            once per kernel version.
#   debroot  apt-get install of this checkout's farpass and farpass-dkms debs (farpass_debs_dir: those
#            tests/unit/test_deb.sh built from the same tree, or `make deb` here); farpass-dkms's postinst
#            has DKMS build and install farpass.ko for the L1 kernel. Per checkout; the libvirt suite makes
#            it when missing. The chroot runs on L0, on L0's CPU: in an L1, DKMS's build would run under TCG.

# layer_run LOWERS LAYER SCRIPT: SCRIPT (bash) as root in a chroot of the overlay of LAYER/upper over LOWERS
# (colon-separated, topmost first), with /proc, /dev and the NTB modules' build directory (read-only, at its
# L0 path: FARPASS_NTB_SYMVERS for DKMS, as docs/install.md says for out-of-tree NTB modules). No redirect
# or metacopy entries, which a read-only overlay of the layers would need to be told to follow.
layer_run() {
	local lowers=$1 layer=$2 m=$2/merged ntb=${FARPASS_NTB_SYMVERS%/*} rc=0
	mkdir -p "$layer/upper" "$layer/work" "$m"
	mount -t overlay overlay -o "lowerdir=$lowers,upperdir=$layer/upper,workdir=$layer/work,redirect_dir=off,metacopy=off,index=off" "$m"
	mount -t proc proc "$m/proc"
	mount --rbind --make-rslave /dev "$m/dev"
	mkdir -p "$m$ntb"
	mount --bind -o ro "$ntb" "$m$ntb"
	nice chroot "$m" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive \
		FARPASS_NTB_SYMVERS="$FARPASS_NTB_SYMVERS" bash -ec "$3" || rc=$?
	umount "$m$ntb" "$m/proc"
	umount -R "$m/dev"
	umount "$m"
	# The mount point's directories are not part of the root.
	(cd "$layer/upper" && rmdir -p --ignore-fail-on-non-empty "${ntb#/}")
	rm -rf "$layer/work" "$m"
	return "$rc"
}

# make_layer DIR BUILD-FUNCTION: DIR made by BUILD-FUNCTION DIR.tmp unless done; one build at a time.
make_layer() {
	local dir=$1 lock
	exec {lock}>"$dir.lock"
	flock "$lock"
	if [ ! -e "$dir/.done" ]; then
		rm -rf "$dir.tmp"
		"$2" "$dir.tmp"
		touch "$dir.tmp/.done"
		rm -rf "$dir"
		mv "$dir.tmp" "$dir"
	fi
	exec {lock}>&-
}

build_debbase() {
	local deb=linux-image-${KVER}_${KDEB_VERSION}_amd64.deb
	install -d -m 1777 "$1/upper/tmp"
	cp "$FARPASS_KDIR/debs/$deb" "$1/upper/tmp/"
	# INITRD=No: no initramfs for the L1 kernel, which boots the rig's own (l1-init.sh). Without it linux-image's
	# postinst made one and initramfs-tools' trigger made it again (37-42 MB): half of the step's time here.
	# With none made, the trigger has none to update.
	timed debbase-apt with_progress "$FARPASS_CACHE/logs/debbase-$KVER.log" layer_run "$FARPASS_ROOTFS" "$1" "
apt-get -q update
INITRD=No apt-get -q install -y --no-install-recommends /tmp/$deb linux-headers-$KVER=$KDEB_VERSION dkms
rm /tmp/$deb
apt-get clean"
}

step_debbase() {
	need_kernel
	[ -e "$FARPASS_ROOTFS/.done" ] || die "no L1 rootfs $FARPASS_ROOTFS (run: setup.sh rootfs)"
	make_layer "$(debroot_base_path)" build_debbase
	step "debbase: $(du -sh "$(debroot_base_path)" | cut -f1) $(debroot_base_path)"
}

# The debs of this tree: test_deb.sh's if it built them, else `make deb` (dpkg-buildpackage, lintian;
# nocheck: the unit suite is make check's own).
farpass_debs() {
	local b=$FARPASS_CACHE/make-deb.$$
	[ ! -e "$(farpass_debs_dir)/.done" ] || return 0
	rm -rf "$b"
	timed make-deb with_progress "$FARPASS_CACHE/logs/make-deb.log" \
		env DEB_BUILD_OPTIONS=nocheck nice make -C "$FARPASS_TOP" --no-print-directory deb BUILD="$b"
	farpass_debs_keep "$b/deb"
	rm -rf "$b"
}

build_debroot() {
	farpass_debs
	install -d -m 1777 "$1/upper/tmp"
	cp "$(farpass_debs_dir)"/*.deb "$1/upper/tmp/"
	timed debroot-apt with_progress "$FARPASS_CACHE/logs/debroot-$KVER.log" layer_run \
		"$(debroot_base_path)/upper:$FARPASS_ROOTFS" "$1" "
# dkms's postinst may end well after a failed build: its status says.
apt-get -q install -y --no-install-recommends /tmp/farpass_*.deb /tmp/farpass-dkms_*.deb && rm /tmp/farpass*.deb &&
	dkms status -k $KVER farpass | grep -q ': installed\$' ||
	{ dkms status; cat /var/lib/dkms/farpass/*/build/make.log; exit 1; }"
}

step_debroot() {
	need_kernel
	[ -e "$(debroot_base_path)/.done" ] || step_debbase
	make_layer "$(debroot_path)" build_debroot
	# Every tree has its own layer (86 MB) and debs: those of trees not set up for 2 days go, and base layers
	# (debroot-base-*, which the pattern matches too) not used for 2 days, e.g. of an older recipe.
	touch "$(debroot_path)" "$(debroot_base_path)" "$(farpass_debs_dir)"
	find "$FARPASS_KDIR" -maxdepth 1 -name 'debroot-[0-9a-f]*' -mtime +2 -exec rm -rf {} +
	find "$FARPASS_CACHE" -maxdepth 1 -name 'debs-*' -mtime +2 -exec rm -rf {} +
	step "debroot: $(du -sh "$(debroot_path)" | cut -f1) $(debroot_path)"
}

# --------------------------------------------------------------------------------------------- main

# A step whose artefacts both kernel series share, run as the shared series (in a subshell: the selected
# series' paths stay as they are for the steps after it).
shared_step() {
	(
		FARPASS_KERNEL=$FARPASS_KERNEL_SHARED KDEB_VERSION=
		need_kernel
		"step_$1"
	)
}

main() {
	local steps=() s
	[ "$(id -u)" = 0 ] || die "must run as root (apt, depmod, mmdebstrap)"
	(($#)) || set -- all
	for s in "$@"; do
		case $s in
		rig) steps+=(apt kernel modules l1initrd qemu) ;;
		all) steps+=(apt kernel modules l1initrd qemu l2 rootfs debbase) ;;
		apt | kernel | modules | l1initrd | qemu | l2 | rootfs | debbase | debroot) steps+=("$s") ;;
		*) die "unknown step '$s' (steps: apt kernel modules l1initrd qemu l2 rootfs debbase debroot; groups: rig all)" ;;
		esac
	done
	mkdir -p "$FARPASS_CACHE/logs"
	local t0=$SECONDS
	for s in "${steps[@]}"; do
		SETUP_STEP=$s
		if [[ $s == @(qemu|l2|rootfs) ]] && [ "$FARPASS_KERNEL" != "$FARPASS_KERNEL_SHARED" ]; then
			timed "setup $s (shared, as $FARPASS_KERNEL_SHARED)" shared_step "$s"
		else
			timed "setup $s" "step_$s"
		fi
	done
	step "setup of kernel $FARPASS_KERNEL done in $((SECONDS - t0))s (rig.env: $FARPASS_RIG_ENV, $(rig_kernel_env "$FARPASS_KERNEL"))"
}

main "$@"
