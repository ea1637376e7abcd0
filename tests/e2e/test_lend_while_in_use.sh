#!/bin/bash
# Issue 16, "devices come and go while others are in use", on one link: the lender has two NVMe
# controllers (RIG_LENDER_NVMES=2, each with its own backing file on L0) and lends only the first; guest 1
# of borrower1 boots with it through its farpass mdev and waits before its fio jobs, its stock nvme driver
# bound (the device borrowed, the instance open). Then:
#  (a) the lender lends the second NVMe: borrower1's agent announces it into its slot's mdev type, which
#      names it and has an available instance while guest 1 holds the first (the link's
#      mdev parent was not registered again);
#  (b) guest 2 boots with an instance of it and runs fio with verify (e2e_expect_guest_fio), its data in the
#      second backing file on L0, the canary written over both before the guests everywhere else; its
#      shutdown gives the device back;
#  (c) its instance removed, the lender unlends the second NVMe: borrower1's agent withdraws it, its slot's
#      type stays, empty (no available instance, a description that says so); guest 1's device is still
#      borrowed, its instance still there;
#  (d) guest 1, which used the first NVMe through (a)-(c), then runs its fio with verify, its data in the
#      first backing file; its device was borrowed once and given back once (borrower1's agent log), and
#      the lender lists it free, on vfio-pci, bus master off, the controller reset;
#  (e) the kernel logs of the lender and borrower1 have no warning, BUG, oops, RCU stall, hung task or
#      DMAR fault.
set -euo pipefail
export RIG_LENDER_NVMES=2
. "$(dirname "$0")/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit

B=borrower1
PCI1=$(rig_lender_nvme_pci 0) PCI2=$(rig_lender_nvme_pci 1)
IMG1=$(rig_lender_nvme_img 0) IMG2=$(rig_lender_nvme_img 1)
TAG1=$(e2e_tag) TAG2=$(e2e_tag)
AG_LENT=$PCI1
export AG_LENT_ALSO=
# Short jobs, long bounds: two guests share borrower1's one TCG thread.
E2E_L2_TIMEOUT=2400
E2E_REGIONS=(4096:$((16 << 20)):$((512 << 10)) 131072:$((64 << 20)):$((1 << 20)))
U1=8f7c3ab0-5c6e-4e41-9d3e-00000000e1a1
e2e_remote_up $B "$U1" 1536
NTB=$(ntb_pci $B)
TYPES=/sys/class/mdev_bus/$NTB/mdev_supported_types
# The mdev core logs each (un)registration of a parent: none may follow the first device's announcement.
mdev_log() { rig_run $B -- "dmesg | grep 'MDEV: Registered\|MDEV: Unregistering'" || true; }
registrations=$(mdev_log)

e2e_canary "$IMG1"
expect "L0: the canary written over $(basename "$IMG2") too" \
	python3 "$E2E_LIB/check-pattern.py" --fill "$IMG2" "$E2E_CANARY"

t0=$SECONDS
E2E_L2_NAME=g1 e2e_l2_start $B 256M "$(e2e_fio_script "$TAG1" --pause)" -device "vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U1"
LOG1=$E2E_L2_LOG
E2E_L2_LOG=$LOG1 E2E_L2_NAME=g1 expect "guest 1 booted with the first NVMe and waits before its fio jobs" \
	e2e_l2_wait $B fio $E2E_L2_TIMEOUT
echo "guest 1 booted in $((SECONDS - t0)) s"
expect_eq "the lender: the first NVMe borrowed by $B" \
	"$(ag_ctl lender --json list | jq -r --arg p "$PCI1" '.devices[] | select(.pci == $p) | .borrower')" $B

echo "# (a) the lender lends its second NVMe while guest 1 uses the first"
expect "lender: farpassctl lend $PCI2" ag_ctl lender lend "$PCI2"
t1=$SECONDS
T2=
for _ in $(seq 30); do
	T2=$(ag_type_of $B "$PCI2")
	[ -n "$T2" ] && break
	sleep 1
