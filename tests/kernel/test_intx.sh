#!/bin/bash
# INTx through the interrupt bridge, both ways, with no device behind it: on the borrower farpass-client
# announces a fake device whose config space has interrupt pin INTA, serves upcalls as the agent and opens
# the mdev as QEMU without KVM does (vfio-intx); on the lender farpass-client plays the agent's part: the
# slot's INTx unmask eventfd (irq-unmask: IRQ_BRIDGE F_UNMASK) and the device's INTx trigger (irq-bridge:
# vector 0 of the slot). Checks:
#  (a) IRQ_BRIDGE F_UNMASK errors: count 2, start 1, with F_CLEAR, slot 16: EINVAL;
#  (b) the mdev's INTx index as vfio-pci's: count 1, maskable and automasked (not noresize); UNMASK while
#      INTx is off: EINVAL; the trigger set before the borrow, SET_IRQS index 0 count 1 sent at BORROW;
#  (c) automask: three lender interrupts while the guest has not unmasked signal the trigger once, the
#      other two arrive masked (intx_masked), not signalled;
#  (d) the unmask round trip: the VFIO user's UNMASK (DATA_NONE) goes to the lender once (a second one,
#      already unmasked, sends nothing), which signals the slot's unmask eventfd; an unmask eventfd set with
#      ACTION_UNMASK DATA_EVENTFD does the same when signalled, after one more interrupt; MASK with an
#      eventfd: ENOTTY (vfio-pci has no mask eventfd either); borrower intx_unmasks_posted = lender intx_unmasks_signalled = 2, and
#      the lender's eventfd got exactly 2;
#  (e) INTx off is a SET_IRQS index 0 count 0 upcall; the F_UNMASK eventfd dropped (-1) leaves no hook;
#      both kernel logs have no warning, BUG, oops, RCU stall, hung task or DMAR fault.
set -euo pipefail
. "$(dirname "$0")/../rig/rig.sh"
. "$(dirname "$0")/../rig/ntb-lib.sh"
. "$(dirname "$0")/kernel-lib.sh"
fp_check_built

rig_up --borrowers 1
B=borrower1
NTB=$(ntb_pci $B)
LNTB=$(ntb_pci lender)
T=/sys/class/mdev_bus/$NTB/mdev_supported_types/ntb_hw_epf-farpass-lender-1 # slot 1
U=8f7c3ab0-5c6e-4e41-9d3e-0000000000f1
D=/tmp/intx
fp_load lender
fp_load $B
expect "borrower: farpass link up" ntb_wait $B 60 "grep -qx 'link up' $FP_DBG/$NTB/link"
expect "lender: farpass link up" ntb_wait lender 60 "grep -qx 'link up' $FP_DBG/$LNTB/link"
for vm in lender $B; do
	expect "$vm: handshake ok" ntb_wait $vm 30 "grep -qx 'handshake ok' $FP_DBG/$(ntb_pci $vm)/link"
done

echo "# (a) F_UNMASK errors"
rig_run lender -- "rm -rf $D; mkdir -p $D"
unmask() { fp_client lender irq-unmask --ntb $LNTB --dir $D "$@"; }
expect "count 2: EINVAL" unmask --slot 1 --count 2 --expect EINVAL
expect "start 1: EINVAL" unmask --slot 1 --start 1 --expect EINVAL
expect "with F_CLEAR: EINVAL" unmask --slot 1 --with-clear 1 --expect EINVAL
expect "slot 16: EINVAL" unmask --slot 16 --expect EINVAL
expect_eq "lender: no hook left" "$(fp_counter lender irq_hooks)" 0

echo "# (b) INTx on, borrowed"
rig_run lender -- "$FP_CLIENT irq-unmask --ntb $LNTB --slot 1 --dir $D </dev/null >$D/unmask 2>&1 &"
expect "lender: the slot's unmask eventfd is set" ntb_wait lender 30 "grep -q '^ready' $D/unmask || grep -q '^err' $D/unmask"
fp_client $B announce --id 5 --lender lender --ntb "$NTB" --bar0 0x4000 --irq-slot 1
rig_run $B -- "echo $U > $T/create; rm -rf $D; mkdir -p $D"
rig_run $B -- "$FP_CLIENT agent --log $D/agent </dev/null >>$D/agent.out 2>&1 & echo \$! >$D/agent.pid"
expect "agent up" ntb_wait $B 10 "grep -q ready $D/agent"
rig_run $B -- "$FP_CLIENT vfio-intx $U --dir $D </dev/null >$D/user 2>&1 &"
expect "the VFIO user armed INTx, borrowed" ntb_wait $B 120 "grep -q '^armed' $D/user || grep -q '^err' $D/user"

