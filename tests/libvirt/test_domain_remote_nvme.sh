#!/bin/bash
# The lender's NVMe and e1000e NIC in one libvirt guest, driven by stock virsh and domain XML only (one
# lender, two borrowers booted from the L1 libvirt root with the Debian packages installed, running the
# packaged files: lv_expect_packaged on each; the guest is the rig's L2 kernel and initramfs, 256 MiB,
# booted directly, running a script passed by fw_cfg). `farpassctl mdev-uuid` gives each device the same
# UUID on both borrowers. The NIC's far end is an HTTP server on L0 (e2e_http_up), reached through the
# lender's user-mode network. Checks:
#  (a) domain XML: a domain with two <hostdev mode='subsystem' type='mdev' model='vfio-pci'>, the NVMe's
#      and the NIC's UUIDs, is defined and started on borrower1 (the hook creates both instances); its
#      guest's stock e1000e driver takes the NIC and moves a blob both ways (e2e_expect_nic_transfer: the
#      bytes checked on L0), its stock nvme driver takes the NVMe and fio randwrite+verify passes; on L0
#      the lender's backing file holds the guest's pattern at every block it wrote (and the checker fails
#      on unwritten data, another tag); while that guest has the NVMe borrowed, `virsh start` on borrower2
#      of another domain with the same NVMe hostdev fails with the hook's error naming the device and the
#      reason (busy, borrowed by borrower1), and creates nothing (no instance, the domain shut off);
#  (b) hot-remove: `virsh detach-device --live` removes the NVMe's hostdev from the running domain, whose
#      only mdev hostdev is then the NIC's, the guest sees its disk go; borrower1's agent gives the NVMe
#      back, the lender lists it free and reset it, and lists the NIC still borrowed by borrower1;
#  (c) hot-add: `virsh attach-device --live` adds the NVMe again, the guest's driver takes it (borrowed a
#      second time) and fio with a second tag passes; the backing file holds that pattern; the guest
#      powers off, both devices are given back (the NVMe twice, the NIC once) and the hook's instances
#      removed;
#  (d) cold migration: `virsh migrate --offline --persistent --undefinesource` (qemu+tcp) moves the
#      definition to borrower2 unchanged, both hostdevs in it; with the lender's agent stopped, `virsh
#      start` there fails with the hook's error naming the NVMe and the reason (its lender unreachable)
#      and creates no instance of either device; the agent started again restores both devices and
#      borrower2's agent lists them free; then `virsh start` works with no other step on borrower2 (the
#      hook creates the instances of the same UUIDs), the guest moves a blob both ways through the NIC
#      again (another upload tag, checked on L0) and reads back, with fio verify_only, every block
#      borrower1's guest wrote with the second tag;
#  (e) `virsh destroy` of that guest, which still has both devices, removes the hook's transient
#      instances and both are given back (the lender lists them free and reset them: the NVMe's CSTS.RDY
#      0, the NIC's receive control 0).
# The three kernel logs have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
# Prints each step's duration (a summary table, also `make demo`'s).
set -euo pipefail
. "$(dirname "$0")/../e2e/e2e-lib.sh"
. "$(dirname "$0")/libvirt-lib.sh"
lv_check_setup && e2e_check_setup || exit

B1=borrower1 B2=borrower2
NIC=$RIG_NIC_PCI
AG_LENT_ALSO=$NIC
RIG_LENDER_EXTRA=$RIG_NIC_LENDER_EXTRA
e2e_http_up 1
# Bounds for the guests' runs: three L1s, each running an L2 under TCG, on a loaded machine.
E2E_L2_TIMEOUT=2400
IMG=$(rig_lender_nvme_img)
# The guest's files: its script in $RIGDIR, which every L1 sees at the same path (read-only), its console
# in libvirt's log directory: the definition moves unchanged.
SCRIPT=$RIGDIR/g-script
CONSOLE=/var/log/libvirt/qemu/g-console.log

