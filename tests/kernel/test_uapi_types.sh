#!/bin/bash
# /dev/farpass and the borrower's mdev types, on borrower1:
#  (a) VERSION first: an ioctl before it fails with EPROTO; a wrong version with EPROTONOSUPPORT (the
#      kernel's version is reported); non-root and root-without-CAP_SYS_ADMIN opens fail;
#  (b) the mdev parent on the NTB's PCI device has no type before the first ANNOUNCE_DEVICE, which gives it
#      a type per slot of its lender (16, in `mdevctl types` too); the device fills its slot's type (name,
#      description, one available instance), the others are empty (no available instance, a description
#      that says so, creating an instance fails with ENODEV); an instance can be created with a UUID,
#      opened through VFIO (GET_INFO: PCI|RESET), and removed; bad ioctls get the documented errno
#      (another lender on the link: EINVAL, a filled slot: EADDRINUSE); a refused instance creation fails
#      with the errno expected, and rmmod of the module in use with EBUSY;
#  (c) with an instance of device 7 open, a device announced on the link is usable at once (its type has
#      an available instance, an instance of it is created and opened), and its withdrawal empties its
#      slot and leaves 7's instance, and its user, untouched; the parent is never registered again; the
#      kernel log has no warning, BUG, oops, RCU stall, hung task, DMAR fault or leak report.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built

