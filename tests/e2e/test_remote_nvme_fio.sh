#!/bin/bash
# The lender's NVMe in an L2 guest of borrower1 through the farpass mdev and stock QEMU
# (-device vfio-pci,sysfsdev=...), 3 GiB of guest RAM (1 GiB of it above 4 GiB), the guest's stock nvme
# driver running the same fio as tests/soak/test_local_nvme_fio.sh (the same model passed through locally),
# then, in the same guest, a second fio run during which both agents (under fp-supervise: systemd's
# file-descriptor store, Restart=on-failure) are killed with SIGKILL and started again (issue 14: restarts
# lose nothing). Checks:
#  (a) the guest's first fio verify passed; the NVMe's MSI-X queue interrupts reached the guest, at least
#      90% as many as the requests completed; its kernel logged no nvme timeout, abort or controller
#      reset; its script exited 0 and its QEMU powered off within 60 s of the script's end, with status 0;
#  (b) the guest has RAM above 4 GiB, and the page frames of each fio job's I/O buffer, sampled from the
#      guest's pagemap while the job ran, were all above 4 GiB; borrower1's DMA window (DMA_LAYOUT during
#      fio) has a slot above 4 GiB (the layout and pinned pages are printed); its pinned pages cover the
#      guest's RAM (also what QEMU re-mapped after the borrow);
#  (c) on L0, the lender's backing file holds the pattern at every block the guest wrote (the proof), and
#      the checker fails on an unwritten region and with another tag; the canary written over the whole
#      file before the guest booted is intact everywhere else;
#  (d) no software in the data path: over the first fio jobs, every farpass counter of the lender and of
#      borrower1 outside an allow-list (lender: irq_posted; borrower1: doorbell, interrupt delivery and
#      signalling, MSI-X table/PBA traps) kept its value, and no MSI-X table/PBA access was trapped
#      (E2E_MSIX_TRAPS_MAX); the interrupt relay: borrower1's irq_signalled grew by as much as the
#      lender's irq_posted, irq_dropped and irq_no_eventfd did not grow;
#  (r) the restarts: both happened during the second fio run (the guest had not reached its end); the
#      lender's new agent adopted the NVMe's VFIO descriptors (logged); the lease id is the same on both
#      sides after each restart and at the run's end; that run's fio verify passed, with its NVMe
#      interrupts and no nvme timeout, abort or controller reset logged, and on L0 its regions (apart from
#      the first run's) hold its own tag;
#  (e) the guest's shutdown returned the device: borrower1's agent gave it back, the lender shows it free
#      and reset it (bus master off, CSTS.RDY 0); QEMU's reset of the unborrowed mdev at the guest's start
#      succeeded (no "no available reset mechanism");
#  (f) the kernel logs of both L1s have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
# Prints the L2 run's duration and the allowed counters' growth.
set -euo pipefail
. "$(dirname "$0")/e2e-lib.sh"
ag_check_built && fp_check_built && e2e_check_setup || exit
export AG_FDSTORE=1

B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000e2e1
# The guest's 3 GiB are pinned in borrower1.
e2e_remote_up $B $U 4608

