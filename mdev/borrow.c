// SPDX-License-Identifier: GPL-2.0-only
/*
 * borrow.c - the borrow at bus-master enable and the return (bus-master clear, reset, close): the DMA
 * window built before BORROW, the interrupt bridge after it, the BAR mmaps' lease, and the config
 * writes kept from before the borrow replayed to the lender.
 */
#include <linux/ktime.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>

#include "cfg.h"
#include "counters.h"
#include "fp.h"
#include "instance.h"
#include "irqbridge.h"
#include "p2p.h"
#include "xwin.h"

/* Kept writes go at reset of an unborrowed device and at close: the device never saw them. */
void fp_cfg_pend_drop(struct fp_mdev *fm)
{
	lockdep_assert_held(&fm->bm_lock);
	memset(&fm->pend, 0, sizeof(fm->pend));
}

/*
 * At the borrow, before bus master reads as set: the forwarded bytes written before it go to the
 * lender in offset order, as naturally aligned pieces of kept bytes only. A failure is the answer to
 * one write, as it would have been at the time: logged and counted, the borrow stands.
 */
static void fp_cfg_replay(struct fp_mdev *fm)
{
	struct fp_cfg_piece p;
	u32 off = 0;
	int ret;

	lockdep_assert_held(&fm->bm_lock);
	/* vcfg's kinds are fixed by the scan, which came before any write was kept. */
	while (fp_cfg_pend_next(&fm->pend, &fm->vcfg, off, &p)) {
		ret = fp_cfg_upcall(fm, &p, &fm->pend.val[p.off], true);
		fp_count(ret ? FP_C_CFG_REPLAY_FAILED : FP_C_CFG_REPLAYED, 1);
		if (ret)
			dev_warn_ratelimited(fm->vdev.dev,
					     "farpass: device %u: config write at %#x (%u bytes) from before the borrow: %pe\n",
					     fm->rdev->desc.device_id, p.off, p.size, ERR_PTR(ret));
		off = p.off + p.size;
	}
	fp_cfg_pend_drop(fm);
}

/*
 * Give the device back: the BAR mmaps revoked, then RETURN (the lender stops the device and unmaps
 * its side), then the interrupt bridge and our DMA window (unmapped, IOTLB flushed, then unpinned).
 * A failed RETURN still ends the borrow here, but not the lender's possible mappings of the window.
 */
void fp_return(struct fp_mdev *fm)
{
	int ret;

	lockdep_assert_held(&fm->bm_lock);
	fp_bar_lease(fm, false);
	ret = fp_call(fm, FARPASS_UPCALL_RETURN, fm->instance, 0, 0, NULL);
	fp_irq_detach(fm->rdev->link, fm->rdev->desc.irq_slot);
	fp_dma_destroy(fm, !ret);
	spin_lock(&fm->state_lock);
	WRITE_ONCE(fm->borrowed, false);
	spin_unlock(&fm->state_lock);
}

/*
 * Lazy borrow at bus-master enable: the DMA window is built first (the agent serving BORROW reads its
 * layout with DMA_LAYOUT), then BORROW, then the interrupt bridge and the current interrupt state.
 */
int fp_borrow(struct fp_mdev *fm)
{
	struct fp_link *link = fm->rdev->link;
	u32 slot = fm->rdev->desc.irq_slot;
	struct fp_borrow_stat st = { .device_id = fm->rdev->desc.device_id };
	u64 t0 = ktime_get_ns(), t1;
	int ret;

	lockdep_assert_held(&fm->bm_lock);
	mutex_lock(&fm->dma_lock);
	ret = fp_p2p_window_create(fm, &st);
	mutex_unlock(&fm->dma_lock);
	if (ret) {
		dev_warn_ratelimited(fm->vdev.dev, "farpass: DMA window of device %u: %pe\n",
				     fm->rdev->desc.device_id, ERR_PTR(ret));
		return ret;
	}
	t1 = ktime_get_ns();
	ret = fp_call(fm, FARPASS_UPCALL_BORROW, fm->instance, 0, 0, NULL);
	if (ret == -ETIMEDOUT || ret == -ENOTCONN || ret == -EINTR)
		goto out_return;	/* no answer: the lender may have mapped the lease */
	if (ret)
		goto out_destroy;
	st.upcall_ns = ktime_get_ns() - t1;
	/*
	 * A link without a data path got here only with no guest RAM (an empty window): a VFIO user
	 * that just looks at config space, nothing to bridge.
	 */
	ret = fp_xwin_ready(link) ? fp_irq_attach(link, slot, &fp_irq_target, fm) : 0;
	if (ret) {
		dev_warn_ratelimited(fm->vdev.dev, "farpass: interrupt slot %u of device %u: %pe\n", slot,
				     fm->rdev->desc.device_id, ERR_PTR(ret));
		goto out_return;
	}
	fp_bar_lease(fm, true);
	spin_lock(&fm->state_lock);
	WRITE_ONCE(fm->borrowed, true);
	spin_unlock(&fm->state_lock);
	ret = fp_irq_upcall(fm, fm->irq_index, fm->irq_count);
	if (ret) {
		fp_return(fm);
		return ret;
	}
	fp_cfg_replay(fm);
	st.total_ns = ktime_get_ns() - t0;
	fp_borrow_record(&st);
	return 0;

out_return:
	fp_dma_destroy(fm, !fp_call(fm, FARPASS_UPCALL_RETURN, fm->instance, 0, 0, NULL));
	return ret;
out_destroy:
	fp_dma_destroy(fm, true);	/* the agent refused: nothing mapped on the lender */
	return ret;
}