rig_up --borrowers 1
B=borrower1
NTB=$(ntb_pci $B)
PARENT=/sys/class/mdev_bus/$NTB
fp_load $B
c() { fp_client $B "$@"; }
# write_errno FILE TEXT: write TEXT to FILE in borrower1 (one write); prints "ok" or the errno's name.
write_errno() {
	rig_run $B -- "python3 -c '
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
try:
    os.write(fd, sys.argv[2].encode())
    print(\"ok\")
except OSError as e:
    print(errno.errorcode[e.errno])' $1 $2"
}

echo "# (a) version handshake and access"
expect "/dev/farpass is root-only (0600)" rig_run $B -- "test \"\$(stat -c %a:%U /dev/farpass)\" = 600:root"
expect "an ioctl before VERSION fails with EPROTO" c announce --no-version --id 1 --expect EPROTO
expect "VERSION 4 is accepted" c version
expect "VERSION 3 fails with EPROTONOSUPPORT" c version --api 3 --expect EPROTONOSUPPORT
expect "VERSION 5 fails with EPROTONOSUPPORT" c version --api 5 --expect EPROTONOSUPPORT
expect "VERSION with argsz too small fails with EINVAL" c version --argsz 8 --expect EINVAL
expect "an unknown ioctl number fails with ENOTTY" c unknown-ioctl --expect ENOTTY
expect "UPCALL_GET with nothing queued, non-blocking: EAGAIN" c upcall-get --nonblock --expect EAGAIN
expect "a non-root user cannot open it (EACCES)" \
	rig_run $B -- "setpriv --reuid=65534 --regid=65534 --clear-groups $FP_CLIENT open --expect EACCES"
expect "root without CAP_SYS_ADMIN cannot open it (EPERM)" \
	rig_run $B -- "setpriv --bounding-set=-sys_admin --inh-caps=-sys_admin $FP_CLIENT open --expect EPERM"

echo "# (b) types and instances"
expect "the mdev parent is on the NTB's PCI device, with no type yet" \
	rig_run $B -- "test -d $PARENT/mdev_supported_types && test -z \"\$(ls $PARENT/mdev_supported_types)\""
expect "ANNOUNCE id 7 at slot 2" c announce --id 7 --lender lender --ntb "$NTB" --addr 0000:00:08.0 --irq-slot 2 --expect ok
# The mdev core logs each (un)registration of a parent.
mdev_log() { rig_run $B -- "dmesg | grep 'MDEV: Registered\|MDEV: Unregistering'" || true; }
registrations=$(mdev_log)
T=ntb_hw_epf-farpass-lender-2
TYPES=$PARENT/mdev_supported_types
ALL=$(for i in $(seq 0 15); do echo ntb_hw_epf-farpass-lender-$i; done | sort)
expect_eq "16 types on the parent, one per slot of the lender" "$(fp_types $B)" "$ALL"
expect_eq "type name: the lender and the slot" "$(rig_run $B -- "cat $TYPES/$T/name")" "lender slot 2"
expect_eq "device_api" "$(rig_run $B -- "cat $TYPES/$T/device_api")" "vfio-pci"
expect_eq "available_instances" "$(rig_run $B -- "cat $TYPES/$T/available_instances")" 1
expect_eq "its description names the device" "$(rig_run $B -- "cat $TYPES/$T/description")" \
	"lender 1b36:0010 (0000:00:08.0): class 010802, via NTB $NTB, farpass id 7"
E=ntb_hw_epf-farpass-lender-5
expect_eq "an empty slot's type: no available instance" "$(rig_run $B -- "cat $TYPES/$E/available_instances")" 0
expect_eq "... a description that says so" "$(rig_run $B -- "cat $TYPES/$E/description")" \
	"empty: lender lender lends no device at slot 5 to this host (NTB $NTB)"
expect_eq "... and creating an instance fails: its probe's ENODEV" \
	"$(write_errno $TYPES/$E/create 8f7c3ab0-5c6e-4e41-9d3e-000000000005)" ENODEV
expect "... leaving none" rig_run $B -- "! test -e /sys/bus/mdev/devices/8f7c3ab0-5c6e-4e41-9d3e-000000000005"
MDEVCTL=$FARPASS_ROOTFS/usr/bin/mdevctl
expect "mdevctl is in the L1 rootfs ($MDEVCTL; setup.sh rootfs installs it)" test -x "$MDEVCTL"
# L1 runs L0's root, which has no mdevctl package: create its config directories (in L1's overlay).
out=$(rig_run $B -- "mkdir -p /etc/mdevctl.d/scripts.d/callouts /etc/mdevctl.d/scripts.d/notifiers
$MDEVCTL types")
echo "$out"
expect "mdevctl types lists the type" grep -q "$T" <<<"$out"
expect "... with the device in its description" grep -q "Description: lender 1b36:0010 (0000:00:08.0)" <<<"$out"

echo "# bad ioctls"
expect "duplicate id: EEXIST" c announce --id 7 --ntb "$NTB" --irq-slot 3 --expect EEXIST
expect "another lender's device on the link: EINVAL" c announce --id 8 --lender lender2 --ntb "$NTB" --irq-slot 3 --expect EINVAL
expect "a slot that holds another device: EADDRINUSE" c announce --id 8 --ntb "$NTB" --irq-slot 2 --expect EADDRINUSE
expect "unknown NTB: ENODEV" c announce --id 8 --ntb 0000:00:1f.7 --expect ENODEV
expect "argsz too small: EINVAL" c announce --id 8 --ntb "$NTB" --argsz 16 --expect EINVAL
expect "unknown flags: EINVAL" c announce --id 8 --ntb "$NTB" --flags 0x80 --expect EINVAL
expect "lender name with '-': EINVAL" c announce --id 8 --ntb "$NTB" --lender bad-name --expect EINVAL
expect "BAR size not a power of two: EINVAL" c announce --id 8 --ntb "$NTB" --bar0 12288 --expect EINVAL
expect "NTB name not NUL-terminated in its 32 bytes: EINVAL" c announce --id 8 --ntb "$(printf '0%.0s' {1..32})" --expect EINVAL
expect "a newer agent's larger struct with non-zero unknown bytes: E2BIG" \
	c announce --id 8 --ntb "$NTB" --tail 16 --tail-byte 1 --expect E2BIG
expect "unknown id: WITHDRAW fails with ENOENT" c withdraw --id 99 --expect ENOENT
expect_eq "still the 16 types" "$(fp_types $B)" "$ALL"
expect_eq "... slot 3 empty" "$(rig_run $B -- "cat $TYPES/ntb_hw_epf-farpass-lender-3/available_instances")" 0

echo "# an instance"
U=8f7c3ab0-5c6e-4e41-9d3e-000000000007
expect "create an instance with a UUID" rig_run $B -- "echo $U > $TYPES/$T/create"
expect "it is an mdev of the type" rig_run $B -- "test -e /sys/bus/mdev/devices/$U && readlink /sys/bus/mdev/devices/$U/mdev_type | grep -q $T"
expect_eq "available_instances with the instance" "$(rig_run $B -- "cat $TYPES/$T/available_instances")" 0
expect_eq "a second instance of the same remote device is refused: its probe's EUSERS" \
	"$(write_errno $TYPES/$T/create 8f7c3ab0-5c6e-4e41-9d3e-000000000008)" EUSERS
expect "VFIO: GET_INFO advertises PCI and RESET" c vfio-info $U --expect ok
expect_eq "counters: instances" "$(fp_counter $B instances)" 1
expect_eq "counters: vfio_open back to 0 after close" "$(fp_counter $B vfio_open)" 0
rig_run $B -- "$FP_CLIENT vfio-info $U --hold 8 </dev/null >/tmp/hold.log 2>&1 &"
expect "a VM-like user holds the device open" ntb_wait $B 10 "grep -qx 'vfio_open 1' $FP_DBG/counters"
# (delete_module itself: kmod's rmmod refuses a module with references before asking the kernel)
expect_eq "delete_module(farpass) is refused at once while it is open (in use): EWOULDBLOCK, which is EAGAIN" \
	"$(rig_run $B --timeout 10 -- "python3 -c 'import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(176, b\"farpass\", os.O_NONBLOCK)  # SYS_delete_module
print(\"ok\" if r == 0 else errno.errorcode[ctypes.get_errno()])'")" EAGAIN
expect "... and farpass stays loaded" rig_run $B -- "lsmod | grep -q '^farpass '"
expect "... and works again once it is closed" ntb_wait $B 20 "grep -qx 'vfio_open 0' $FP_DBG/counters"
expect "WITHDRAW with an instance: EBUSY" c withdraw --id 7 --expect EBUSY

echo "# (c) a device announced while another one of the link is open: usable at once; withdrawn, the other untouched"
rig_run $B -- "$FP_CLIENT vfio-info $U --hold 120 </dev/null >/tmp/hold7.log 2>&1 & echo \$! >/tmp/hold7.pid"
expect "a VM-like user holds 7's instance open" ntb_wait $B 10 "grep -qx 'vfio_open 1' $FP_DBG/counters"
expect "ANNOUNCE id 9 at slot 5 while 7's instance is open" \
	c announce --id 9 --lender lender --ntb "$NTB" --addr 0000:00:09.0 --irq-slot 5 --expect ok
expect_eq "... its type has an available instance at once" "$(rig_run $B -- "cat $TYPES/$E/available_instances")" 1
expect_eq "... and names it" "$(rig_run $B -- "cat $TYPES/$E/description")" \
	"lender 1b36:0010 (0000:00:09.0): class 010802, via NTB $NTB, farpass id 9"
U9=8f7c3ab0-5c6e-4e41-9d3e-000000000009
expect "... an instance of it is created" rig_run $B -- "echo $U9 > $TYPES/$E/create"
expect "... and opened through VFIO (GET_INFO: PCI|RESET)" c vfio-info $U9 --expect ok
expect "remove 9's instance" rig_run $B -- "echo 1 > /sys/bus/mdev/devices/$U9/remove && ! test -e /sys/bus/mdev/devices/$U9"
expect "WITHDRAW 9 while 7's instance is open" c withdraw --id 9 --expect ok
expect_eq "... slot 5's type stays, with no available instance" "$(rig_run $B -- "cat $TYPES/$E/available_instances")" 0
expect_eq "... and refuses instances again: ENODEV" "$(write_errno $TYPES/$E/create $U9)" ENODEV
expect "... 7's instance is untouched: it exists, its user still has it open" \
	rig_run $B -- "test -e /sys/bus/mdev/devices/$U && grep -qx 'vfio_open 1' $FP_DBG/counters && kill -0 \$(cat /tmp/hold7.pid)"
expect_eq "... the parent was not registered again since the first ANNOUNCE" "$(mdev_log)" "$registrations"
expect "the slot can take the lender's next device there" \
	c announce --id 10 --lender lender --ntb "$NTB" --addr 0000:00:0a.0 --irq-slot 5 --expect ok
expect "WITHDRAW 10" c withdraw --id 10
rig_run $B -- "kill \$(cat /tmp/hold7.pid)"
expect "7's user closes it" ntb_wait $B 20 "grep -qx 'vfio_open 0' $FP_DBG/counters"
expect "remove 7's instance" rig_run $B -- "echo 1 > /sys/bus/mdev/devices/$U/remove && ! test -e /sys/bus/mdev/devices/$U"
expect "a larger struct whose unknown bytes are zero is accepted" c announce --id 8 --ntb "$NTB" --irq-slot 3 --tail 16
expect "WITHDRAW 7" c withdraw --id 7
expect "WITHDRAW 8" c withdraw --id 8
expect_eq "the types stay, all empty" \
	"$(rig_run $B -- "cat $TYPES/*/available_instances | sort -u")" 0
expect_eq "counters: types (16 per parent) while the NTB is bound" "$(fp_counter $B types)" 16
for n in devices instances vfio_open agent_files; do
	expect_eq "counters: $n" "$(fp_counter $B $n)" 0
done
expect "rmmod farpass" rig_run $B -- "rmmod farpass && ! test -e $PARENT/mdev_supported_types"
expect_klog_clean $B --also leak
