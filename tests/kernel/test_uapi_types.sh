#!/bin/bash
# /dev/farpass and the borrower's mdev types, on borrower1:
#  (a) VERSION first: an ioctl before it fails with EPROTO; a wrong version with EPROTONOSUPPORT (the
#      kernel's version is reported); non-root and root-without-CAP_SYS_ADMIN opens fail;
#  (b) ANNOUNCE_DEVICE makes a type appear on the NTB's PCI device (and in `mdevctl types`); an instance
#      can be created with a UUID, opened through VFIO (GET_INFO: PCI|RESET), and removed; WITHDRAW
#      removes the type; bad ioctls get the documented errno; a refused instance creation fails with the
#      errno expected, and rmmod of the module in use with EBUSY; a busy link defers type changes; the
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
expect "VERSION 2 is accepted" c version
expect "VERSION 1 fails with EPROTONOSUPPORT" c version --api 1 --expect EPROTONOSUPPORT
expect "VERSION 3 fails with EPROTONOSUPPORT" c version --api 3 --expect EPROTONOSUPPORT
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
expect "ANNOUNCE id 7" c announce --id 7 --lender lender --ntb "$NTB" --addr 0000:00:08.0 --expect ok
T=ntb_hw_epf-farpass-lender-7
expect_eq "one type on the parent" "$(fp_types $B)" "$T"
expect_eq "type name" "$(rig_run $B -- "cat $PARENT/mdev_supported_types/$T/name")" "lender 1b36:0010 (0000:00:08.0)"
expect_eq "device_api" "$(rig_run $B -- "cat $PARENT/mdev_supported_types/$T/device_api")" "vfio-pci"
expect_eq "available_instances" "$(rig_run $B -- "cat $PARENT/mdev_supported_types/$T/available_instances")" 1
rig_run $B -- "cat $PARENT/mdev_supported_types/$T/description"
MDEVCTL=$FARPASS_ROOTFS/usr/bin/mdevctl
expect "mdevctl is in the L1 rootfs ($MDEVCTL; setup.sh rootfs installs it)" test -x "$MDEVCTL"
# L1 runs L0's root, which has no mdevctl package: create its config directories (in L1's overlay).
out=$(rig_run $B -- "mkdir -p /etc/mdevctl.d/scripts.d/callouts /etc/mdevctl.d/scripts.d/notifiers
$MDEVCTL types")
echo "$out"
expect "mdevctl types lists the type with lender and device" grep -q "$T" <<<"$out"
expect "... and its name" grep -q "lender 1b36:0010" <<<"$out"

echo "# bad ioctls"
expect "duplicate id: EEXIST" c announce --id 7 --ntb "$NTB" --expect EEXIST
expect "unknown NTB: ENODEV" c announce --id 8 --ntb 0000:00:1f.7 --expect ENODEV
expect "argsz too small: EINVAL" c announce --id 8 --ntb "$NTB" --argsz 16 --expect EINVAL
expect "unknown flags: EINVAL" c announce --id 8 --ntb "$NTB" --flags 0x80 --expect EINVAL
expect "lender name with '-': EINVAL" c announce --id 8 --ntb "$NTB" --lender bad-name --expect EINVAL
expect "BAR size not a power of two: EINVAL" c announce --id 8 --ntb "$NTB" --bar0 12288 --expect EINVAL
expect "NTB name not NUL-terminated in its 32 bytes: EINVAL" c announce --id 8 --ntb "$(printf '0%.0s' {1..32})" --expect EINVAL
expect "a newer agent's larger struct with non-zero unknown bytes: E2BIG" \
	c announce --id 8 --ntb "$NTB" --tail 16 --tail-byte 1 --expect E2BIG
expect "unknown id: WITHDRAW fails with ENOENT" c withdraw --id 99 --expect ENOENT
expect_eq "still one type" "$(fp_types $B)" "$T"

echo "# an instance"
U=8f7c3ab0-5c6e-4e41-9d3e-000000000007
expect "create an instance with a UUID" rig_run $B -- "echo $U > $PARENT/mdev_supported_types/$T/create"
expect "it is an mdev of the type" rig_run $B -- "test -e /sys/bus/mdev/devices/$U && readlink /sys/bus/mdev/devices/$U/mdev_type | grep -q $T"
expect_eq "available_instances with the instance" "$(rig_run $B -- "cat $PARENT/mdev_supported_types/$T/available_instances")" 0
expect_eq "a second instance of the same remote device is refused: its probe's EUSERS" \
	"$(write_errno $PARENT/mdev_supported_types/$T/create 8f7c3ab0-5c6e-4e41-9d3e-000000000008)" EUSERS
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
out=$(c announce --id 9 --lender lender --ntb "$NTB" --addr 0000:00:09.0)
echo "$out"
expect_eq "ANNOUNCE while the link has an instance: deferred (flags=1)" "$out" "ok flags=1"
expect_eq "... the new type is not there yet" "$(fp_types $B)" "$T"
expect "remove the instance" rig_run $B -- "echo 1 > /sys/bus/mdev/devices/$U/remove && ! test -e /sys/bus/mdev/devices/$U"
expect "... then the deferred type appears" ntb_wait $B 10 "ls $PARENT/mdev_supported_types | grep -q farpass-lender-9"
expect_eq "two types" "$(fp_types $B | tr '\n' ' ')" "ntb_hw_epf-farpass-lender-7 ntb_hw_epf-farpass-lender-9 "
echo "# withdrawing a device while another device of the link has an instance is deferred"
U9=8f7c3ab0-5c6e-4e41-9d3e-000000000009
expect "create an instance of 9" rig_run $B -- "echo $U9 > $PARENT/mdev_supported_types/ntb_hw_epf-farpass-lender-9/create"
expect_eq "WITHDRAW 7: deferred (flags=1)" "$(c withdraw --id 7)" "ok flags=1"
expect_eq "... type 7 stays, with no available instance" "$(rig_run $B -- "cat $PARENT/mdev_supported_types/$T/available_instances")" 0
expect_eq "... and refuses instances: ENODEV" "$(write_errno $PARENT/mdev_supported_types/$T/create $U)" ENODEV
expect "... id 7 is not reusable until then: EEXIST" c announce --id 7 --ntb "$NTB" --expect EEXIST
expect "remove the instance of 9" rig_run $B -- "echo 1 > /sys/bus/mdev/devices/$U9/remove"
expect "... then type 7 goes away" ntb_wait $B 10 "! test -e $PARENT/mdev_supported_types/$T"
expect_eq "one type" "$(fp_types $B)" "ntb_hw_epf-farpass-lender-9"
expect "a larger struct whose unknown bytes are zero is accepted" c announce --id 7 --ntb "$NTB" --tail 16
expect "WITHDRAW 7" c withdraw --id 7
expect "WITHDRAW 9" c withdraw --id 9
expect_eq "no type left" "$(fp_types $B)" ""
for n in devices types instances vfio_open agent_files; do
	expect_eq "counters: $n" "$(fp_counter $B $n)" 0
done
expect "rmmod farpass" rig_run $B -- "rmmod farpass && ! test -e $PARENT/mdev_supported_types"
expect_klog_clean $B --also leak
