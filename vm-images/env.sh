# Sourced by every rig script: where downloads and builds are cached, and which versions the rig uses.
# Builds live outside the clone, keyed by version, so a second `make check` reuses them; a fresh machine
# builds everything from Debian packages.

FARPASS_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FARPASS_CACHE=${FARPASS_CACHE:-/var/cache/farpass}

# Debian's own python3 (QEMU's configure and meson must not pick up a pyenv shim).
export PATH=/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH

# Firmware from Debian's seabios/ipxe-qemu packages (the dfsg source ships none).
FARPASS_QEMU_FW="-L /usr/share/seabios -L /usr/share/qemu"

# Progress for long steps: "==> step" lines with elapsed seconds.
step() { printf '==> %s\n' "$*" >&2; }
timed() {
	local name=$1 t0=$SECONDS
	shift
	step "$name"
	"$@"
	local rc=$?
	printf '    %s: %ds (rc=%d)\n' "$name" $((SECONDS - t0)) $rc >&2
	return $rc
}

# The L1 hosts' kernel: a Debian 12 kernel series and the package whose dependency names its current ABI.
declare -gA FARPASS_KERNEL_META=([6.1]=linux-image-amd64 [6.12]=linux-image-6.12-amd64)
# The default is the newest; the other series is set up and built beside it, and make check runs its
# kernel and e2e suites too (SUITE@other).
FARPASS_KERNEL_DEFAULT=6.12
FARPASS_KERNEL_OTHER=6.1
# The series whose set-up makes what both share (QEMU, the L1 root, the L2 guest kernel, built from its
# source) and writes rig.env: 6.1 whatever the default, so the L2 guests and the figures taken in them
# do not change with the L1 hosts' kernel.
FARPASS_KERNEL_SHARED=6.1
export FARPASS_KERNEL=${FARPASS_KERNEL:-$FARPASS_KERNEL_DEFAULT}
if [ -z "${FARPASS_KERNEL_META[$FARPASS_KERNEL]:-}" ]; then
	echo "env.sh: FARPASS_KERNEL=$FARPASS_KERNEL is not a rig kernel (${!FARPASS_KERNEL_META[*]})" >&2
	return 1
fi
# What the L1 kernel's set-up resolves, per series (the rest of rig.env is shared by both).
FARPASS_KERNEL_VARS=(KVER KDEB_VERSION FARPASS_KDIR FARPASS_KIMG FARPASS_KMODS FARPASS_VMLINUZ FARPASS_VMLINUX
	FARPASS_KHEADERS FARPASS_KSRC FARPASS_KSRC_FULL FARPASS_KBUILD FARPASS_KO_DIR FARPASS_NTB_SYMVERS
	FARPASS_L1_INITRD)
rig_kernel_env() { printf '%s/rig-kernel-%s.env\n' "$FARPASS_CACHE" "$1"; }

# Versions and artefact paths resolved by `vm-images/setup.sh` (KVER, KDEB_VERSION, QEMU_DEB_VERSION, FARPASS_KIMG,
# FARPASS_VMLINUX, FARPASS_KO_DIR, FARPASS_L1_INITRD, ...). Written once per set-up so that every script
# (setup, rig launcher, tests, the L1 command server) uses the same values; absent before the first set-up.
# rig.env holds the shared series' (FARPASS_KERNEL_SHARED); rig-kernel-SERIES.env each kernel's own, which override them.
FARPASS_RIG_ENV=$FARPASS_CACHE/rig.env
# The L2 guest kernel (setup.sh l2 builds it from the shared series' source, so under rig.env's FARPASS_KDIR),
# keyed by what builds it in this checkout (setup.sh's L2_CONFIG, L2_CHECK and build_l2_kernel), so that a
# checkout with another L2 config boots its own and never replaces the one other checkouts boot. rig.env's
# FARPASS_L2_KERNEL, which this overrides, is for checkouts older than this key.
# A missing file hashes as absent, as in qemu_patch_hash.
l2_kernel_path() {
	printf '%s/l2/vmlinux-%s\n' "$FARPASS_KDIR" "$({ sed -n '/^L2_CONFIG=(/,/^}/p' \
		"$FARPASS_TOP/vm-images/setup.sh" 2>/dev/null || true; } | sha256sum | cut -c1-12)"
}
if [ -r "$FARPASS_RIG_ENV" ]; then
	. "$FARPASS_RIG_ENV"
	FARPASS_L2_KERNEL=$(l2_kernel_path)
fi
if [ -r "$(rig_kernel_env "$FARPASS_KERNEL")" ]; then
	. "$(rig_kernel_env "$FARPASS_KERNEL")"
