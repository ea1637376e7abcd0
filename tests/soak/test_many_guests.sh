#!/bin/bash
# Scenario 6 of issue 15, many guests on one link. The lender has four NVMe controllers
# (RIG_LENDER_NVMES, each with its own backing file on L0) and lends them all to borrower1 over link 1;
# four 256 MiB L2 guests of borrower1, each with its own device through its own farpass mdev, boot at once
# (four borrows at once), then write their own tags with fio at once. Checks:
#  (a) the four at once: once every guest's nvme driver had its device and its script waited before its
#      fio jobs, the lender listed all four devices borrowed by borrower1; then all four ran their fio
#      jobs together;
#  (b) each guest: fio randwrite with verify passed, its NVMe's MSI-X interrupts at least 90% as many as
#      the requests completed, its kernel logged no nvme timeout, abort or controller reset, its script
#      exited 0 and its QEMU powered off (e2e_expect_guest_fio, e2e_l2_end);
#  (c) each guest's data is in its own device's backing file and nowhere else: on L0, every file holds
#      its guest's pattern in the fio regions, and the canary written over all four before the guests
#      started everywhere else (so no guest's block landed in another's file);
#  (d) each device was borrowed once and given back once (borrower1's agent log, per device); the lender
#      lists each free, on vfio-pci, bus master off, the controller reset;
#  (e) the lender's and borrower1's resources (e2e_resources) are what they were before the guests;
#  (f) the kernel logs of the lender and borrower1 have no warning, BUG, oops, RCU stall, hung task or DMAR
#      fault.
# Prints the time the guests took to boot and the fio run's; writes its row of the suite's summary table
# (rel-lib.sh).
set -euo pipefail
export RIG_LENDER_NVMES=4
. "$(dirname "$0")/../reliability/rel-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit
GUESTS=(1 2 3 4)
declare -A PCI=() IMG=() UUID=() TAG=() LOG=()
for g in "${GUESTS[@]}"; do
	PCI[$g]=$(rig_lender_nvme_pci $((g - 1)))
	IMG[$g]=$(rig_lender_nvme_img $((g - 1)))
	TAG[$g]=$(e2e_tag)
done
export AG_LENT_ALSO="${PCI[2]} ${PCI[3]} ${PCI[4]}"
# Short jobs, long bounds: four guests share borrower1's one TCG thread.
E2E_L2_TIMEOUT=3600
E2E_REGIONS=(4096:$((16 << 20)):$((512 << 10)) 131072:$((64 << 20)):$((1 << 20)))
B=borrower1
UUID[1]=8f7c3ab0-5c6e-4e41-9d3e-00000000e2f7
e2e_remote_up $B "${UUID[1]}" 2048
for g in 2 3 4; do
	ag_extra_mdev $B "${PCI[$g]}"
	UUID[$g]=$AG_EXTRA_UUID
done
rel_row scenario "6: many guests" outage "none: four guests, four devices of the lender, one link"

# One canary over the four files: a block of one guest found in another's file breaks it there.
e2e_canary "${IMG[1]}"
for g in 2 3 4; do
	expect "L0: the canary written over $(basename "${IMG[$g]}") too" \
		python3 "$E2E_LIB/check-pattern.py" --fill "${IMG[$g]}" "$E2E_CANARY"
done
r0=$(e2e_resources $B)
e2e_resources_show "$r0"

t0=$SECONDS
for g in "${GUESTS[@]}"; do
	E2E_L2_NAME=g$g e2e_l2_start $B 256M "$(e2e_fio_script "${TAG[$g]}" --pause)" \
		-device "vfio-pci,sysfsdev=/sys/bus/mdev/devices/${UUID[$g]}"
	LOG[$g]=$E2E_L2_LOG
done
for g in "${GUESTS[@]}"; do
	E2E_L2_LOG=${LOG[$g]} E2E_L2_NAME=g$g expect "guest $g booted and waits before its fio jobs" \
		e2e_l2_wait $B fio $E2E_L2_TIMEOUT
done
echo "the four guests booted and reached their fio jobs in $((SECONDS - t0)) s"
expect_eq "(a) lender: the four devices borrowed by borrower1 at once" \
	"$(ag_ctl lender --json list | jq -r '.devices[] | "\(.pci) \(.borrower)"' | sort | paste -sd ' ')" \
	"$(for g in "${GUESTS[@]}"; do echo "${PCI[$g]} $B"; done | sort | paste -sd ' ')"
t1=$SECONDS
for g in "${GUESTS[@]}"; do
	E2E_L2_NAME=g$g e2e_l2_continue $B
done
for g in "${GUESTS[@]}"; do
	E2E_L2_LOG=${LOG[$g]} E2E_L2_NAME=g$g expect "guest $g finished its fio jobs" e2e_l2_wait $B fio-done $E2E_L2_TIMEOUT
done
echo "the four guests' fio jobs, together: $((SECONDS - t1)) s"
for g in "${GUESTS[@]}"; do
	E2E_L2_NAME=g$g e2e_l2_continue $B
done

# All four end before any is checked: the lender's borrows are empty only once the last one has.
declare -A OUT=()
for g in "${GUESTS[@]}"; do
	E2E_L2_LOG=${LOG[$g]} E2E_L2_NAME=g$g e2e_l2_end $B
	OUT[$g]=$E2E_OUT
done
for g in "${GUESTS[@]}"; do
	echo "# guest $g: ${PCI[$g]}, tag ${TAG[$g]}"
	e2e_expect_guest_fio "${OUT[$g]}"
	e2e_expect_written "${IMG[$g]}" "${TAG[$g]}"
	expect_eq "(d) borrower1's agent: ${PCI[$g]} borrowed once and given back once" \
		"$(ag_log $B | grep -oE "(borrowed|gave back) lender/${PCI[$g]}" | tr '\n' /)" \
		"borrowed lender/${PCI[$g]}/gave back lender/${PCI[$g]}/"
	AG_LENT=${PCI[$g]} ag_expect_free "(d)"
done
rel_row 'what the guest saw' "each guest its own device; fio verify passed in all four" \
	'recovery time' "-" \
	'blocks checked' "$((4 * $(e2e_region_blocks))) (each guest's, in its own file on L0; the canary in the others)"
rel_expect_baseline "$r0"
