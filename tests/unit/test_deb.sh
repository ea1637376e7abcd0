#!/bin/bash
# The Debian packages (debian/, `make deb`) build from the tree and install on a fresh Debian 12 machine
# the way an operator installs them. Checks:
#   - `make deb` builds farpass and farpass-dkms (dpkg-buildpackage with DEB_BUILD_OPTIONS=nocheck: no
#     test program built or run, make check's unit/meson runs that suite) and lintian finds no error or
#     warning (the debs are kept for the libvirt suite: farpass_debs_dir);
#   - together the packages hold exactly what `meson install` installs (tests/golden/install-files.txt,
#     prefix /usr), less the uapi header (debian/not-installed), plus each package's copyright and
#     changelog; the module source and dkms.conf only in farpass-dkms;
#   - farpass depends on farpass-dkms of its own version, on jq and libxml2-utils, farpass-dkms on dkms;
#   - in a minimal bookworm root (tests/unit/fresh-root.sh), `apt-get install ./farpass*.deb` installs
#     both with their dependencies from the archive; DKMS then has farpass/VERSION added; the installed
#     farpassctl and farpass-agent run (their libraries are there), and so does the libvirt hook (xmllint
#     is there); `apt-get purge` removes both and DKMS forgets the module.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/vm-images/env.sh"
. "$top/tests/rig/ntb-lib.sh"
. "$top/tests/unit/fresh-root.sh"

d=$(mktemp -d)
fresh_root_mount "$d"
m=$FRESH_ROOT
fails=0
check() { "$@" || fails=$((fails + 1)); }

version=$(dpkg-parsechangelog -l "$top/debian/changelog" -S Version)
out=$d/build/deb
expect "make deb (dpkg-buildpackage and lintian --fail-on error,warning)" \
	bash -c "DEB_BUILD_OPTIONS=nocheck make -C '$top' --no-print-directory deb BUILD='$d/build' >'$d/deb.log' 2>&1" ||
	{ tail -n 30 "$d/deb.log"; exit 1; }
grep -E '^[EWI]: ' "$d/deb.log" | sed 's/^/  lintian | /' || true
deb=$out/farpass_${version}_amd64.deb dkms_deb=$out/farpass-dkms_${version}_all.deb
# The libvirt suite installs them (setup.sh debroot): no second build of the same tree.
farpass_debs_keep "$out"

contents() { dpkg-deb -c "$1" | awk '$1 !~ /^d/ {sub("^\\./", "", $6); print $6}' | sort; }
want=$( (sed -e 's|^PREFIX/|usr/|' -e "s|farpass-VERSION/|farpass-$version/|" "$top/tests/golden/install-files.txt" |
	grep -vx 'usr/include/farpass.h'
	printf 'usr/share/doc/%s/copyright\nusr/share/doc/%s/changelog.gz\n' farpass farpass farpass-dkms farpass-dkms) |
	sed -E 's#^(usr/share/(man/man[0-9]/.*|doc/farpass/.*\.md))$#\1.gz#' | sort)
check expect_eq "files of both packages against meson's install list (missing -, extra +)" \
	"$(diff <(echo "$want") <(sort <(contents "$deb") <(contents "$dkms_deb")) | grep '^[<>]' | tr '<>' '-+' || true)" ""
check expect_eq "farpass's files under usr/src" "$(contents "$deb" | grep -c '^usr/src/' || true)" 0
check expect_eq "farpass-dkms's files outside usr/src and its doc" \
	"$(contents "$dkms_deb" | grep -vE '^usr/src/farpass-'"$version"'/|^usr/share/doc/farpass-dkms/' || true)" ""
check expect_eq "farpass depends on (farpass-dkms, jq, libxml2-utils)" \
	"$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/^ //' | grep -E '^(farpass-dkms|jq|libxml2-utils|dkms)\b' | sort | tr '\n' ' ')" \
	"farpass-dkms (= $version) jq libxml2-utils "
check expect "farpass-dkms depends on dkms" grep -qE '(^|, )dkms( |,|$)' <<<"$(dpkg-deb -f "$dkms_deb" Depends)"

# The install, for real, from the archive (the packages' dependencies) on the fresh root.
cp "$deb" "$dkms_deb" "$m/tmp/"
apt_in_root() { fresh_root_run env DEBIAN_FRONTEND=noninteractive apt-get -q "$@" >>"$d/apt.log" 2>&1 || { tail -n 30 "$d/apt.log"; return 1; }; }
check expect "apt-get update and install ./farpass*.deb on the fresh root" \
	eval 'apt_in_root update && apt_in_root install -y --no-install-recommends "/tmp/${deb##*/}" "/tmp/${dkms_deb##*/}"'
check expect_eq "dkms status" "$(fresh_root_run dkms status farpass 2>&1)" "farpass/$version: added"
check expect_eq "the installed farpassctl runs" "$(fresh_root_run farpassctl --help 2>&1 | head -n 1 | cut -d' ' -f1-2)" \
	"usage: farpassctl"
check expect_eq "the installed farpass-agent runs" "$(fresh_root_run farpass-agent --help 2>&1 | head -n 1 | cut -d' ' -f1-2)" \
	"usage: farpass-agent"
check expect "the libvirt hook, the unit and the udev rule are in place" test -x "$m/etc/libvirt/hooks/qemu.d/farpass" \
	-a -f "$m/lib/systemd/system/farpass-agent.service" -a -f "$m/lib/udev/rules.d/61-farpass-mdevctl.rules"
# No /sys in the root, so no farpass type: the hook only reads the XML (with xmllint) and ends.
check expect_eq "the installed hook reads a domain's mdev hostdev: exit 0, nothing said" \
	"$(fresh_root_run /etc/libvirt/hooks/qemu.d/farpass g prepare begin - 2>&1 <<<"<domain><devices><hostdev mode='subsystem' type='mdev'><source><address uuid='11111111-2222-3333-4444-555555555555'/></source></hostdev></devices></domain>"; echo "rc=$?")" \
	"rc=0"
check expect "apt-get purge farpass farpass-dkms" apt_in_root purge -y farpass farpass-dkms
check expect_eq "dkms status after the purge" "$(fresh_root_run dkms status farpass 2>&1)" ""
check expect_eq "files of the packages left after the purge" \
	"$(cd "$m" && ls -d usr/src/farpass-* usr/sbin/farpass-agent etc/libvirt/hooks/qemu.d/farpass 2>/dev/null || true)" ""
[ $fails -eq 0 ]
