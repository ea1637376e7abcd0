#!/bin/sh
# /init of the rig's L2 guests (busybox sh, packed into the L2 initramfs by vm-images/setup.sh l2).
#
# Prints markers a test greps on the serial console, lists the PCI devices (with drivers), then runs the
# script the L1 QEMU passes as `-fw_cfg name=opt/farpass/script,file=SCRIPT` (so a test needs no new
# initramfs), prints its exit code and powers off. Kernel command line: l2.stay=1 keeps the guest up
# (a shell on the console) instead of powering off, e.g. for hot-plug tests driven by libvirt.
# Under nested TCG each process the guest starts costs it a few tenths of a second: this script starts
# none but the mounts (shell builtins otherwise; the busybox applet links are made with the initramfs).
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmp /tmp
read -r up _ </proc/uptime
echo "L2-BOOTED uptime $up"

echo "L2-PCI:"
for d in /sys/bus/pci/devices/*; do
	drv=none
	! cd -P "$d/driver" 2>/dev/null || drv=${PWD##*/}
	read -r vendor <"$d/vendor"
	read -r device <"$d/device"
	read -r class <"$d/class"
	echo "  ${d##*/} $vendor:$device class=$class driver=$drv"
done
cd /

script=/sys/firmware/qemu_fw_cfg/by_name/opt/farpass/script/raw
if [ -r "$script" ]; then
	cp "$script" /tmp/script
	sh /tmp/script
	echo "L2-SCRIPT-RC $?"
fi
read -r up _ </proc/uptime
echo "L2-DONE uptime $up"
read -r cmdline </proc/cmdline
case " $cmdline " in
*" l2.stay=1 "*) exec setsid cttyhack sh ;;
esac
poweroff -f