# start_fails VM DOMAIN LABEL REGEX: `virsh start` of DOMAIN in VM fails with an error matching REGEX (the
# hook's line, which libvirt puts in its error) and creates nothing (no instance of either device). Paused: a start the hook wrongly let
# through runs no guest.
start_fails() {
	local vm=$1 dom=$2 label=$3 out rc=0
	out=$(lv_virsh "$vm" start --paused "$dom" 2>&1) || rc=$?
	echo "$out"
	expect "$label: $vm: virsh start $dom fails" test "$rc" -ne 0
	expect "$label: ... its error names the device and the reason" grep -Eq "$4" <<<"$out"
	expect "$label: ... no instance was created" not lv_mdev_exists "$vm" "$U"
	expect "$label: ... of the NIC neither" not lv_mdev_exists "$vm" "$UN"
	expect_eq "$label: ... $dom is still shut off" "$(lv_virsh "$vm" domstate "$dom")" "shut off"
}

lv_step "rig: a lender and two borrowers (TCG L1 VMs, emulated NTBs), agents, libvirtd on the borrowers"
rig_up --borrowers 2 --l1-root debroot --lender-mem 1536 --borrower-mem 2048
ag_pki
expect "lender: farpass.ko loads (modprobe)" lv_fp_load lender
ag_lender_up ", \"peers\": [$(ag_peer_entry $B1 "$(ntb_pci lender 1)"), $(ag_peer_entry $B2 "$(ntb_pci lender 2)")]"
lv_expect_packaged lender
for b in $B1 $B2; do
	lv_host_up "$b" ", \"poll_ms\": 1000, $E2E_BORROWER_AGENT_CFG, \"peers\": [$(ag_peer_entry lender "$(ntb_pci "$b")")]"
	e2e_slow_upcalls "$b"
	lv_libvirtd_up "$b" --guests
done
lv_expect_type $B1
T=$LV_TYPE
U=$(ag_ctl $B1 mdev-uuid "$T")
lv_expect_type $B2
expect_eq "borrower2 knows the NVMe by the same UUID" "$(ag_ctl $B2 mdev-uuid "$LV_TYPE")" "$U"
lv_expect_type $B1 $NIC
TN=$LV_TYPE
UN=$(ag_ctl $B1 mdev-uuid "$TN")
lv_expect_type $B2 $NIC
expect_eq "borrower2 knows the NIC by the same UUID" "$(ag_ctl $B2 mdev-uuid "$LV_TYPE")" "$UN"
lv_note "lender's NVMe and NIC lent: mdev types $T, $TN"

# lender_borrowers: each device the lender lends and its borrower (null: free).
lender_borrowers() { ag_ctl lender --json list | jq -r '.devices[] | "\(.pci) \(.borrower)"' | sort | xargs; }

# The guest on borrower1: a transfer through the NIC (upload tag N1), fio with tag A, waits until its disk
# is gone (detach) and back (attach), fio with tag B, power-off.
tagA=$(e2e_tag) tagB=$(e2e_tag) tagN1=$(e2e_tag) tagN2=$(e2e_tag)
cat >"$SCRIPT" <<EOF
$(e2e_nic_up_script)
$(e2e_nic_transfer_script "$tagN1")
$(e2e_fio_script "$tagA")
echo "E2E-WAIT detach"
for i in \$(seq 900); do [ -e /sys/block/nvme0n1 ] || break; sleep 1; done
echo "E2E-NVME-DISKS after detach: \$(ls /sys/block | grep -c nvme)"
echo "E2E-WAIT attach"
for i in \$(seq 900); do [ -b /dev/nvme0n1 ] && break; sleep 1; done
echo "E2E-NVME-DISKS after attach: \$(ls /sys/block | grep -c nvme)"
$(e2e_fio_script "$tagB")
EOF
lv_domain_xml g 256 "$SCRIPT" "$CONSOLE" "$U" "$UN" >"$RIGDIR/g.xml"
lv_hostdev_xml "$U" >"$RIGDIR/hostdev.xml"
# Another domain with the same device, for borrower2 while borrower1's guest has it.
lv_domain_xml g2 256 "$SCRIPT" /var/log/libvirt/qemu/g2-console.log "$U" >"$RIGDIR/g2.xml"

lv_step "borrower1: virsh define + start of a domain with the remote NVMe and NIC as mdev <hostdev>s"
expect "borrower1: virsh define" lv_virsh $B1 define "$RIGDIR/g.xml"
expect "borrower1: virsh start g" lv_virsh $B1 start g ||
	{ tail -20 "$(lv_qemu_log $B1 g.log)"; exit 1; }
