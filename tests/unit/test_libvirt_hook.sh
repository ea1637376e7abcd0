#!/bin/bash
# libvirt-hooks/qemu.d/farpass on a fake sysfs (FARPASS_SYSFS) with the real farpassctl's mdev-uuid and
# the agent's answers (status, list) from files: which mdevs it creates for a domain's XML, what it
# removes at release, and the one-line errors libvirt would show (borrowed elsewhere, lender down,
# agent down). The same paths run in the rig under libvirt in tests/libvirt/.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${FARPASS_BUILD:-$top/build}
HOOK=$top/libvirt-hooks/qemu.d/farpass
CTL=$build/lender-agent/farpassctl
[ -x "$CTL" ] || { echo "missing $CTL: run make build" >&2; exit 1; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }
expect_eq() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: got '$2', want '$3'"; fi; }

NTB=0000:00:05.0
TYPE=ntb_hw_epf-farpass-lender-123456
UUID=$("$CTL" mdev-uuid $TYPE)
types=$t/sys/class/mdev_bus/$NTB/mdev_supported_types
mkdir -p "$types/$TYPE" "$types/mtty-1" "$t/sys/bus/mdev/devices"

# The agent: farpassctl with status/list answered from $t/status.json and $t/list.json (or exit 3).
cat >"$t/farpassctl" <<EOF
#!/bin/bash
[ "\$1" = mdev-uuid ] && exec "$CTL" "\$@"
[ -e "$t/agent-down" ] && { echo '{"error": {"code": 2, "errno": 111, "message": "connecting to /run/farpass/agent.sock: Connection refused"}}'; exit 3; }
cat "$t/\$2.json"
EOF
chmod +x "$t/farpassctl"
cat >"$t/status.json" <<'EOF'
{"host": "borrower2", "remote_devices": [{"lender": "lender", "pci": "0000:00:08.0", "id": 123456, "ntb": "0000:00:05.0", "announced": true, "borrowed": false}]}
EOF
# mdevctl: the UUIDs in $t/defined are defined; `start` is logged to $t/mdevctl.log.
cat >"$t/mdevctl" <<EOF
#!/bin/bash
case "\$1" in
list) grep -x "\$4" "$t/defined" 2>/dev/null || true ;;
start) echo "\$*" >>"$t/mdevctl.log" ;;
esac
EOF
chmod +x "$t/mdevctl"
list() { # list BORROWER|null UNREACHABLE-JSON
	printf '{"devices": [{"host": "lender", "pci": "0000:00:08.0", "borrower": %s}], "unreachable": %s}\n' "$1" "$2" >"$t/list.json"
}
domain_xml() { # domain_xml UUID...
	echo "<domain type='kvm'><name>g</name><devices>"
	echo "  <hostdev mode='subsystem' type='pci'><source><address domain='0' bus='1' slot='0' function='0'/></source></hostdev>"
	for u in "$@"; do
		printf "    <hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci'>\n      <source>\n        <address uuid='%s'/>\n      </source>\n    </hostdev>\n" "$u"
	done
	echo "</devices></domain>"
}
hook() { # hook OP SUBOP UUID...: runs the hook as libvirtd does; prints stderr, returns its status
	local op=$1 subop=$2
	shift 2
	rm -f "$types/$TYPE/create"
	# From a file, not a pipe: the hook need not read all of it (libvirtd ignores EPIPE), and a pipe's
	# writer would then die of SIGPIPE now and then, failing the pipeline.
	domain_xml "$@" >"$t/domain.xml"
	# shellcheck disable=SC2069 # stderr is the result, stdout (XML for libvirt) is not looked at here
	FARPASSCTL=$t/farpassctl MDEVCTL=$t/mdevctl FARPASS_SYSFS=$t/sys FARPASS_HOOK_STATE=$t/state \
		"$HOOK" g "$op" "$subop" - <"$t/domain.xml" 2>&1 >/dev/null
}
OTHER=11111111-2222-3333-4444-555555555555

