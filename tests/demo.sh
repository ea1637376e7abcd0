#!/bin/bash
# `make demo` (after make's setup and build targets): farpass end to end on the rig, by running the
# check-libvirt test of the whole flow, tests/libvirt/test_domain_remote_nvme.sh, in rig-out/demo. It
# boots a lender and two borrowers, lends the lender's NVMe and NIC, starts a libvirt guest with both on
# borrower1 (a download and upload through the NIC, fio on the NVMe), hot-removes and re-adds the NVMe
# (virsh detach-device/attach-device --live), cold-migrates the domain to borrower2 (virsh migrate
# --offline) where the guest uses the NIC again and reads its data back, and destroys it there (virsh
# destroy); borrower2's starts refused meanwhile (the device borrowed by borrower1, the lender's
# agent stopped) show the hook's errors. Each step is printed as it runs and checked, and it ends with a
# summary table (steps, where the data went, durations).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
export RIGDIR=${RIGDIR:-$top/rig-out/demo}
cat <<EOF
farpass demo: a PCIe device of one host used by a guest on another, over an (emulated) NTB.
Everything runs nested under TCG, so steps take minutes (about 15 in all; the first time also the
Debian packages for the hosts' root, as an operator installs them: make deb, 9.7 min here beside other work). Logs: $RIGDIR
(<vm>/console.log, <vm>/agent.log, <vm>/libvirt-qemu/g-console.log: the guest's console).
EOF
exec bash "$top/tests/libvirt/test_domain_remote_nvme.sh"
