#!/bin/bash
# libvirt-hooks/qemu.d/farpass on a fake sysfs (FARPASS_SYSFS) with the real farpassctl's mdev-uuid and
# the agent's answers (status, list) from files: which mdevs it creates for a domain's XML, what it
# removes at release (an instance already gone: nothing said; a removal that fails: said, the release still
# succeeds), and the one-line errors libvirt would show (borrowed elsewhere, lender down, an empty slot,
# agent down; a farpassctl or mdevctl that never answers, ended at the hook's bound even when deaf to
# SIGTERM); a domain with two farpass devices, one of them borrowed elsewhere, gets no instance of either. The XML is read as XML: mdev hostdevs in comments, CDATA or metadata and a pci hostdev with
# look-alike attributes are no devices, any attribute order, quoting and spacing is; XML that is not
# well-formed and an address that is not a UUID are errors. The same paths run in the rig under libvirt in
# tests/libvirt/.
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
TYPE=ntb_hw_epf-farpass-lender-3 # slot 3 of lender
UUID=$("$CTL" mdev-uuid $TYPE)
types=$t/sys/class/mdev_bus/$NTB/mdev_supported_types
mkdir -p "$types/$TYPE" "$types/mtty-1" "$t/sys/bus/mdev/devices"

# The agent: farpassctl with status/list answered from $t/status.json and $t/list.json (or exit 3), or
# never (with $t/hang-status or $t/hang-list; deaf to SIGTERM too with $t/deaf).
cat >"$t/farpassctl" <<EOF
#!/bin/bash
[ "\$1" = mdev-uuid ] && exec "$CTL" "\$@"
[ -e "$t/agent-down" ] && { echo '{"error": {"code": 2, "errno": 111, "message": "connecting to /run/farpass/agent.sock: Connection refused"}}'; exit 3; }
if [ -e "$t/hang-\$2" ]; then
	[ -e "$t/deaf" ] && trap '' TERM
	sleep 600
