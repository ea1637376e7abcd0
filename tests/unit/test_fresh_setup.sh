#!/bin/bash
# A fresh Debian 12 machine gets through the set-up's first step: in a minimal bookworm root made with
# mmdebstrap (cached in $FARPASS_CACHE, copied-on-write per run with overlayfs), `vm-images/setup.sh apt`
# runs from an empty package set. Installs are simulated (apt-get -s: a real install of the full list takes
# minutes); everything else (apt-get update, apt-cache, dpkg-query, the kernel's resolution) is real.
# Checks:
#   - the root has none of the set-up's packages installed (the test starts from an empty package set);
#   - setup.sh reaches `apt-get install` with every one of its packages and the kernel's headers;
#   - apt resolves that install on the fresh root (the simulated install succeeds);
#   - setup.sh then stops only at its headers-version check, saying so (nothing was really installed);
#   - when apt-get install fails, setup.sh names the step and the command that failed, and what to do.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/vm-images/env.sh"
. "$top/tests/rig/ntb-lib.sh"
. "$top/tests/unit/fresh-root.sh"

d=$(mktemp -d)
fresh_root_mount "$d"
m=$FRESH_ROOT

# apt-get install is simulated and its arguments logged; every other apt-get runs for real. env.sh puts
# /usr/local/sbin first in PATH, so setup.sh's `env ... apt-get install` finds this one.
cat >"$m/usr/local/sbin/apt-get" <<-'EOF'
	#!/bin/sh
	for a; do
		if [ "$a" = install ] && [ -e /tmp/apt-install.fail ]; then
			echo "E: the test's apt-get refuses to install"
			exit 100
		elif [ "$a" = install ]; then
			printf '%s\n' "$*" >>/tmp/apt-install.args
			/usr/bin/apt-get -s "$@" >/tmp/apt-install.out 2>&1
			rc=$?
			echo "$rc" >>/tmp/apt-install.rc
			exit $rc
		fi
	done
	exec /usr/bin/apt-get "$@"
EOF
chmod 755 "$m/usr/local/sbin/apt-get"

packages=$(sed -n '/^APT_PACKAGES=(/,/^)/p' "$top/vm-images/setup.sh" | sed '1d;$d' | tr -s ' \t' '\n\n' | sed '/^$/d' | sort)
[ "$(wc -l <<<"$packages")" -gt 20 ] || fresh_root_fail "could not read APT_PACKAGES from vm-images/setup.sh"
root_has=$(chroot "$m" dpkg-query -W -f='${Status} ${Package}\n' | awk '/^install ok installed / {print $4}' | sort)
build_pkgs=$(comm -12 <(echo "$packages") <(echo "$root_has") | grep -vxE 'iproute2|kmod|procps|debian-archive-keyring' || true)
expect_eq "set-up packages already in the fresh root (apt, kmod and the like aside)" "$build_pkgs" ""

set +e
fresh_root_run bash /src/vm-images/setup.sh apt >"$d/setup.log" 2>&1
rc=$?
set -e
sed 's/^/  | /' "$d/setup.log" | tail -n 15

fails=0
args=$(cat "$m/tmp/apt-install.args" 2>/dev/null || true)
expect "setup.sh ran apt-get install" test -n "$args" || fails=$((fails + 1))
# The default series' kernel: the ABI its meta-package depends on (vm-images/env.sh).
kver=$(chroot "$m" apt-cache depends "${FARPASS_KERNEL_META[$FARPASS_KERNEL_DEFAULT]}" | awk '/Depends: linux-image-[0-9]/ {sub("linux-image-", "", $2); print $2; exit}')
want=$(comm -23 <(printf '%s\n' $packages "linux-headers-$kver" | sort) <(echo "$root_has"))
got=$(tr ' ' '\n' <<<"$args" | grep -vE '^-|^install$' | sort -u)
expect_eq "packages asked for that are missing from the install (the full list and linux-headers-$kver)" \
	"$(comm -23 <(echo "$want") <(echo "$got"))" "" || fails=$((fails + 1))
expect_eq "apt's simulated install on the fresh root (status)" "$(head -n 1 "$m/tmp/apt-install.rc" 2>/dev/null)" 0 ||
	{ tail -n 20 "$m/tmp/apt-install.out" 2>/dev/null; fails=$((fails + 1)); }
expect "setup.sh then stopped at the headers check, saying why" \
	grep -q "^setup.sh: linux-headers-$kver is not installed" "$d/setup.log" || fails=$((fails + 1))
expect_eq "setup.sh's status" "$rc" 1 || fails=$((fails + 1))

touch "$m/tmp/apt-install.fail"
fresh_root_run bash /src/vm-images/setup.sh apt >"$d/setup-fail.log" 2>&1 &&
	rc=0 || rc=$?
sed 's/^/  | /' "$d/setup-fail.log" | tail -n 4
expect "a failed install: setup.sh names the step and the command" \
	grep -q '^setup.sh: step apt: .* failed (status 100) at .* in apt_install, .* in step_apt, ' "$d/setup-fail.log" ||
	fails=$((fails + 1))
expect "... and says what to do" grep -q '^setup.sh: apt-get could not update or install' "$d/setup-fail.log" ||
	fails=$((fails + 1))
expect_eq "... and fails with apt-get's status" "$rc" 100 || fails=$((fails + 1))
[ $fails -eq 0 ]