echo "# a free device: prepare creates the transient instance, release removes it"
list null '[]'
out=$(hook prepare begin $OTHER "$UUID") && rc=0 || rc=$?
expect_eq "prepare succeeds, says nothing" "$rc:$out" "0:"
expect_eq "the farpass UUID was written to its type's create" "$(cat "$types/$TYPE/create" 2>/dev/null)" "$UUID"
expect_eq "it is remembered as the hook's, for domain g" "$(cat "$t/state/$UUID" 2>/dev/null)" g
mkdir -p "$t/sys/bus/mdev/devices/$UUID"
hook release end "$UUID" >/dev/null
expect_eq "release end removes it through sysfs" "$(cat "$t/sys/bus/mdev/devices/$UUID/remove" 2>/dev/null)" 1
expect_eq "... and forgets it" "$(ls "$t/state")" ""
rm -rf "$t/sys/bus/mdev/devices/$UUID"

echo "# an instance that exists already is left alone, and is not removed at release"
mkdir -p "$t/sys/bus/mdev/devices/$UUID"
out=$(hook prepare begin "$UUID") && rc=0 || rc=$?
expect_eq "prepare succeeds" "$rc:$out" "0:"
expect_eq "nothing created" "$(test -e "$types/$TYPE/create" && echo created)" ""
hook release end "$UUID" >/dev/null
expect_eq "release leaves it" "$(test -e "$t/sys/bus/mdev/devices/$UUID/remove" && echo removed)" ""
rm -rf "$t/sys/bus/mdev/devices/$UUID"

echo "# an instance defined in mdevctl is started by mdevctl, and stays at release"
echo "$UUID" >"$t/defined"
out=$(hook prepare begin "$UUID") && rc=0 || rc=$?
expect_eq "prepare succeeds" "$rc:$out" "0:"
expect_eq "mdevctl start -u UUID" "$(cat "$t/mdevctl.log" 2>/dev/null)" "start -u $UUID"
expect_eq "not through sysfs, not remembered as the hook's" "$(test -e "$types/$TYPE/create" && echo created)$(ls "$t/state")" ""
rm "$t/defined"

echo "# errors: one line naming the device and the reason, exit 1, nothing created"
list '"borrower1"' '[]'
out=$(hook prepare begin "$UUID") && rc=0 || rc=$?
echo "  $out"
expect_eq "borrowed by another host" "$rc:$out" \
	"1:farpass: remote device lender/0000:00:08.0 (mdev type $TYPE): busy (EBUSY), borrowed by borrower1"
expect_eq "... nothing created" "$(test -e "$types/$TYPE/create" && echo created)" ""
list '"borrower2"' '[]'
out=$(hook prepare begin "$UUID") && rc=0 || rc=$?
expect_eq "borrowed by this host (a lease still held): allowed" "$rc:$out" "0:"
list null '[{"host": "lender", "error": "connecting to 10.99.0.1:7450: Connection refused"}]'
out=$(hook prepare begin "$UUID") && rc=0 || rc=$?
echo "  $out"
expect_eq "lender down" "$rc:$out" \
	"1:farpass: remote device lender/0000:00:08.0 (mdev type $TYPE): its lender lender is unreachable: connecting to 10.99.0.1:7450: Connection refused"
touch "$t/agent-down"
out=$(hook prepare begin "$UUID") && rc=0 || rc=$?
echo "  $out"
expect_eq "this host's agent down" "$rc:$out" \
	"1:farpass: mdev type $TYPE: this host's farpass-agent does not answer (connecting to /run/farpass/agent.sock: Connection refused)"
rm "$t/agent-down"

echo "# UUIDs that are no farpass type's are libvirt's business; other operations do nothing"
out=$(hook prepare begin $OTHER) && rc=0 || rc=$?
expect_eq "unknown mdev UUID: exit 0, nothing created" "$rc:$out:$(test -e "$types/$TYPE/create" && echo created)" "0::"
domain_xml "$UUID" >"$t/domain.xml"
out=$(FARPASSCTL=$t/farpassctl FARPASS_SYSFS=$t/sys FARPASS_HOOK_STATE=$t/state "$HOOK" g migrate begin - <"$t/domain.xml" 2>&1) &&
	rc=0 || rc=$?
expect_eq "migrate begin: exit 0, no output (libvirt keeps the XML as it is)" "$rc:$out" "0:"

[ $fails -eq 0 ]
