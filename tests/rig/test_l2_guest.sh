#!/bin/bash
# The rig's L2 guest: the project's small kernel and initramfs boot under the stock QEMU inside a
# borrower L1 (nested TCG), find an NVMe controller with their stock nvme driver, and run the script
# the L1 passes in through fw_cfg.
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

rig_up --borrowers 1
vmdir=$(rig_vm_dir borrower1)
printf '%s\n' 'grep -q nvme0n1 /proc/partitions && echo L2-SAW-NVME-DISK' >"$vmdir/l2-script"
out=$(rig_run borrower1 --timeout 300 -- "set -e; cd /tmp; truncate -s 64M disk.img
timeout 240 qemu-system-x86_64 -M q35 -accel tcg -m 256 -nodefaults -display none -serial stdio -no-reboot \
	-kernel $FARPASS_L2_KERNEL -initrd $FARPASS_L2_INITRD -append 'console=ttyS0 quiet panic=-1' \
	-drive file=disk.img,if=none,id=disk,format=raw -device nvme,drive=disk,serial=l2 \
	-fw_cfg name=opt/farpass/script,file=$vmdir/l2-script | tr -d '\r'")
printf '%s\n' "$out" | grep -E '^L2-|nvme' | sed 's/^/    L2> /'
expect "L2 booted" grep -q '^L2-BOOTED' <<<"$out"
expect "L2's nvme driver bound the controller" grep -qE '0x1b36:0x0010 .*driver=nvme' <<<"$out"
expect "L2 saw the namespace as a disk" grep -q '^L2-SAW-NVME-DISK' <<<"$out"
expect "L2 ran the fw_cfg script and powered off" grep -q '^L2-SCRIPT-RC 0' <<<"$out"