tag=$(e2e_tag) tag_r=$(e2e_tag)
REGIONS=("${E2E_REGIONS[@]}")
# The restarts' run: 4 MiB of 4 KiB random writes (1024 requests, then verified), about 60 s of I/O under
# TCG (ci40), twice the 25 s the two restarts took from the jobs' start; then 16 MiB in 128 KiB blocks.
RESTART_REGIONS=(4096:$((96 << 20)):$((4 << 20)) 131072:$((112 << 20)):$((16 << 20)))
# regions_of R...: the "OFFSET:SIZE" of each "BS:OFFSET:SIZE" region.
regions_of() { local r; for r; do echo "${r#*:}"; done; }
e2e_canary "$(rig_lender_nvme_img)"
t0=$SECONDS
script="$(E2E_FIO_PFNS=1 e2e_fio_script "$tag" --pause)
e2e_pause restarts
$(E2E_REGIONS=("${RESTART_REGIONS[@]}") && e2e_fio_script "$tag_r")
e2e_pause restarts-done
[ -z \"\$e2e_failed\" ]"
e2e_l2_start $B 3G "$script" -device vfio-pci,sysfsdev=/sys/bus/mdev/devices/$U
expect "L2 booted and reached its fio jobs" e2e_l2_wait $B fio 900
s0=$(e2e_snapshot $B --hold)
layout=$(fp_client $B dma-layout --id "$E2E_DEVICE_ID" || true)
e2e_l2_continue $B
expect "L2 finished its fio jobs" e2e_l2_wait $B fio-done 1200
s1=$(e2e_snapshot $B --hold)
printf '%s\n' "$s0" >"$RIGDIR/snapshot-0.txt"
printf '%s\n' "$s1" >"$RIGDIR/snapshot-1.txt"
e2e_l2_continue $B

expect "L2 reached its second fio run" e2e_l2_wait $B restarts 300
ids=$(ag_lease_ids $B)
echo "lease ids (lender, $B): $ids"
expect "a lease is held on both sides" test "$(wc -w <<<"$ids")" = 2
e2e_l2_continue $B
echo "# the lender's agent is killed during fio"
sleep 5 # into the jobs
expect "lender: SIGKILL the agent; the supervisor starts it again" ag_kill_restart lender
expect "(r) lender: it adopted the NVMe's VFIO descriptors" \
	ag_wait_log lender 10 "adopted $LENDER_NVME's VFIO descriptors: not reset"
expect_eq "(r) the same lease on both sides" "$(ag_lease_ids $B)" "$ids"
echo "# borrower1's agent is killed during fio"
expect "$B: SIGKILL the agent; the supervisor starts it again" ag_kill_restart $B
expect_eq "(r) the same lease on both sides" "$(ag_lease_ids $B)" "$ids"
expect "(r) both restarts happened while the fio jobs ran" not grep -q "^E2E-WAIT restarts-done" "$E2E_L2_LOG"
expect "L2 finished its second fio run" e2e_l2_wait $B restarts-done 1200
expect_eq "(r) the same lease at the end of the jobs" "$(ag_lease_ids $B)" "$ids"
e2e_l2_continue $B
e2e_l2_end $B
out=$E2E_OUT
echo "L2 boot + fio + restarts + power-off: $((SECONDS - t0)) s"

first=$(sed '/^E2E-WAIT restarts$/q' <<<"$out")
e2e_expect_l2_nvme "$out"
e2e_expect_fio_jobs "$first"
expect_eq "L2's script exited with status" "$(sed -n 's/^L2-SCRIPT-RC //p' <<<"$out")" 0
e2e_expect_ram_above_4g "$first"
e2e_expect_buffers_above_4g "$first"
echo "DMA_LAYOUT during fio: $layout"
expect "(b) the DMA window has a slot above 4 GiB" grep -qE 'slots=.*0x[1-9][0-9a-f]{8}\+' <<<"$layout"
echo "counter dma_refilled_pages: $(e2e_snap $B "$s1" dma_refilled_pages) (pinned again since the borrow)"
e2e_expect_window_full "$layout" "(b)"

e2e_expect_no_software_in_path "$s0" "$s1" fio
e2e_expect_irq_relay "$s0" "$s1" fio

mapfile -t E2E_WRITTEN_EXTRA < <(regions_of "${RESTART_REGIONS[@]}")
e2e_expect_written "$(rig_lender_nvme_img)" "$tag"
echo "# (r) the second fio run, with the restarts"
E2E_REGIONS=("${RESTART_REGIONS[@]}")
e2e_expect_fio_jobs "$(sed -n '/^E2E-WAIT restarts$/,$p' <<<"$out")"
mapfile -t E2E_WRITTEN_EXTRA < <(regions_of "${REGIONS[@]}")
e2e_expect_written "$(rig_lender_nvme_img)" "$tag_r"

ag_expect_returned $B 30 "(e)"
e2e_expect_reset_works $B
expect_klog_clean $B
expect_klog_clean lender