fi
cat "$t/\$2.json"
EOF
chmod +x "$t/farpassctl"
cat >"$t/status.json" <<'EOF'
{"host": "borrower2", "remote_devices": [{"lender": "lender", "pci": "0000:00:08.0", "id": 123456, "ntb": "0000:00:05.0", "slot": 3, "announced": true, "borrowed": false}]}
EOF
# mdevctl: the UUIDs in $t/defined are defined; `start` is logged to $t/mdevctl.log (or never ends, with
# $t/hang-start).
cat >"$t/mdevctl" <<EOF
#!/bin/bash
case "\$1" in
list) grep -x "\$4" "$t/defined" 2>/dev/null || true ;;
start) [ -e "$t/hang-start" ] && sleep 600; echo "\$*" >>"$t/mdevctl.log" ;;
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
hook() { # hook OP SUBOP UUID...: run_hook on the XML of a domain with mdev hostdevs UUID...
	domain_xml "${@:3}" >"$t/domain.xml"
	run_hook "$1" "$2"
}
run_hook() { # run_hook OP SUBOP: runs the hook as libvirtd does on $t/domain.xml; prints stderr, returns its status
	rm -f "$types/$TYPE/create"
	# From a file, not a pipe: the hook need not read all of it (libvirtd ignores EPIPE), and a pipe's
	# writer would then die of SIGPIPE now and then, failing the pipeline. The outer timeout only keeps a
	# hung hook from hanging this test (its status would then be 124 and fail the check).
	# shellcheck disable=SC2069 # stderr is the result, stdout (XML for libvirt) is not looked at here
	FARPASSCTL=$t/farpassctl MDEVCTL=$t/mdevctl FARPASS_SYSFS=$t/sys FARPASS_HOOK_STATE=$t/state \
		FARPASS_HOOK_TIMEOUT=${HOOK_TIMEOUT:-30} timeout 60 "$HOOK" g "$1" "$2" - <"$t/domain.xml" 2>&1 >/dev/null
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
hook prepare begin "$UUID" >/dev/null
out=$(hook release end "$UUID") && rc=0 || rc=$?
expect_eq "an instance of the hook's gone before release: release says nothing" "$rc:$out" "0:"
expect_eq "... and forgets it" "$(ls "$t/state")" ""
hook prepare begin "$UUID" >/dev/null
mkdir -p "$t/sys/bus/mdev/devices/$UUID/remove" # a remove that cannot be written
out=$(hook release end "$UUID") && rc=0 || rc=$?
expect_eq "a removal that fails is said, the release still succeeds" "$rc:$out" \
	"0:farpass: domain g: removing remote device mdev $UUID failed"
rm -rf "$t/sys/bus/mdev/devices/$UUID" "$t/state/$UUID"

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
refused() { # refused LABEL WANT: prepare of $UUID ends with WANT (status:stderr) and creates nothing
	out=$(hook prepare begin "$UUID") && rc=0 || rc=$?
	echo "  $out"
	expect_eq "$1" "$rc:$out" "$2"
	expect_eq "... nothing created" "$(test -e "$types/$TYPE/create" && echo created)" ""
}
list '"borrower1"' '[]'
refused "borrowed by another host" \
	"1:farpass: remote device lender/0000:00:08.0 (mdev type $TYPE): busy (EBUSY), borrowed by borrower1"
list '"borrower2"' '[]'
out=$(hook prepare begin "$UUID") && rc=0 || rc=$?
expect_eq "borrowed by this host (a lease still held): allowed" "$rc:$out" "0:"
list null '[{"host": "lender", "error": "connecting to 10.99.0.1:7450: Connection refused"}]'
refused "lender down" \
	"1:farpass: remote device lender/0000:00:08.0 (mdev type $TYPE): its lender lender is unreachable: connecting to 10.99.0.1:7450: Connection refused"
touch "$t/agent-down"
refused "this host's agent down" \
	"1:farpass: mdev type $TYPE: this host's farpass-agent does not answer (connecting to /run/farpass/agent.sock: Connection refused)"
rm "$t/agent-down"
cp "$t/status.json" "$t/status.saved"
jq -c '.remote_devices[0].slot = 4' "$t/status.saved" >"$t/status.json" # the agent has nothing in slot 3
refused "an empty slot's type" \
	"1:farpass: mdev type $TYPE: an empty slot: lender lends this host no device at slot 3 (farpassctl status)"
mv "$t/status.saved" "$t/status.json"

echo "# a hung agent or mdevctl: the hook gives up after FARPASS_HOOK_TIMEOUT s, one line, exit 1"
list null '[]'
hang() { # hang WHAT...: prepare with $t/WHAT... present, bound 2 s; prints "status:stderr:created"
	local f out rc
	for f in "$@"; do touch "$t/$f"; done
	out=$(HOOK_TIMEOUT=2 hook prepare begin "$UUID") && rc=0 || rc=$?
	for f in "$@"; do rm "$t/$f"; done
	echo "$rc:$out:$(test -e "$types/$TYPE/create" && echo created)"
}
expect_eq "farpassctl status hangs" "$(hang hang-status)" \
	"1:farpass: mdev type $TYPE: this host's farpass-agent (farpassctl status) did not answer in 2 s:"
expect_eq "farpassctl list hangs" "$(hang hang-list)" \
	"1:farpass: remote device lender/0000:00:08.0 (mdev type $TYPE): this host's farpass-agent (farpassctl list) did not answer in 2 s:"
expect_eq "farpassctl list hangs, deaf to SIGTERM (killed 5 s later)" "$(hang hang-list deaf)" \
	"1:farpass: remote device lender/0000:00:08.0 (mdev type $TYPE): this host's farpass-agent (farpassctl list) did not answer in 2 s:"
echo "$UUID" >"$t/defined"
expect_eq "mdevctl start hangs" "$(hang hang-start)" \
	"1:farpass: remote device mdev $UUID (type $TYPE): mdevctl start did not answer in 2 s:"
rm "$t/defined"

echo "# the domain XML is read as XML: only /domain/devices/hostdev[@type='mdev']/source/address/@uuid"
xml() { # xml BODY: $t/domain.xml, a domain (with namespace prefix app declared) whose content is BODY
	printf "<domain type='kvm' xmlns:app='http://example.org/app'><name>g</name>%s</domain>\n" "$1" >"$t/domain.xml"
}
prepared() { # prepared: prepare on $t/domain.xml; prints "status:stderr:UUID written to create"
	local out rc
	out=$(run_hook prepare begin) && rc=0 || rc=$?
	echo "$rc:$out:$(cat "$types/$TYPE/create" 2>/dev/null)"
}
MDEV="<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='$UUID'/></source></hostdev>"
xml "<devices><!-- $MDEV --></devices>"
expect_eq "an mdev hostdev in a comment is no device" "$(prepared)" "0::"
xml "<metadata><app:x><![CDATA[$MDEV]]></app:x></metadata><devices/>"
expect_eq "... nor one in CDATA" "$(prepared)" "0::"
xml "<metadata><app:vm><devices>$MDEV</devices></app:vm></metadata><devices/>"
expect_eq "... nor one in namespaced metadata" "$(prepared)" "0::"
xml "<devices><hostdev mode='subsystem' type='pci' app:was=\"type='mdev'\"><source><address domain='0' bus='1' slot='0' function='0' app:uuid='$UUID'/></source></hostdev></devices>"
expect_eq "... nor a pci hostdev whose other attributes read type='mdev' and uuid='UUID'" "$(prepared)" "0::"
xml "<devices><hostdev model=\"vfio-pci\" type = \"mdev\"
 mode=\"subsystem\"><source><address uuid =
 \"${UUID^^}\" /></source></hostdev></devices>"
expect_eq "attributes in another order, quoting and spacing, an upper-case UUID: created" "$(prepared)" "0::$UUID"
domain_xml "$UUID" | head -n -1 >"$t/domain.xml"
out=$(prepared)
echo "  ${out#*:}"
expect_eq "XML that is not well-formed: exit 1, one line, nothing created" \
	"$(sed -E 's/\(xmllint: -:[0-9]+: parser error : [^\n]+\)/(xmllint: ...)/' <<<"$out")" \
	"1:farpass: domain g: the domain XML on stdin is not well-formed (xmllint: ...):"
out=$(run_hook release end) && rc=0 || rc=$?
expect_eq "... at release too" "$rc:${out%% (xmllint*}" "1:farpass: domain g: the domain XML on stdin is not well-formed"
xml "<devices><hostdev mode='subsystem' type='mdev'><source><address uuid='../../class/mdev_bus'/></source></hostdev></devices>"
expect_eq "an mdev address that is not a UUID: exit 1, one line" "$(prepared)" \
	"1:farpass: domain g: an mdev hostdev's address uuid is not a UUID: '../../class/mdev_bus':"

echo "# UUIDs that are no farpass type's are libvirt's business; other operations do nothing"
out=$(hook prepare begin $OTHER) && rc=0 || rc=$?
expect_eq "unknown mdev UUID: exit 0, nothing created" "$rc:$out:$(test -e "$types/$TYPE/create" && echo created)" "0::"
domain_xml "$UUID" >"$t/domain.xml"
out=$(FARPASSCTL=$t/farpassctl FARPASS_SYSFS=$t/sys FARPASS_HOOK_STATE=$t/state "$HOOK" g migrate begin - <"$t/domain.xml" 2>&1) &&
	rc=0 || rc=$?
expect_eq "migrate begin: exit 0, no output (libvirt keeps the XML as it is)" "$rc:$out" "0:"

echo "# a domain with two farpass devices: both checked before either is created"
TYPE2=ntb_hw_epf-farpass-lender-4
UUID2=$("$CTL" mdev-uuid $TYPE2)
mkdir -p "$types/$TYPE2"
jq -c '.remote_devices += [.remote_devices[0] | .pci = "0000:00:09.0" | .slot = 4 | .id = 7]' "$t/status.json" >"$t/status.two"
mv "$t/status.two" "$t/status.json"
list2() { # list2 BORROWER-OF-THE-SECOND|null
	printf '{"devices": [{"host": "lender", "pci": "0000:00:08.0", "borrower": null}, {"host": "lender", "pci": "0000:00:09.0", "borrower": %s}], "unreachable": []}\n' "$1" >"$t/list.json"
}
created() { cat "$types/$TYPE/create" "$types/$TYPE2/create" 2>/dev/null | xargs; }
list2 '"borrower1"'
out=$(hook prepare begin "$UUID" "$UUID2") && rc=0 || rc=$?
expect_eq "the second borrowed by another host: exit 1, the error names it" "$rc:$out" \
	"1:farpass: remote device lender/0000:00:09.0 (mdev type $TYPE2): busy (EBUSY), borrowed by borrower1"
expect_eq "... no instance created, of the first device either" "$(created)" ""
list2 null
out=$(hook prepare begin "$UUID" "$UUID2") && rc=0 || rc=$?
expect_eq "both free: prepare succeeds, creates both" "$rc:$out:$(created)" "0::$UUID $UUID2"

[ $fails -eq 0 ]
