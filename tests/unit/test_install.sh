#!/bin/bash
# `meson install --destdir` of the build: the installed files (prefix written as PREFIX) are exactly
# tests/golden/install-files.txt (FARPASS_UPDATE_GOLDEN=1 rewrites it), the hook is executable, the
# systemd unit starts the installed agent and keeps its VFIO descriptors (fd store), and dkms.conf names the installed version. docs/install.md.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${FARPASS_BUILD:-$top/build}
golden=$top/tests/golden/install-files.txt
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
meson install -C "$build" --no-rebuild --destdir "$d" --quiet >/dev/null
prefix=$(meson introspect "$build" --buildoptions | jq -r '.[] | select(.name == "prefix") | .value')
version=$(meson introspect "$build" --projectinfo | jq -r .version)
files=$(cd "$d" && find . \( -type f -o -type l \) -printf '%P\n' | sed -e "s|^${prefix#/}/|PREFIX/|" \
	-e "s|farpass-$version/|farpass-VERSION/|" | sort)
if [ -n "${FARPASS_UPDATE_GOLDEN:-}" ]; then
	echo "$files" >"$golden"
fi
fails=0
check() {
	if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
check "installed files are the golden list" diff -u "$golden" - <<<"$files"
check "the hook is executable, in libvirt's qemu.d" test -x "$d/etc/libvirt/hooks/qemu.d/farpass"
unit=$(find "$d" -name farpass-agent.service)
check "the unit's ExecStart is the installed agent" grep -qx "ExecStart=$prefix/sbin/farpass-agent --config /etc/farpass/agent.conf" "$unit"
check "... which is there" test -x "$d$prefix/sbin/farpass-agent"
check "the unit gives the agent room for its connections (LimitNOFILE)" grep -qx "LimitNOFILE=8192" "$unit"
check "the unit keeps the agent's VFIO descriptors across restarts (fd store, from the agent only)" \
	bash -c "grep -qx NotifyAccess=main '$unit' && grep -qx FileDescriptorStoreMax=64 '$unit'"
check "dkms.conf names version $version" grep -qx "PACKAGE_VERSION=\"$version\"" "$d/usr/src/farpass-$version/dkms.conf"
check "the DKMS tree has every source Kbuild names" bash -c "cd '$d/usr/src/farpass-$version/mdev' &&
	for o in \$(sed -n 's/^farpass-y := //p' Kbuild); do test -f \${o%.o}.c || { echo missing \${o%.o}.c; exit 1; }; done"
[ $fails -eq 0 ]