elif [ "$FARPASS_KERNEL" != "$FARPASS_KERNEL_SHARED" ]; then
	# Not set up: never let the default kernel's paths stand in for it.
	unset "${FARPASS_KERNEL_VARS[@]}"
fi

# The patched QEMU: Debian's newest 7.2 source package (setup resolves it; Debian drops superseded
# versions from its indexes, so a pinned one would break fresh machines) plus our series, keyed by a hash
# of the patches so that editing one rebuilds.
QEMU_DEB_VERSION=${QEMU_DEB_VERSION:-1:7.2+dfsg-7+deb12u18}
qemu_patch_hash() {
	# Missing files hash as absent (not an error), so sourcing this under `set -euo pipefail` works
	# before qemu-patches/ is complete; once the files exist the hash is the same as without `|| true`.
	{ (cd "$FARPASS_TOP/qemu-patches" && cat series $(cat series) rig-devices.mak build-qemu.sh) 2>/dev/null ||
		true; } | sha256sum | cut -c1-12
}
qemu_paths() {
	FARPASS_QEMU_DIR=$FARPASS_CACHE/qemu-${QEMU_DEB_VERSION#*:}-$(qemu_patch_hash)
	FARPASS_QEMU=$FARPASS_QEMU_DIR/bin/qemu-system-x86_64
}
qemu_paths

# The L2 guests' initramfs (setup.sh l2 packs it), keyed like the QEMU by what makes it in this checkout
# (its /init and setup.sh's packing), so that checkouts with another init each boot their own. rig.env's
# FARPASS_L2_INITRD, which this overrides, is for checkouts older than this key.
# A missing file hashes as absent, as in qemu_patch_hash.
FARPASS_L2_INITRD=$FARPASS_CACHE/l2-initrd-$({ (cat "$FARPASS_TOP/vm-images/l2-init.sh" &&
	sed -n '/^pack_l2_initrd() {/,/^}/p' "$FARPASS_TOP/vm-images/setup.sh") 2>/dev/null || true; } |
	sha256sum | cut -c1-12).gz

# The L1 root with the Debian packages installed (setup.sh debbase, debroot; rig_up --l1-root debroot): two
# overlay layers over the rootfs, each LAYER/upper. The base (the L1 kernel's image and headers, dkms) is
# keyed by the series' kernel (under FARPASS_KDIR), the rootfs and this checkout's recipe for it; the
# packages' layer also by the tree `make deb` packs (FARPASS_TREE_HASH) and the NTB modules' symbols DKMS
# builds farpass.ko against. A missing file hashes as absent, as in qemu_patch_hash.
# The tree's hash is taken once, when a script sources this file: a file edited while a test or the set-up
# runs must not make it keep the debs it is building, or look for its debroot, under another tree's hash.
# Where there is no git yet (a fresh machine before setup.sh apt) this hash is of nothing, and unused.
FARPASS_TREE_HASH=$( { (cd "$FARPASS_TOP" && git ls-files -z --cached --others --exclude-standard 2>/dev/null |
	xargs -0 -r sha256sum 2>/dev/null) || true; } | sha256sum | cut -c1-16)
# Where the packages `make deb` built from this tree are kept (setup.sh debroot, tests/unit/test_deb.sh).
farpass_debs_dir() { printf '%s/debs-%s\n' "$FARPASS_CACHE" "$FARPASS_TREE_HASH"; }
# farpass_debs_keep DIR: the two debs in DIR (`make deb`'s output) kept as this tree's, unless some already are.
farpass_debs_keep() {
	local dir t
	dir=$(farpass_debs_dir)
	t=$dir.$$
	[ ! -e "$dir/.done" ] || return 0
	rm -rf "$t" && mkdir -p "$t" && cp "$1"/farpass_*.deb "$1"/farpass-dkms_*.deb "$t/" && touch "$t/.done" || return
	[ -e "$dir/.done" ] || rm -rf "$dir"
	mv -T "$t" "$dir" 2>/dev/null || rm -rf "$t"
}
_debroot_recipe() { sed -n "/^$1() {/,/^}/p" "$FARPASS_TOP/vm-images/setup.sh" 2>/dev/null || true; }
debroot_base_path() {
	printf '%s/debroot-base-%s\n' "$FARPASS_KDIR" "$({ echo "$FARPASS_ROOTFS" && _debroot_recipe build_debbase &&
		_debroot_recipe layer_run; } | sha256sum | cut -c1-12)"
}
debroot_path() {
	printf '%s/debroot-%s\n' "$FARPASS_KDIR" "$({ debroot_base_path && echo "$FARPASS_TREE_HASH" &&
		_debroot_recipe build_debroot && cat "$FARPASS_NTB_SYMVERS" 2>/dev/null; } | sha256sum | cut -c1-12)"
}
