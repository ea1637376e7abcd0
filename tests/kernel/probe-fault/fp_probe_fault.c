// SPDX-License-Identifier: GPL-2.0-only
/*
 * fp_probe_fault.ko - test-only fault injection for farpass.ko's NTB probe (test_load_unload.sh).
 *
 * The probe's last step, the mdev parent's registration, cannot be made to fail from outside, and
 * Debian's kernels have neither CONFIG_FAULT_INJECTION nor CONFIG_FUNCTION_ERROR_INJECTION. So a kprobe
 * at mdev_register_parent()'s entry returns from it with -ENOMEM, the way bpf_override_return() does,
 * for the next @fail_times calls on a PCI device bound to ntb_hw_epf.
 *
 * Before failing it delivers that NTB's link and doorbell events, as a peer coming up during the probe
 * would, so the probe's error path runs with the link's work queued. A work item queued ahead of them on
 * the same CPU's pool keeps them queued (it spins without sleeping, so the pool starts no other worker)
 * until fp_ntb_probe() has returned: a link freed with work still queued is then used after its free,
 * which slub_debug's poisoning turns into an oops.
 */
#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/ntb.h>
#include <linux/pci.h>
#include <linux/workqueue.h>

static int fail_times;
module_param(fail_times, int, 0644);
MODULE_PARM_DESC(fail_times, "mdev_register_parent() calls on an NTB still to fail");

static int fired;
module_param(fired, int, 0444);
MODULE_PARM_DESC(fired, "mdev_register_parent() calls failed so far");

static int probe_ret;
module_param(probe_ret, int, 0444);
MODULE_PARM_DESC(probe_ret, "what fp_ntb_probe() returned after the last failure");

static bool held_past_probe;
module_param(held_past_probe, bool, 0444);
MODULE_PARM_DESC(held_past_probe, "the queued work waited until fp_ntb_probe() had returned");

/* The work queue's watchdog reports a work item running for 30 s: give up well before. */
#define FP_HOLD_MAX_MS 10000

static bool armed_probe;	/* a failure was injected; fp_ntb_probe()'s return is awaited */
static bool probe_returned;

static void fp_hold_fn(struct work_struct *work)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(FP_HOLD_MAX_MS);

	/* cond_resched(), not sleep: a sleeping worker would let the pool run the queued work. */
	while (!READ_ONCE(probe_returned) && time_before(jiffies, deadline))
		cond_resched();
	WRITE_ONCE(held_past_probe, READ_ONCE(probe_returned));
}
static DECLARE_WORK(fp_hold_work, fp_hold_fn);

/* Where the kprobe sends mdev_register_parent(): the caller gets -ENOMEM, nothing is registered. */
static noinline int fp_fail_register(void)
{
	return -ENOMEM;
}

static int fp_register_pre(struct kprobe *p, struct pt_regs *regs)
{
	struct device *dev = (struct device *)regs->si;
	struct ntb_dev *ntb;

	if (READ_ONCE(fail_times) <= 0 || !dev_is_pci(dev) || !dev->driver ||
	    strcmp(dev->driver->name, "ntb_hw_epf"))
		return 0;
	/* ntb_hw_epf's driver data starts with its struct ntb_dev. */
	ntb = pci_get_drvdata(to_pci_dev(dev));
	if (!ntb)
		return 0;
	WRITE_ONCE(fail_times, fail_times - 1);
	WRITE_ONCE(probe_returned, false);
	WRITE_ONCE(armed_probe, true);
	/* This CPU's pool: the events below queue their work on it too (we cannot migrate here). */
	queue_work_on(smp_processor_id(), system_wq, &fp_hold_work);
	ntb_link_event(ntb);
	ntb_db_event(ntb, 0);
	fired++;
	/* At the entry the return address is on top of the stack: fp_fail_register() returns to it. */
	regs->ip = (unsigned long)fp_fail_register;
	return 1;
}

static struct kprobe fp_register_kp = {
	.symbol_name = "mdev_register_parent",
	.pre_handler = fp_register_pre,
};

static int fp_probe_ret(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	if (READ_ONCE(armed_probe)) {
		probe_ret = (int)regs_return_value(regs);
		WRITE_ONCE(armed_probe, false);
		WRITE_ONCE(probe_returned, true);
	}
	return 0;
}

static struct kretprobe fp_probe_krp = {
	.kp.symbol_name = "fp_ntb_probe",
	.handler = fp_probe_ret,
};

static int __init fp_probe_fault_init(void)
{
	int ret;

	ret = register_kretprobe(&fp_probe_krp);
	if (ret) {
		pr_err("fp_probe_fault: kretprobe on fp_ntb_probe (is farpass loaded?): %pe\n", ERR_PTR(ret));
		return ret;
	}
	ret = register_kprobe(&fp_register_kp);
	if (ret) {
		pr_err("fp_probe_fault: kprobe on mdev_register_parent: %pe\n", ERR_PTR(ret));
		goto err_kretprobe;
	}
	return 0;

err_kretprobe:
	unregister_kretprobe(&fp_probe_krp);
	return ret;
}

static void __exit fp_probe_fault_exit(void)
{
	unregister_kprobe(&fp_register_kp);
	unregister_kretprobe(&fp_probe_krp);
	WRITE_ONCE(probe_returned, true);
	flush_work(&fp_hold_work);
}

module_init(fp_probe_fault_init);
module_exit(fp_probe_fault_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("farpass test: fail the NTB probe's mdev parent registration with its work queued");
