#!/bin/bash
# Build a module out of tree for meson: copy its sources (SOURCE_DIR, default mdev/ for farpass.ko, and
# include/) into a private directory of the build tree, run Kbuild there against the headers of the rig's
# L1 kernel SERIES (6.1 or 6.12: its paths from vm-images/env.sh, whatever the caller's environment says),
# copy the .ko out. Nothing is written into the source tree.
# usage: build-module.sh OUTPUT.ko PRIVATE_DIR SERIES [SOURCE_DIR]
set -euo pipefail
out=$(realpath -m "$1") work=$(realpath -m "$2")
top=$(cd "$(dirname "$0")/.." && pwd)
FARPASS_KERNEL=$3
src=$(realpath "${4:-$top/mdev}")
. "$top/vm-images/env.sh"
for v in FARPASS_KHEADERS FARPASS_NTB_SYMVERS; do
	if [ ! -e "${!v:-/nonexistent}" ]; then
		echo "build-module.sh: $v not set or missing (${!v:-}): run FARPASS_KERNEL=$3 vm-images/setup.sh rig" >&2
		exit 1
	fi
done
mod=$work/$(basename "$src")
mkdir -p "$mod" "$work/include/uapi"
# Copy only what changed, so Kbuild's own dependency tracking keeps rebuilds incremental.
shopt -s nullglob
cp -u "$src"/Kbuild "$src"/*.[ch] "$mod/"
cp -u "$top/include/uapi/farpass.h" "$work/include/uapi/"
# W=1 and -Werror: the module must build warning-free.
# (Without the kernel's vmlinux there is no BTF to generate: drop that one notice.)
nice make -s -C "$FARPASS_KHEADERS" M="$mod" KBUILD_EXTRA_SYMBOLS="$FARPASS_NTB_SYMVERS" \
	W=1 KCFLAGS=-Werror -j"$(nproc)" modules 2>&1 | { grep -v '^Skipping BTF generation' || true; }
kos=("$mod"/*.ko)
((${#kos[@]} == 1)) || { echo "build-module.sh: expected one module in $mod, got: ${kos[*]}" >&2; exit 1; }
cp "${kos[0]}" "$out"
