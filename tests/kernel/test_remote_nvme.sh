#!/bin/bash
# The issue's proof of the kernel data path. A VFIO client
# on borrower1 (farpass-client nvme-identify --mdev, as QEMU does) drives the lender's NVMe through the
# farpass mdev: the DMA buffers mapped at IOVA 1 MiB and 4 GiB on the borrower, bus master on (BORROW),
# the admin queue brought up through the mdev's BAR0, Identify Controller and Identify Namespace 1 DMAed
# by the lender's device across the NTB into the borrower's buffers, MSI-X vector 0 on the borrower's
# eventfd; bus master off (RETURN) gives the device back.
#  (a) the identify data are right (the same checks as test_nvme_client_local.sh on local vfio-pci);
#  (b) after the return the borrower's BAR0 reads all-ones (CSTS), the lender shows no borrow, the NVMe
#      is still on vfio-pci there, bus master off and the controller reset (CSTS.RDY 0);
#  (c) the borrower's agent is killed while the client holds the device borrowed: a forwarded config
#      read through the mdev returns all-ones within the upcall timeout (timed on L0), no hang; the
#      lender expires the lease and resets the device;
#  (d) both kernel logs have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
. "$(dirname "$0")/../agent/agent-lib.sh"
ag_check_built && fp_check_built || exit
LEASE_MS=6000

rig_up --borrowers 1
B=borrower1
U=8f7c3ab0-5c6e-4e41-9d3e-00000000b0e1
nsze=$(($(stat -c %s "$(rig_lender_nvme_img)") / 512))
ag_remote_mdev $B $U "\"lease_ms\": $LEASE_MS"

echo "# (a) Identify through the mdev, (b) the return"
ms=$(rig_time_ms $B "$FP_CLIENT nvme-identify --mdev $U --nsze $nsze --return >/tmp/identify.out 2>&1")
out=$(rig_run $B -- "cat /tmp/identify.out")
echo "$out"
echo "nvme-identify through the mdev took $ms ms (L0 clock)"
fp_expect_identify "$out" "$nsze"
expect_eq "(b) bus master off: RETURN" "$(fp_field "$out" return)" ok
expect_eq "(b) ... then the borrower's BAR0 is unreachable: CSTS reads all-ones" \
	"$(fp_field "$out" return_csts)" 0xffffffff
ag_expect_returned $B 10 "(b)"

echo "# (c) the borrower's agent dies while the device is borrowed"
rig_run $B -- "rm -f /tmp/go; setsid $FP_CLIENT nvme-identify --mdev $U --nsze $nsze --hold-until /tmp/go --return \
	</dev/null >/tmp/hold.out 2>&1 &"
expect "$B: the client identified the NVMe and holds it borrowed" \
	ntb_wait $B 120 "grep -q '^identified, holding' /tmp/hold.out"
expect "lender: borrowed by $B" test "$(ag_ctl lender --json borrows | jq -r '.leases[0].borrower')" = $B
timeout_ms=$(rig_run $B -- "cat /sys/module/farpass/parameters/upcall_timeout_ms")
rig_run $B -- "kill -KILL \$(cat $RIGDIR/$B/agent.pid)"
# Bounded: the upcall timeout plus 20 s for the rig's polling under TCG.
ms=$(rig_time_ms $B "touch /tmp/go
for i in \$(seq $((timeout_ms / 100 + 200))); do grep -q '^ok\|^err' /tmp/hold.out && exit 0; sleep 0.1; done; exit 1")
out=$(rig_run $B -- "cat /tmp/hold.out")
echo "$out"
echo "the config read after the agent's death took $ms ms on L0 (client: $(fp_field "$out" held_cfg_ms) ms; upcall timeout $timeout_ms ms)"
expect "(c) the client finished: no hang" grep -q '^ok\|^err' <<<"$out"
expect_eq "(c) the forwarded config read returned all-ones" "$(fp_field "$out" held_cfg)" 0xffffffff
expect "(c) lender: the lease expires, the device is reset and free" \
	ag_wait_log lender $((LEASE_MS / 1000 + 20)) "lease of $LENDER_NVME by $B expired: device unmapped, reset and free"
expect_eq "(c) lender: no borrows" "$(ag_ctl lender borrows)" "no borrows"
expect_klog_clean $B
expect_klog_clean lender