done
expect "(a) $B: its slot's type names it: $T2 ($((SECONDS - t1)) s after the lend)" test -n "$T2"
expect_eq "(a) ... with an available instance" "$(rig_run $B -- "cat $TYPES/$T2/available_instances")" 1
expect "(a) ... while guest 1 still holds the first" rig_run $B -- "test -e /sys/bus/mdev/devices/$U1"
expect_eq "(a) $B: the link's mdev parent was not registered again" "$(mdev_log)" "$registrations"

echo "# (b) guest 2 with the second NVMe"
ag_extra_mdev $B "$PCI2"
U2=$AG_EXTRA_UUID
E2E_L2_NAME=g2 e2e_l2_start $B 256M "$(e2e_fio_script "$TAG2" --pause)" -device "vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U2"
LOG2=$E2E_L2_LOG
E2E_L2_LOG=$LOG2 E2E_L2_NAME=g2 expect "guest 2 booted with the second NVMe and waits before its fio jobs" \
	e2e_l2_wait $B fio $E2E_L2_TIMEOUT
expect_eq "(b) the lender: both NVMe borrowed by $B at once" \
	"$(ag_ctl lender --json list | jq -r '.devices[] | "\(.pci) \(.borrower)"' | sort | paste -sd ' ')" \
	"$(printf '%s\n' "$PCI1 $B" "$PCI2 $B" | sort | paste -sd ' ')"
E2E_L2_NAME=g2 e2e_l2_continue $B
E2E_L2_LOG=$LOG2 E2E_L2_NAME=g2 expect "guest 2 finished its fio jobs" e2e_l2_wait $B fio-done $E2E_L2_TIMEOUT
E2E_L2_NAME=g2 e2e_l2_continue $B
E2E_L2_LOG=$LOG2 E2E_L2_NAME=g2 e2e_l2_end $B
OUT2=$E2E_OUT
echo "# guest 2: $PCI2, tag $TAG2"
e2e_expect_guest_fio "$OUT2"
e2e_expect_written "$IMG2" "$TAG2"
expect "(b) $B's agent gave the second NVMe back" ag_wait_log $B 30 "gave back lender/$PCI2"

echo "# (c) the second NVMe unlent while guest 1 still uses the first"
expect "$B: remove guest 2's instance" rig_run $B -- "echo 1 > /sys/bus/mdev/devices/$U2/remove"
expect "lender: farpassctl unlend $PCI2" ag_ctl lender unlend "$PCI2"
expect "(c) $B's agent withdrew it" ag_wait_log $B 30 "withdrew lender $PCI2"
expect "(c) its slot's type stays, empty" rig_run $B -- "grep -q '^empty: ' $TYPES/$T2/description"
expect_eq "(c) ... with no available instance" "$(rig_run $B -- "cat $TYPES/$T2/available_instances")" 0
expect "(c) guest 1's instance is still there" rig_run $B -- "test -e /sys/bus/mdev/devices/$U1"
expect_eq "(c) the lender: the first NVMe still borrowed by $B" \
	"$(ag_ctl lender --json list | jq -r --arg p "$PCI1" '.devices[] | select(.pci == $p) | .borrower')" $B
expect_eq "(c) $B: the link's mdev parent was not registered again" "$(mdev_log)" "$registrations"

echo "# (d) guest 1 goes on with the first NVMe"
E2E_L2_NAME=g1 e2e_l2_continue $B
E2E_L2_LOG=$LOG1 E2E_L2_NAME=g1 expect "guest 1 finished its fio jobs" e2e_l2_wait $B fio-done $E2E_L2_TIMEOUT
E2E_L2_NAME=g1 e2e_l2_continue $B
E2E_L2_LOG=$LOG1 E2E_L2_NAME=g1 e2e_l2_end $B
echo "# guest 1: $PCI1, tag $TAG1"
e2e_expect_guest_fio "$E2E_OUT"
e2e_expect_written "$IMG1" "$TAG1"
expect_eq "(d) $B's agent: $PCI1 borrowed once and given back once" \
	"$(ag_log $B | grep -oE "(borrowed|gave back) lender/$PCI1" | tr '\n' /)" \
	"borrowed lender/$PCI1/gave back lender/$PCI1/"
ag_expect_free "(d)"
expect_klog_clean $B
expect_klog_clean lender