expect "(a) the hook created the NVMe's instance" lv_mdev_exists $B1 "$U"
expect "(a) ... and the NIC's" lv_mdev_exists $B1 "$UN"
E2E_L2_LOG=$(lv_qemu_log $B1 g-console.log)

lv_step "guest on borrower1: a transfer through the NIC, fio randwrite+verify on the NVMe (tag $tagA); borrower2's start refused"
# The guest's driver borrows the device when it enables it (bus mastering), before its fio.
expect "(a) borrower1's agent borrowed the device for the guest" ag_wait_log $B1 900 "borrowed lender/$LENDER_NVME"
expect "borrower2: virsh define g2 (the same device)" lv_virsh $B2 define "$RIGDIR/g2.xml"
start_fails $B2 g2 "(a) borrowed by borrower1" \
	"farpass: remote device lender/$LENDER_NVME \(mdev type $T\): busy \(EBUSY\), borrowed by $B1"
expect "borrower2: virsh undefine g2" lv_virsh $B2 undefine g2
expect "guest booted and ran its first fio jobs" e2e_l2_wait $B1 detach 1800
part1=$(tr -d '\r' <"$E2E_L2_LOG" | sed '/^E2E-WAIT detach/q')
expect "(a) the guest's stock e1000e driver bound the NIC" grep -qE '0x8086:0x10d3 .*driver=e1000e' <<<"$part1"
e2e_expect_nic_transfer "$part1" "$tagN1" "(a)"
e2e_expect_l2_nvme "$part1"
e2e_expect_fio_jobs "$part1"
e2e_expect_written "$IMG" "$tagA"
lv_note "NIC: a blob both ways (L0); tag $tagA: written by the guest, found in the lender's backing file"

lv_step "borrower1: virsh detach-device --live of the NVMe (hot-remove); the NIC stays"
expect "(b) virsh detach-device --live" lv_virsh $B1 detach-device g "$RIGDIR/hostdev.xml" --live
expect "(b) the running domain's only mdev hostdev left is the NIC's" \
	ntb_wait $B1 300 "[ \"\$($LV_VIRSH dumpxml g | xmllint --xpath \"//hostdev[@type='mdev']/source/address/@uuid\" -)\" = ' uuid=\"$UN\"' ]"
expect "(b) the guest saw its disk go" e2e_l2_wait $B1 attach 300
expect_eq "(b) guest: nvme disks after the detach" \
	"$(tr -d '\r' <"$E2E_L2_LOG" | sed -n 's/^E2E-NVME-DISKS after detach: //p')" 0
ag_expect_returned $B1 60 "(b)"
expect_eq "(b) the lender: the NVMe free, the NIC still borrowed by $B1" "$(lender_borrowers)" "$LENDER_NVME null $NIC $B1"
lv_note "NVMe returned to the lender and reset; the NIC still borrowed"

lv_step "borrower1: virsh attach-device --live (hot-add); guest fio (tag $tagB); guest powers off"
expect "(c) virsh attach-device --live" lv_virsh $B1 attach-device g "$RIGDIR/hostdev.xml" --live
out=$(lv_guest_finish $B1 g)
part2=$(sed -n '/^E2E-WAIT attach/,$p' <<<"$out")
expect_eq "(c) guest: nvme disks after the attach" "$(sed -n 's/^E2E-NVME-DISKS after attach: //p' <<<"$part2")" 1
e2e_expect_fio_jobs "$part2"
expect "(c) the guest ran its script and powered off" grep -q '^L2-SCRIPT-RC 0' <<<"$part2"
expect_eq "(c) the NVMe borrowed twice (boot, attach)" "$(ag_log $B1 | grep -c "borrowed lender/$LENDER_NVME")" 2
e2e_expect_written "$IMG" "$tagB"
# ag_expect_returned's wait matches the first give-back already: wait for the second here.
expect "(c) borrower1's agent gave the NVMe back a second time" ntb_wait lender 60 \
	"[ \$(grep -c 'gave back lender/$LENDER_NVME' $RIGDIR/$B1/agent.log) = 2 ]"
ag_expect_returned $B1 60 "(c)"
AG_LENT=$NIC ag_expect_returned $B1 60 "(c) the NIC:"
expect "(c) the hook removed its instances" ntb_wait $B1 30 "! test -e /sys/bus/mdev/devices/$U -o -e /sys/bus/mdev/devices/$UN"
lv_note "tag $tagB: written by the guest after the re-add, found in the lender's backing file"

