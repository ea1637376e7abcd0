#!/bin/sh
# /init of the rig's L2 guests (busybox sh, packed into the L2 initramfs by vm-images/setup.sh l2).
#
# Prints markers a test greps on the serial console, lists the PCI devices (with drivers), then runs the
# script the L1 QEMU passes as `-fw_cfg name=opt/farpass/script,file=SCRIPT` (so a test needs no new
# initramfs), prints its exit code and powers off. Kernel command line: l2.stay=1 keeps the guest up
# (a shell on the console) instead of powering off, e.g. for hot-plug tests driven by libvirt.
export PATH=/bin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmp /tmp
echo "L2-BOOTED uptime $(cut -d' ' -f1 /proc/uptime)"

echo "L2-PCI:"
for d in /sys/bus/pci/devices/*; do
	drv=$(basename "$(readlink "$d/driver" 2>/dev/null)" 2>/dev/null)
	echo "  ${d##*/} $(cat "$d/vendor"):$(cat "$d/device") class=$(cat "$d/class") driver=${drv:-none}"
done

script=/sys/firmware/qemu_fw_cfg/by_name/opt/farpass/script/raw
if [ -r "$script" ]; then
	cp "$script" /tmp/script
	sh /tmp/script
	echo "L2-SCRIPT-RC $?"
fi
echo "L2-DONE uptime $(cut -d' ' -f1 /proc/uptime)"
case " $(cat /proc/cmdline) " in
*" l2.stay=1 "*) exec setsid cttyhack sh ;;
esac
poweroff -f