echo "# (c) automask"
expect "lender: INTx of slot 1 fired 3 times" fp_client lender irq-bridge --ntb $LNTB --slot 1 --count 1 --signal 3
expect "borrower: 1 signalled, 2 arrived masked" \
	ntb_wait $B 30 "test \$(awk '\$1 == \"intx_masked\" { print \$2 }' $FP_DBG/counters) -ge 2"
expect_eq "borrower: irq_signalled" "$(fp_counter $B irq_signalled)" 1

echo "# (d) the unmask round trip"
rig_run $B -- "touch $D/go1"
expect "the VFIO user unmasked" ntb_wait $B 60 "grep -q '^armed2' $D/user || grep -q '^err' $D/user"
expect "lender: the unmask arrived" \
	ntb_wait lender 30 "test \$(awk '\$1 == \"intx_unmasks_signalled\" { print \$2 }' $FP_DBG/counters) -ge 1"
expect "lender: INTx of slot 1 fired again" fp_client lender irq-bridge --ntb $LNTB --slot 1 --count 1 --signal 1
expect "borrower: signalled (unmasked)" \
	ntb_wait $B 30 "test \$(awk '\$1 == \"irq_signalled\" { print \$2 }' $FP_DBG/counters) -ge 2"
rig_run $B -- "touch $D/go2"
expect "lender: the unmask eventfd's unmask arrived" \
	ntb_wait lender 30 "test \$(awk '\$1 == \"intx_unmasks_signalled\" { print \$2 }' $FP_DBG/counters) -ge 2"
rig_run $B -- "touch $D/go3"
expect "the VFIO user finished" ntb_wait $B 60 "grep -qE '^(ok|err)' $D/user"
out=$(rig_run $B -- "grep -E '^(ok|err)' $D/user")
echo "$out"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $out"; }
expect_eq "(b) IRQ info of INTx: count 1, maskable, automasked" "$(field info)" 1/ma
expect_eq "(b) UNMASK while INTx is off" "$(field unmask_off)" EINVAL
expect_eq "(b) INTx trigger set before the borrow; bus master on" "$(field intx_on)/$(field bm_on)" ok/ok
expect_eq "(c) the trigger fired once for 3 interrupts" "$(field fired1)" 1
expect_eq "(d) UNMASK, UNMASK again, unmask eventfd set" "$(field unmask1)/$(field unmask2)/$(field unmask_fd)" ok/ok/ok
expect_eq "(d) MASK with an eventfd" "$(field mask_fd)" ENOTTY
expect_eq "(d) the trigger fired once more" "$(field fired2)" 1
expect_eq "(d) the unmask eventfd signalled; INTx off; bus master off" \
	"$(field signal)/$(field intx_off)/$(field bm_off)" ok/ok/ok
expect_eq "(d) borrower: intx_unmasks_posted" "$(fp_counter $B intx_unmasks_posted)" 2
expect_eq "(d) lender: intx_unmasks_signalled" "$(fp_counter lender intx_unmasks_signalled)" 2
rig_run lender -- "touch $D/go-count"
expect "lender: irq-unmask finished" ntb_wait lender 30 "grep -qE '^(ok|err)' $D/unmask"
lout=$(rig_run lender -- "grep -E '^(ok|err)' $D/unmask")
echo "$lout"
expect "(d) lender: its unmask eventfd got exactly 2; (e) dropped again" grep -q 'unmasks=2 cleared=ok' <<<"$lout"

echo "# (e) INTx off, teardown"
ops=$(rig_run $B -- "grep -E '^(BORROW|RETURN|SET_IRQS) 5' $D/agent | sed 's/ instance [0-9]*//; s/ (seq.*//' | tr '\n' ';'")
expect_eq "the agent saw BORROW, INTx armed, INTx off, RETURN" "$ops" \
	"BORROW 5;SET_IRQS 5 index 0 count 1;SET_IRQS 5 index 0 count 0;RETURN 5;"
expect_eq "lender: only the trigger's hook left (irq-bridge's)" "$(fp_counter lender irq_hooks)" 1
rig_run $B -- "kill \$(cat $D/agent.pid)"
expect "remove the instance" rig_run $B --timeout 20 -- "echo 1 > /sys/bus/mdev/devices/$U/remove"
expect "withdraw" fp_client $B withdraw --id 5
expect "rmmod farpass (borrower)" rig_run $B --timeout 20 -- "rmmod farpass"
expect "rmmod farpass (lender)" rig_run lender --timeout 20 -- "rmmod farpass"
for vm in lender $B; do
	expect_klog_clean $vm
done