lv_step "cold migration: virsh migrate --offline --persistent borrower1 -> borrower2"
expect "(d) virsh migrate --offline --persistent --undefinesource" \
	lv_virsh $B1 migrate --offline --persistent --undefinesource g "qemu+tcp://$(rig_vm_ip $B2)/system"
expect_eq "(d) borrower1 has no domain left" "$(lv_virsh $B1 list --all --name | sed '/^$/d')" ""
expect_eq "(d) borrower2 has g, defined and shut off" "$(lv_virsh $B2 domstate g)" "shut off"
expect_eq "(d) ... with both mdev hostdevs, the NVMe's and the NIC's" \
	"$(lv_virsh $B2 dumpxml --inactive g | xmllint --xpath "//hostdev[@type='mdev']/source/address/@uuid" - | xargs)" "uuid=$U uuid=$UN"
expect "(d) no instance on borrower2 before the start" not lv_mdev_exists $B2 "$U"
lv_note "definition moved unchanged (same mdev UUIDs, both hostdevs)"

lv_step "lender's agent stopped: virsh start on borrower2 refused; the agent started again"
expect "(d) lender: the agent stops (SIGTERM)" ag_stop lender
start_fails $B2 g "(d) lender's agent down" \
	"farpass: remote device lender/$LENDER_NVME \(mdev type $T\): its lender lender is unreachable: "
expect "(d) lender: the agent starts again" ag_start lender
expect "(d) lender: it restored the lent NVMe" ag_wait_log lender 5 "restored $LENDER_NVME"
expect "(d) ... and the NIC" ag_wait_log lender 5 "restored $NIC"
expect "(d) borrower2's agent reaches the lender again and lists both devices free" ntb_wait $B2 30 \
	"$FP_CTL --json list | jq -e '.unreachable == [] and ([.devices[] | select(.host == \"lender\" and .borrower == null) | .pci] | sort) == ([\"$LENDER_NVME\", \"$NIC\"] | sort)'"
lv_note "hook refused the start; lender's agent restarted, devices restored"

lv_step "borrower2: virsh start g; a transfer through the NIC; the guest reads back what borrower1's guest wrote (tag $tagB)"
# The guest's next program (the test's own step, not borrower2's): a transfer (upload tag N2), read the
# data back, then keep the devices until the test destroys the domain.
{
	e2e_nic_up_script
	e2e_nic_transfer_script "$tagN2"
	e2e_fio_script "$tagB" --read-back
	echo 'echo "E2E-WAIT destroy"; while :; do sleep 60; done'
} >"$SCRIPT"
expect "(d) borrower2: virsh start g" lv_virsh $B2 start g ||
	{ tail -20 "$(lv_qemu_log $B2 g.log)"; exit 1; }
expect "(d) the hook created the NVMe's instance on borrower2" lv_mdev_exists $B2 "$U"
expect "(d) ... and the NIC's" lv_mdev_exists $B2 "$UN"
E2E_L2_LOG=$(lv_qemu_log $B2 g-console.log)
expect "(d) the guest ran its fio read-back" e2e_l2_wait $B2 destroy "$E2E_L2_TIMEOUT"
out=$(tr -d '\r' <"$E2E_L2_LOG")
e2e_expect_nic_transfer "$out" "$tagN2" "(d) borrower2:"
e2e_expect_l2_nvme "$out"
e2e_expect_fio_jobs "$out"
lv_note "NIC: a blob both ways (L0); tag $tagB: every block read back and verified by the guest"

lv_step "borrower2: virsh destroy g while its guest has both devices"
expect "(e) borrower2: virsh destroy g" lv_virsh $B2 destroy g
expect "(e) the hook removed its transient instances" ntb_wait $B2 30 "! test -e /sys/bus/mdev/devices/$U -o -e /sys/bus/mdev/devices/$UN"
ag_expect_returned $B2 60 "(e)"
AG_LENT=$NIC ag_expect_returned $B2 60 "(e) the NIC:"
lv_note "instances removed, both devices returned to the lender and reset"

for vm in lender $B1 $B2; do
	expect_klog_clean $vm
done
lv_summary
