// SPDX-License-Identifier: GPL-2.0-only
/*
 * counters.c - debugfs: /sys/kernel/debug/farpass/counters, one "name value" line per counter, and
 * last_borrow, the figures of the last successful borrow in the same form.
 * The directory is also the parent of each link's directory (ntb.c).
 */
#include <linux/debugfs.h>
#include <linux/seq_file.h>
#include <linux/spinlock.h>

#include "counters.h"
#include "fp.h"

atomic64_t fp_counters[FP_C_NR];
struct dentry *fp_debugfs_root;

static DEFINE_SPINLOCK(fp_last_borrow_lock);
static struct fp_borrow_stat fp_last_borrow;	/* fp_last_borrow_lock */

static const char *const fp_counter_names[FP_C_NR] = {
	[FP_C_LINKS]		= "links",
	[FP_C_LINKS_UP]		= "links_up",
	[FP_C_LINK_UP_EVENTS]	= "link_up_events",
	[FP_C_LINK_DOWN_EVENTS]	= "link_down_events",
	[FP_C_DB_EVENTS]	= "doorbell_events",
	[FP_C_CTRL_TX]		= "ctrl_tx",
	[FP_C_CTRL_RX]		= "ctrl_rx",
	[FP_C_CTRL_RETRIES]	= "ctrl_retries",
	[FP_C_CTRL_ERRORS]	= "ctrl_errors",
	[FP_C_AGENT_FILES]	= "agent_files",
	[FP_C_IOCTL_ERRORS]	= "ioctl_errors",
	[FP_C_DEVICES]		= "devices",
	[FP_C_TYPES]		= "types",
	[FP_C_PARENTS]		= "parents",
	[FP_C_INSTANCES]	= "instances",
	[FP_C_VFIO_OPEN]	= "vfio_open",
	[FP_C_DMA_UNMAP]	= "dma_unmap",
	[FP_C_PINNED_PAGES]	= "pinned_pages",
	[FP_C_UPCALL_BORROW]	= "upcalls_borrow",
	[FP_C_UPCALL_RETURN]	= "upcalls_return",
	[FP_C_UPCALL_CFG_READ]	= "upcalls_cfg_read",
	[FP_C_UPCALL_CFG_WRITE]	= "upcalls_cfg_write",
	[FP_C_UPCALL_RESET]	= "upcalls_reset",
	[FP_C_UPCALLS_PENDING]	= "upcalls_pending",
	[FP_C_UPCALL_TIMEOUTS]	= "upcall_timeouts",
	[FP_C_UPCALL_NOTCONN]	= "upcall_notconn",
	[FP_C_UPCALL_LATE_REPLIES] = "upcall_late_replies",
	[FP_C_CFG_READS]	= "cfg_reads",
	[FP_C_CFG_WRITES]	= "cfg_writes",
	[FP_C_CFG_FORWARDED]	= "cfg_forwarded",
	[FP_C_CFG_DEFERRED]	= "cfg_writes_deferred",
	[FP_C_CFG_REPLAYED]	= "cfg_writes_replayed",
	[FP_C_CFG_REPLAY_FAILED] = "cfg_replay_failed",
	[FP_C_SURPRISE_REMOVED]	= "surprise_removed",
	[FP_C_REVOKED]		= "revoked",
	[FP_C_RESETS]		= "resets",
	[FP_C_XWIN_BAR_BYTES]	= "xwin_bar_bytes",
	[FP_C_XWIN_DMA_BYTES]	= "xwin_dma_bytes",
	[FP_C_BAR_MAPS]		= "bar_maps",
	[FP_C_IRQ_HOOKS]	= "irq_hooks",
	[FP_C_IRQ_POSTED]	= "irq_posted",
	[FP_C_IRQ_OVERFLOWS]	= "irq_overflows",
	[FP_C_IRQ_UNPOSTED]	= "irq_unposted",
	[FP_C_IRQ_DELIVERED]	= "irq_delivered",
	[FP_C_IRQ_DROPPED]	= "irq_dropped",
	[FP_C_IRQ_BAD]		= "irq_bad",
	[FP_C_DMA_WINDOWS]	= "dma_windows",
	[FP_C_UPCALL_SET_IRQS]	= "upcalls_set_irqs",
	[FP_C_BAR_TRAPPED_MSIX]	= "bar_trapped_msix",
	[FP_C_BAR_TRAPPED]	= "bar_trapped_other",
	[FP_C_IRQ_SIGNALLED]	= "irq_signalled",
	[FP_C_IRQ_NO_EVENTFD]	= "irq_no_eventfd",
	[FP_C_DMA_REFILLED]	= "dma_refilled_pages",
	[FP_C_DMA_QUARANTINED]	= "dma_quarantined",
	[FP_C_UPCALL_BUSY]	= "upcall_busy",
	[FP_C_IRQ_RESYNCS]	= "irq_resyncs",
	[FP_C_INTX_UNMASKS_POSTED]	= "intx_unmasks_posted",
	[FP_C_INTX_UNMASKS_SIGNALLED]	= "intx_unmasks_signalled",
	[FP_C_INTX_MASKED]	= "intx_masked",
	[FP_C_DMA_PEERS]	= "dma_peers",
	[FP_C_DMA_LENDER_PEERS]	= "dma_lender_peers",
	[FP_C_IRQ_RESENT]	= "irq_resent",
	[FP_C_DMA_STAGED]	= "dma_staged_pages",
	[FP_C_PINNED_HUGE]	= "dma_held_pages",
};

static int counters_show(struct seq_file *s, void *unused)
{
	int i;

	for (i = 0; i < FP_C_NR; i++)
		seq_printf(s, "%s %lld\n", fp_counter_names[i],
			   (long long)atomic64_read(&fp_counters[i]));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(counters);

void fp_borrow_record(const struct fp_borrow_stat *st)
{
	spin_lock(&fp_last_borrow_lock);
	fp_last_borrow = *st;
	spin_unlock(&fp_last_borrow_lock);
}

static int last_borrow_show(struct seq_file *s, void *unused)
{
	struct fp_borrow_stat st;

	spin_lock(&fp_last_borrow_lock);
	st = fp_last_borrow;
	spin_unlock(&fp_last_borrow_lock);
	seq_printf(s, "device_id %u\nscan_us %llu\npin_us %llu\nmap_us %llu\nupcall_us %llu\ntotal_us %llu\n"
		   "pages %llu\nstaged_pages %llu\nstage_us %llu\nruns %llu\nmap_calls %llu\n",
		   st.device_id, st.scan_ns / NSEC_PER_USEC, st.pin_ns / NSEC_PER_USEC, st.map_ns / NSEC_PER_USEC,
		   st.upcall_ns / NSEC_PER_USEC, st.total_ns / NSEC_PER_USEC, st.pages, st.staged_pages,
		   st.stage_ns / NSEC_PER_USEC, st.runs, st.map_calls);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(last_borrow);

int fp_counters_init(void)
{
	int i;

	for (i = 0; i < FP_C_NR; i++)
		atomic64_set(&fp_counters[i], 0);
	/* debugfs is optional: errors are ignored, as debugfs users are told to. */
	fp_debugfs_root = debugfs_create_dir(FP_NAME, NULL);
	debugfs_create_file("counters", 0400, fp_debugfs_root, NULL, &counters_fops);
	debugfs_create_file("last_borrow", 0400, fp_debugfs_root, NULL, &last_borrow_fops);
	return 0;
}

void fp_counters_exit(void)
{
	debugfs_remove_recursive(fp_debugfs_root);
	fp_debugfs_root = NULL;
}
