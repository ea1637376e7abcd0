#!/bin/bash
# The L1 libvirt root (mmdebstrap'ed by setup.sh rootfs) boots as a borrower's root: libvirtd answers,
# and the tools the later suites drive are there (mdevctl, fio, QEMU).
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

rig_up --borrowers 1 --l1-root rootfs
expect "libvirtd starts and answers virsh" rig_run borrower1 --timeout 120 -- \
	'libvirtd -d && for i in $(seq 120); do virsh -c qemu:///system version && exit 0; sleep 0.5; done; exit 1'
for tool in 'mdevctl --version' 'fio --version' 'qemu-system-x86_64 --version'; do
	expect "$tool" rig_run borrower1 -- "$tool | head -1"
done
