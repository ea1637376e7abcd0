// SPDX-License-Identifier: GPL-2.0-only
/*
 * mdev.c - the borrower role's instances: the mdev driver of every link's parent (types.c) and a
 * VFIO device per instance. Each remote device can be passed to one VM at a time: one instance per type.
 *
 * VFIO device: the config region is virtualised (cfg.c decides, fp_cfg_access() serves; forwarded
 * registers go to the agent as CFG_READ/CFG_WRITE upcalls), bus-master enable/clear and reset are
 * BORROW/RETURN/RESET upcalls, the ERR and REQ eventfds are served. A dead agent (upcall timeout, or
 * no agent file) makes the instance surprise-removed until it is opened again: config reads return
 * all-ones, everything else fails at once with -ENODEV, the ERR eventfd fires.
 * Data path (docs/mdev.md "BAR and DMA windows"): BAR regions are mmapped from the outbound window
 * FARPASS_MW_BAR at the slot the lender announced, but for the MSI-X table/PBA pages, whose accesses are
 * trapped and go through an ioremap of the same window; bus-master enable builds the DMA window
 * (dmawin.c) before BORROW; INTx/MSI/MSI-X eventfds from SET_IRQS are signalled by the interrupt bridge,
 * INTx unmasks go back to the lender over it.
 */
#include <linux/bitfield.h>
#include <linux/eventfd.h>
#include <linux/io.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/vfio.h>
#include <linux/workqueue.h>

#include "cfg.h"
#include "compat.h"
#include "counters.h"
#include "dmauser.h"
#include "dmawin.h"
#include "fp.h"
#include "instance.h"
#include "irqbridge.h"
#include "link.h"
#include "p2p.h"
#include "proto.h"
#include "types.h"
#include "upcall.h"
#include "xwin.h"

/* ------------------------------------------------------------------------------ vfio_device_ops */

static atomic_t fp_instance_seq = ATOMIC_INIT(0);

static void fp_signal(struct fp_mdev *fm, struct eventfd_ctx *const *trigger)
{
	spin_lock(&fm->state_lock);
	if (*trigger)
		fp_eventfd_signal(*trigger);
	spin_unlock(&fm->state_lock);
}

static bool fp_dead(struct fp_mdev *fm)
{
	return READ_ONCE(fm->dead);
}

/* The agent is gone or did not answer: the device is surprise-removed until the next open. */
static void fp_mark_dead(struct fp_mdev *fm, int why)
{
	spin_lock(&fm->state_lock);
	if (!fm->dead) {
		WRITE_ONCE(fm->dead, true);
		fp_count(FP_C_SURPRISE_REMOVED, 1);
		dev_warn(fm->vdev.dev, "farpass: device %u surprise-removed (agent: %pe)\n",
			 fm->rdev->desc.device_id, ERR_PTR(why));
		if (fm->err_trigger)
			fp_eventfd_signal(fm->err_trigger);
	}
	spin_unlock(&fm->state_lock);
}

int fp_device_revoke(u32 device_id, u32 *flags)
{
	struct fp_rdev *rdev;
	struct fp_mdev *fm;
	int ret = -ENOENT;

	mutex_lock(&fp_lock);
	list_for_each_entry(rdev, &fp_devices, node) {
		if (rdev->desc.device_id != device_id)
			continue;
		spin_lock(&rdev->link->inst_lock);
		fm = rdev->inst;
		ret = -ENODATA;
		if (fm) {
			spin_lock(&fm->state_lock);
			if (!fm->dead) {
				WRITE_ONCE(fm->dead, true);
				fp_count(FP_C_REVOKED, 1);
				dev_warn(fm->vdev.dev, "farpass: device %u revoked: its lender ended the lease\n",
					 device_id);
			}
			/* Not the error eventfd: QEMU would stop the VM. The request unplugs the device. */
			if (fm->req_trigger)
				fp_eventfd_signal(fm->req_trigger);
			else
				*flags |= FARPASS_REVOKE_F_NO_REQUEST;
			spin_unlock(&fm->state_lock);
			ret = 0;
		}
		spin_unlock(&rdev->link->inst_lock);
		break;
	}
	mutex_unlock(&fp_lock);
	return ret;
}

/* One upcall for this instance: fails at once on a dead device, kills the device on no answer. */
static int fp_call(struct fp_mdev *fm, u32 op, u64 arg0, u64 arg1, u64 arg2, u64 *out)
{
	u64 args[FP_UPCALL_NARGS] = { arg0, arg1, arg2 };
	u64 data[FP_UPCALL_NARGS];
	int ret;

	/* RETURN goes out even then: until the lender confirms it, our window range stays quarantined. */
	if (fp_dead(fm) && op != FARPASS_UPCALL_RETURN)
		return -ENODEV;
	ret = fp_upcall(&fm->uq_share, op, fm->rdev->desc.device_id, args, data);
	if (ret == -ETIMEDOUT || ret == -ENOTCONN)
		fp_mark_dead(fm, ret);
	else if (ret == -EBUSY)	/* its own requests fill its share: the agent is alive */
		dev_warn_ratelimited(fm->vdev.dev, "farpass: device %u: %u upcalls outstanding, op %u refused\n",
				     fm->rdev->desc.device_id, FP_UPCALL_SHARE, op);
	else if (!ret && out)
		*out = data[0];
	return ret;
}

static int fp_scan_read(void *ctx, u32 off, u32 size, u32 *val)
{
	u64 v = 0;
	int ret = fp_call(ctx, FARPASS_UPCALL_CFG_READ, off, size, 0, &v);

	*val = (u32)v;
	return ret;
}

/*
 * Ahead of the borrow, at the VFIO user's first access after open (type1 pins only for a device already
 * registered for its unmaps, which open_device is not yet): the RAM it has mapped (QEMU maps it before it
 * opens the device) laid out in its context, pinned by the refill work, so the guest's bus-master write
 * waits only for what is left. Nothing mapped yet, or no room: the borrow does it all, as without.
 */
static void fp_dma_stage(struct fp_mdev *fm)
{
	struct fp_dmawin *w;

	if (!fp_xwin_ready(fm->rdev->link) ||
	    fp_dmawin_stage(fm->rdev->link, &fm->vdev, fm->rdev->desc.device_id, &w))
		return;
	mutex_lock(&fm->dma_lock);
	if (fm->dmawin || fm->staged) {	/* another thread's access borrowed meanwhile */
		fp_dmawin_discard(w);
	} else {
		fm->staged = w;
		fm->refill_tries = 0;
		mod_delayed_work(system_wq, &fm->refill, 0);
	}
	mutex_unlock(&fm->dma_lock);
}

static void fp_dma_unstage(struct fp_mdev *fm)
{
	mutex_lock(&fm->dma_lock);
	if (fm->staged)
		fp_dmawin_discard(fm->staged);
	fm->staged = NULL;
	mutex_unlock(&fm->dma_lock);
}

/*
 * The virtual config space is built at the first config access after open: the header from the
 * announced BARs, the capability chain from the lender's (a few CFG_READ upcalls). Concurrent first
 * accesses wait on scan_lock, at most one upcall timeout (then the device is dead and the rest fails
 * at once). Then the DMA window is staged (fp_dma_stage).
 */
void fp_cfg_ready(struct fp_mdev *fm)
{
	bool first = false;
	int ret;

	/* Pairs with the release below: a true `scanned` means vcfg is complete. */
	if (smp_load_acquire(&fm->scanned))
		return;
	mutex_lock(&fm->scan_lock);
	if (!fm->scanned) {
		fp_vcfg_init(&fm->vcfg, fm->rdev->desc.bars);
		ret = fp_vcfg_scan_caps(&fm->vcfg, fp_scan_read, fm);
		fm->scan_err = ret;
		if (ret)
			dev_warn_ratelimited(fm->vdev.dev, "farpass: capability scan of device %u: %pe\n",
					     fm->rdev->desc.device_id, ERR_PTR(ret < -1 ? ret : -EINVAL));
		smp_store_release(&fm->scanned, true);	/* vcfg before the flag */
		first = true;
	}
	mutex_unlock(&fm->scan_lock);
	if (first)
		fp_dma_stage(fm);
}

/* A forwarded piece to the lender: CFG_READ or CFG_WRITE upcall. */
static int fp_cfg_upcall(struct fp_mdev *fm, const struct fp_cfg_piece *p, u8 *buf, bool write)
{
	u64 val = 0;
	u32 i;
	int ret;

	fp_count(FP_C_CFG_FORWARDED, 1);
	if (write) {
		for (i = 0; i < p->size; i++)
			val |= (u64)buf[i] << (8 * i);
		return fp_call(fm, FARPASS_UPCALL_CFG_WRITE, p->off, p->size, val, NULL);
	}
	ret = fp_call(fm, FARPASS_UPCALL_CFG_READ, p->off, p->size, 0, &val);
	if (!ret)
		for (i = 0; i < p->size; i++)
			buf[i] = (u8)(val >> (8 * i));
	return ret;
}

/*
 * A forwarded piece. Before the borrow the lender's agent refuses writes (the device may be another
 * borrower's): they are kept in pend and replayed at the borrow (fp_cfg_replay()), and reads show the
 * kept bytes over the lender's value, so the VFIO user reads back what it wrote. bm_lock orders a
 * write against the borrow: none is kept after the replay, none forwarded before it.
 */
static int fp_cfg_forward(struct fp_mdev *fm, const struct fp_cfg_piece *p, u8 *buf, bool write)
{
	int ret = 0;

	if (!write) {
		ret = fp_cfg_upcall(fm, p, buf, false);
		if (!ret && !READ_ONCE(fm->borrowed)) {	/* nothing is pending while borrowed */
			mutex_lock(&fm->bm_lock);
			fp_cfg_pend_read(&fm->pend, p->off, p->size, buf);
			mutex_unlock(&fm->bm_lock);
		}
		return ret;
	}
	mutex_lock(&fm->bm_lock);
	if (fm->borrowed) {
		ret = fp_cfg_upcall(fm, p, buf, true);
	} else {
		fp_cfg_pend_write(&fm->pend, p->off, p->size, buf);
		fp_count(FP_C_CFG_DEFERRED, 1);
	}
	mutex_unlock(&fm->bm_lock);
	return ret;
}

/* Kept writes go at reset of an unborrowed device and at close: the device never saw them. */
static void fp_cfg_pend_drop(struct fp_mdev *fm)
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
 * The interrupt bridge delivers a vector of our irq_slot (hard-irq context). INTx is level-triggered
 * and automasked, as vfio-pci's: a delivery masks it until the VFIO user unmasks (fp_intx_unmask());
 * the lender's vfio-pci masked its line too, so one delivered while masked is not lost: the line,
 * still asserted, fires again once the unmask reaches the lender.
 */
static void fp_irq_deliver(void *ctx, u32 vector)
{
	struct fp_mdev *fm = ctx;
	unsigned long flags;
	enum fp_counter what = FP_C_IRQ_NO_EVENTFD;

	spin_lock_irqsave(&fm->irq_lock, flags);
	if (vector < fm->irq_count && fm->irq_trig[vector]) {
		if (fm->irq_index == VFIO_PCI_INTX_IRQ_INDEX && fm->intx_masked) {
			what = FP_C_INTX_MASKED;
		} else {
			fm->intx_masked = fm->irq_index == VFIO_PCI_INTX_IRQ_INDEX;
			fp_eventfd_signal(fm->irq_trig[vector]);
			what = FP_C_IRQ_SIGNALLED;
		}
	}
	spin_unlock_irqrestore(&fm->irq_lock, flags);
	fp_count(what, 1);
}

/*
 * The link is back after an outage: an interrupt the lender relayed meanwhile is lost, and so is an
 * INTx unmask we posted. Each armed MSI or MSI-X vector fires once (spurious MSIs are harmless: the
 * driver finds nothing new, as after a mailbox resync), so a completion that came during the outage
 * is seen now, not at the driver's timeout. An unmasked INTx has its unmask posted again (the lender's
 * vfio-pci may hold the line masked still; it ignores an unmask of an unmasked line, and a line still
 * asserted fires again); a masked one waits for the VFIO user's unmask as before.
 */
static void fp_irq_link_back(void *ctx)
{
	struct fp_mdev *fm = ctx;
	unsigned long flags;
	bool unmask;
	u32 v, n = 0;

	spin_lock_irqsave(&fm->irq_lock, flags);
	unmask = fm->irq_index == VFIO_PCI_INTX_IRQ_INDEX && fm->irq_count && fm->irq_trig[0] && !fm->intx_masked;
	for (v = 0; fm->irq_index != VFIO_PCI_INTX_IRQ_INDEX && v < fm->irq_count; v++) {
		if (fm->irq_trig[v]) {
			fp_eventfd_signal(fm->irq_trig[v]);
			n++;
		}
	}
	spin_unlock_irqrestore(&fm->irq_lock, flags);
	fp_count(FP_C_IRQ_RESENT, n);
	if (unmask)
		fp_irq_post_unmask(fm->rdev->link, fm->rdev->desc.irq_slot);
}

static const struct fp_irq_target_ops fp_irq_target = {
	.deliver = fp_irq_deliver,
	.link_back = fp_irq_link_back,
};

/*
 * The VFIO user unmasks INTx (SET_IRQS ACTION_UNMASK, or its unmask eventfd: any context). Only a
 * masked one goes to the lender, so a VFIO user cannot make the link carry more unmasks than the
 * device raised interrupts, plus one per MASK.
 */
static void fp_intx_unmask(struct fp_mdev *fm)
{
	unsigned long flags;
	bool post;

	spin_lock_irqsave(&fm->irq_lock, flags);
	post = fm->irq_index == VFIO_PCI_INTX_IRQ_INDEX && fm->intx_masked;
	fm->intx_masked = false;
	spin_unlock_irqrestore(&fm->irq_lock, flags);
	/* Not borrowed: the lender armed nothing, its next arming starts unmasked. */
	if (post && READ_ONCE(fm->borrowed))
		fp_irq_post_unmask(fm->rdev->link, fm->rdev->desc.irq_slot);
}

static int fp_intx_unmask_fired(void *opaque, void *unused)
{
	fp_intx_unmask(opaque);
	return 0;
}

/* The INTx unmask eventfd: @fd, or none (-1). bm_lock held. */
static int fp_intx_unmask_fd(struct fp_mdev *fm, s32 fd)
{
	lockdep_assert_held(&fm->bm_lock);
	if (fd < 0) {
		vfio_virqfd_disable(&fm->intx_unmask);
		return 0;
	}
	return vfio_virqfd_enable(fm, fp_intx_unmask_fired, NULL, NULL, &fm->intx_unmask, fd);
}

/* Swap in a new trigger table (NULL: none) for @index; the old one's eventfds are released. */
static void fp_irq_swap(struct fp_mdev *fm, int index, u32 count, struct eventfd_ctx **trig)
{
	struct eventfd_ctx **old;
	u32 i, n;

	lockdep_assert_held(&fm->bm_lock);
	spin_lock_irq(&fm->irq_lock);
	old = fm->irq_trig;
	n = fm->irq_count;
	fm->irq_trig = trig;
	fm->irq_count = count;
	fm->irq_index = index;
	fm->intx_masked = false;	/* the lender arms it unmasked */
	spin_unlock_irq(&fm->irq_lock);
	for (i = 0; old && i < n; i++)
		if (old[i])
			eventfd_ctx_put(old[i]);
	kfree(old);
}

/*
 * INTx/MSI/MSI-X off locally (close, DATA_NONE with count 0), INTx's unmask eventfd with it (as
 * vfio-pci); the caller tells the lender if borrowed.
 */
static void fp_irq_disable(struct fp_mdev *fm)
{
	fp_intx_unmask_fd(fm, -1);
	fp_irq_swap(fm, -1, 0, NULL);
}

/* Tell the lender how many vectors of which index to arm (SET_IRQS upcall); only while borrowed. */
static int fp_irq_upcall(struct fp_mdev *fm, int index, u32 count)
{
	lockdep_assert_held(&fm->bm_lock);
	if (!fm->borrowed || index < 0)
		return 0;
	return fp_call(fm, FARPASS_UPCALL_SET_IRQS, fm->instance, index, count, NULL);
}

/* Our DMA window goes; its range stays quarantined unless the lender confirmed the lease ended. */
static void fp_dma_destroy(struct fp_mdev *fm, bool returned)
{
	mutex_lock(&fm->dma_lock);
	if (fm->dmawin)
		fp_dmawin_destroy(fm->dmawin, returned);
	fm->dmawin = NULL;
	mutex_unlock(&fm->dma_lock);
}

/*
 * Give the device back: the BAR mmaps revoked, then RETURN (the lender stops the device and unmaps
 * its side), then the interrupt bridge and our DMA window (unmapped, IOTLB flushed, then unpinned).
 * A failed RETURN still ends the borrow here, but not the lender's possible mappings of the window.
 */
static void fp_return(struct fp_mdev *fm)
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
static int fp_borrow(struct fp_mdev *fm)
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

/*
 * A write to the command register. Bus-master enable 0 -> 1 borrows the device (if that fails, the
 * bit stays 0), 1 -> 0 returns it. bm_lock serialises borrow state changes (command writes, reset,
 * close, SET_IRQS) and is held across their upcalls, so a dead agent holds another vCPU here for at
 * most one timeout.
 */
static int fp_cfg_command(struct fp_mdev *fm, const struct fp_cfg_piece *p, const u8 *buf)
{
	u16 old, new;
	bool bme;
	int ret = 0;

	mutex_lock(&fm->bm_lock);
	spin_lock(&fm->state_lock);
	old = fp_vcfg_command(&fm->vcfg);
	fp_vcfg_write(&fm->vcfg, p->off, p->size, buf);
	new = fp_vcfg_command(&fm->vcfg);
	bme = new & FP_PCI_CMD_BME;
	if ((old ^ new) & FP_PCI_CMD_BME)	/* the BME change waits for the agent */
		fp_vcfg_set_command(&fm->vcfg, (new & ~FP_PCI_CMD_BME) | (old & FP_PCI_CMD_BME));
	spin_unlock(&fm->state_lock);

	if ((old ^ new) & FP_PCI_CMD_BME) {
		if (bme)
			ret = fp_borrow(fm);
		else
			fp_return(fm);
		if (!ret) {
			spin_lock(&fm->state_lock);
			fp_vcfg_set_command(&fm->vcfg, (fp_vcfg_command(&fm->vcfg) & ~FP_PCI_CMD_BME) |
					    (bme ? FP_PCI_CMD_BME : 0));
			spin_unlock(&fm->state_lock);
		}
	}
	mutex_unlock(&fm->bm_lock);
	return ret;
}

/*
 * The one dispatcher of config-space accesses: fp_vcfg_piece() splits [off, off + count) into pieces
 * of one kind each (cfg.c decides which bytes are virtual, forwarded or hidden), served here.
 * A dead device reads all-ones and fails writes with -ENODEV.
 */
static ssize_t fp_cfg_access(struct fp_mdev *fm, u8 *buf, u32 count, u32 off, bool write)
{
	struct fp_cfg_piece p;
	u32 done = 0;
	int ret;

	fp_count(write ? FP_C_CFG_WRITES : FP_C_CFG_READS, 1);
	fp_cfg_ready(fm);
	while (done < count) {
		if (fp_dead(fm)) {
			if (write)
				return done ? (ssize_t)done : -ENODEV;
			memset(buf + done, 0xff, count - done);
			return count;
		}
		spin_lock(&fm->state_lock);
		fp_vcfg_piece(&fm->vcfg, off + done, count - done, &p);
		if (p.kind != FP_CFG_FWD && !(p.kind == FP_CFG_CMD && write)) {
			if (write)
				fp_vcfg_write(&fm->vcfg, p.off, p.size, buf + done);
			else
				fp_vcfg_read(&fm->vcfg, p.off, p.size, buf + done);
			spin_unlock(&fm->state_lock);
			done += p.size;
			continue;
		}
		spin_unlock(&fm->state_lock);
		if (p.kind == FP_CFG_CMD)
			ret = fp_cfg_command(fm, &p, buf + done);
		else
			ret = fp_cfg_forward(fm, &p, buf + done, write);
		if (ret && !fp_dead(fm))
			return done ? (ssize_t)done : ret;	/* the agent's own error for this access */
		if (!ret)
			done += p.size;
	}
	return count;
}

static ssize_t fp_vfio_rw(struct vfio_device *vdev, char __user *ubuf, size_t count, loff_t *ppos,
			  bool write)
{
	struct fp_mdev *fm = fp_mdev_of(vdev);
	u64 pos = *ppos;
	u64 off = pos & FP_OFFSET_MASK;
	ssize_t ret;
	u8 *buf;

	if (pos >> FP_OFFSET_SHIFT != VFIO_PCI_CONFIG_REGION_INDEX) {
		if (!count)
			return -EINVAL;
		ret = fp_bar_rw(fm, pos >> FP_OFFSET_SHIFT, ubuf, count, pos & FP_OFFSET_MASK, write);
		if (ret > 0)
			*ppos += ret;
		return ret;
	}
	if (off >= FP_CFG_REGION_SIZE || !count)
		return -EINVAL;
	count = min_t(size_t, count, FP_CFG_REGION_SIZE - off);
	buf = kmalloc(count, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	ret = -EFAULT;
	if (write && copy_from_user(buf, ubuf, count))
		goto out;
	ret = fp_cfg_access(fm, buf, count, off, write);
	if (ret > 0 && !write && copy_to_user(ubuf, buf, ret))
		ret = -EFAULT;
	if (ret > 0)
		*ppos += ret;
out:
	kfree(buf);
	return ret;
}

static ssize_t fp_vfio_read(struct vfio_device *vdev, char __user *buf, size_t count, loff_t *ppos)
{
	return fp_vfio_rw(vdev, buf, count, ppos, false);
}

static ssize_t fp_vfio_write(struct vfio_device *vdev, const char __user *buf, size_t count,
			     loff_t *ppos)
{
	return fp_vfio_rw(vdev, (char __user *)buf, count, ppos, true);
}

/*
 * QEMU re-splits a RAM section whenever the guest changes what is mapped next to it (SeaBIOS opening
 * and closing the PAM shadow area, SMRAM, a reset): VFIO_IOMMU_UNMAP_DMA of the whole old section
 * (our dma_unmap, which must unpin), then VFIO_IOMMU_MAP_DMA of the new pieces, which an mdev parent
 * is never told about. So after an unmap that took pages out of the window, pin back whatever is
 * mapped again: FP_REFILL_DELAY_MS after the last unmap (QEMU's maps follow its unmaps within one
 * memory transaction), then at doubling delays while pages are missing, FP_REFILL_TRIES times (memory
 * that stays unmapped, a DIMM unplugged or a BIOS area made read-only, ends the retries). Never while
 * type1 may still be telling another instance of the same VFIO user about an unmap (dmauser.c).
 */
#define FP_REFILL_DELAY_MS	20
#define FP_REFILL_TRIES		8
/* Pages pinned per hold of dma_lock (32 MiB): QEMU's unmaps, under its big lock, wait no longer. */
#define FP_REFILL_BATCH		(SZ_32M >> PAGE_SHIFT)

static void fp_refill_work(struct work_struct *work)
{
	struct fp_mdev *fm = container_of(to_delayed_work(work), struct fp_mdev, refill);
	unsigned long wait = fp_dmauser_refill_wait(fm->dmauser, msecs_to_jiffies(FP_REFILL_DELAY_MS));
	struct fp_dmawin *w;
	bool more = false;
	long missing = 0;

	if (wait) {	/* not a try: nothing was looked at */
		schedule_delayed_work(&fm->refill, wait);
		return;
	}
	mutex_lock(&fm->dma_lock);
	w = fm->dmawin ?: fm->staged;
	if (w)
		missing = fp_dmawin_refill(w, FP_REFILL_BATCH, &more);
	if (missing < 0)
		dev_warn_ratelimited(fm->vdev.dev, "farpass: device %u: pinning guest RAM: %pe\n",
				     fm->rdev->desc.device_id, ERR_PTR(missing));
	else if (more)	/* not a try: the batch ended it */
		schedule_delayed_work(&fm->refill, 0);
	else if (missing && ++fm->refill_tries < FP_REFILL_TRIES)
		schedule_delayed_work(&fm->refill, msecs_to_jiffies(FP_REFILL_DELAY_MS << fm->refill_tries));
	mutex_unlock(&fm->dma_lock);
}

static int fp_vfio_open(struct vfio_device *vdev)
{
	struct fp_mdev *fm = fp_mdev_of(vdev);
	int ret;

	ret = fp_bar_open(fm);
	if (ret)
		return ret;
	fm->dmauser = fp_dmauser_get();
	if (IS_ERR(fm->dmauser)) {
		ret = PTR_ERR(fm->dmauser);
		goto err_bar_close;
	}

	/* Lazy borrow: nothing is borrowed at open; bus-master enable does it. A fresh start. */
	WRITE_ONCE(fm->dead, false);
	fm->scanned = false;
	fm->borrowed = false;
	fm->irq_index = -1;
	fp_p2p_open(fm);
	fp_count(FP_C_VFIO_OPEN, 1);
	return 0;

err_bar_close:
	fp_bar_close(fm);
	return ret;
}

static void fp_vfio_close(struct vfio_device *vdev)
{
	struct fp_mdev *fm = fp_mdev_of(vdev);
	struct eventfd_ctx *err, *req;

	fp_p2p_close(fm);
	mutex_lock(&fm->bm_lock);
	if (fm->borrowed)
		fp_return(fm);
	fp_irq_disable(fm);
	fp_cfg_pend_drop(fm);
	mutex_unlock(&fm->bm_lock);
	cancel_delayed_work_sync(&fm->refill);
	fp_dma_unstage(fm);
	fp_dmauser_put(fm->dmauser);
	fp_bar_close(fm);
	spin_lock(&fm->state_lock);
	err = fm->err_trigger;
	req = fm->req_trigger;
	fm->err_trigger = fm->req_trigger = NULL;
	spin_unlock(&fm->state_lock);
	if (err)
		eventfd_ctx_put(err);
	if (req)
		eventfd_ctx_put(req);
	fp_count(FP_C_VFIO_OPEN, -1);
}

/*
 * VFIO_DEVICE_RESET: a borrowed device is reset by the lender (RESET upcall) and returned. An
 * unborrowed one has nothing of ours to reset: the lender resets a device at every return before
 * lending it again (and it may be another borrower's now), so only our virtual config space goes
 * back to its reset state. QEMU resets at machine reset and after clearing bus master (which already
 * returned the device), and reports a failed reset as "no available reset mechanism".
 */
static int fp_vfio_reset(struct fp_mdev *fm)
{
	int ret = 0;

	fp_cfg_ready(fm);
	mutex_lock(&fm->bm_lock);
	if (fm->borrowed)
		ret = fp_call(fm, FARPASS_UPCALL_RESET, fm->instance, 0, 0, NULL);
	if (!ret) {
		fp_count(FP_C_RESETS, 1);
		spin_lock(&fm->state_lock);
		fp_vcfg_reset(&fm->vcfg);
		spin_unlock(&fm->state_lock);
		fp_cfg_pend_drop(fm);	/* none while borrowed */
		if (fm->borrowed)
			fp_return(fm);
	}
	mutex_unlock(&fm->bm_lock);
	return fp_dead(fm) ? -ENODEV : ret;
}

static int fp_vfio_region_info(struct fp_mdev *fm, unsigned long arg)
{
	unsigned long minsz = offsetofend(struct vfio_region_info, offset);
	struct vfio_info_cap caps = { .buf = NULL, .size = 0 };
	const struct farpass_bar *bars = fm->rdev->desc.bars;
	const struct farpass_bar *b;
	struct vfio_region_info info;
	int ret = 0;

	if (copy_from_user(&info, (void __user *)arg, minsz))
		return -EFAULT;
	if (info.argsz < minsz)
		return -EINVAL;
	if (info.index >= VFIO_PCI_NUM_REGIONS)
		return -EINVAL;
	info.offset = FP_OFFSET(info.index);
	info.flags = 0;
	info.size = 0;
	info.cap_offset = 0;
	if (info.index == VFIO_PCI_CONFIG_REGION_INDEX) {
		info.size = FP_CFG_REGION_SIZE;
		info.flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
	} else if (fp_bar_mapped(fm, info.index)) {
		b = fp_bar_mapped(fm, info.index);
		info.size = b->size;
		info.flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE |
			     VFIO_REGION_INFO_FLAG_MMAP;
		ret = fp_bar_sparse_cap(fm, info.index, b->size, &caps);
		if (ret)
			return ret;
	} else if (info.index <= VFIO_PCI_BAR5_REGION_INDEX &&
		   !(info.index && bars[info.index - 1].flags & FARPASS_BAR_MEM64)) {
		/* Not in the BAR window (I/O BARs; a lender that placed no slot): the size only. */
		info.size = bars[info.index].size;
	}
	if (caps.size) {
		info.flags |= VFIO_REGION_INFO_FLAG_CAPS;
		if (info.argsz < sizeof(info) + caps.size) {
			info.argsz = sizeof(info) + caps.size;	/* the caller asks again */
		} else {
			vfio_info_cap_shift(&caps, sizeof(info));
			if (copy_to_user((void __user *)arg + sizeof(info), caps.buf, caps.size))
				ret = -EFAULT;
			info.cap_offset = sizeof(info);
		}
		kfree(caps.buf);
	}
	if (!ret && copy_to_user((void __user *)arg, &info, minsz))
		ret = -EFAULT;
	return ret;
}

/* Vectors of each index: MSI from the multiple-message capable field, MSI-X the table size. */
static u32 fp_irq_max(struct fp_mdev *fm, u32 index)
{
	const struct fp_vcfg *c = &fm->vcfg;
	__le16 ctrl;
	u8 cap;

	switch (index) {
	case VFIO_PCI_MSI_IRQ_INDEX:
	case VFIO_PCI_MSIX_IRQ_INDEX:
		fp_cfg_ready(fm);
		cap = index == VFIO_PCI_MSI_IRQ_INDEX ? c->msi : c->msix;
		if (!cap)
			return 0;
		spin_lock(&fm->state_lock);
		fp_vcfg_read(c, cap + PCI_MSI_FLAGS, 2, (u8 *)&ctrl);
		spin_unlock(&fm->state_lock);
		if (index == VFIO_PCI_MSIX_IRQ_INDEX)
			return (le16_to_cpu(ctrl) & PCI_MSIX_FLAGS_QSIZE) + 1;
		return 1U << min_t(u32, FIELD_GET(PCI_MSI_FLAGS_QMASK, le16_to_cpu(ctrl)), 5);
	case VFIO_PCI_INTX_IRQ_INDEX:
		fp_cfg_ready(fm);
		return c->vconf[FP_PCI_INTERRUPT_PIN] ? 1 : 0;	/* the lender's pin, fixed by the scan */
	case VFIO_PCI_ERR_IRQ_INDEX:
	case VFIO_PCI_REQ_IRQ_INDEX:
		return 1;
	default:
		return 0;
	}
}

static int fp_vfio_irq_info(struct fp_mdev *fm, unsigned long arg)
{
	unsigned long minsz = offsetofend(struct vfio_irq_info, count);
	struct vfio_irq_info info;

	if (copy_from_user(&info, (void __user *)arg, minsz))
		return -EFAULT;
	if (info.argsz < minsz || info.index >= VFIO_PCI_NUM_IRQS)
		return -EINVAL;
	info.flags = VFIO_IRQ_INFO_EVENTFD;
	if (info.index == VFIO_PCI_MSI_IRQ_INDEX || info.index == VFIO_PCI_MSIX_IRQ_INDEX)
		info.flags |= VFIO_IRQ_INFO_NORESIZE;	/* as vfio-pci of this kernel */
	else if (info.index == VFIO_PCI_INTX_IRQ_INDEX)
		info.flags |= VFIO_IRQ_INFO_MASKABLE | VFIO_IRQ_INFO_AUTOMASKED;
	info.count = fp_irq_max(fm, info.index);
	return copy_to_user((void __user *)arg, &info, minsz) ? -EFAULT : 0;
}

/* DATA_EVENTFD: eventfds (-1 = none) for vectors [start, start + count) of an enabled index. */
static int fp_irq_set_eventfds(struct fp_mdev *fm, u32 start, u32 count, const s32 *fds)
{
	struct eventfd_ctx **ctx, *old;
	u32 i;
	int ret = 0;

	ctx = kcalloc(count, sizeof(*ctx), GFP_KERNEL);
	if (!ctx)
		return -ENOMEM;
	for (i = 0; i < count && !ret; i++) {
		if (fds[i] < 0)
			continue;
		ctx[i] = eventfd_ctx_fdget(fds[i]);
		if (IS_ERR(ctx[i])) {
			ret = PTR_ERR(ctx[i]);
			ctx[i] = NULL;
		}
	}
	if (!ret) {
		spin_lock_irq(&fm->irq_lock);
		for (i = 0; i < count; i++)
			swap(fm->irq_trig[start + i], ctx[i]);
		spin_unlock_irq(&fm->irq_lock);
	}
	for (i = 0; i < count; i++) {
		old = ctx[i];	/* the replaced ones, or ours on error */
		if (old)
			eventfd_ctx_put(old);
	}
	kfree(ctx);
	return ret;
}

/*
 * INTx MASK and UNMASK, as vfio-pci's vfio_pci_set_intx_mask()/_unmask(): DATA_NONE or a true BOOL
 * masks or unmasks now, UNMASK's DATA_EVENTFD sets the unmask eventfd (-1: none). bm_lock held.
 */
static int fp_irq_set_intx_mask(struct fp_mdev *fm, const struct vfio_irq_set *hdr, const void *data)
{
	bool unmask = (hdr->flags & VFIO_IRQ_SET_ACTION_TYPE_MASK) == VFIO_IRQ_SET_ACTION_UNMASK;

	lockdep_assert_held(&fm->bm_lock);
	if (fm->irq_index != VFIO_PCI_INTX_IRQ_INDEX || hdr->count != 1)
		return -EINVAL;
	if (hdr->flags & VFIO_IRQ_SET_DATA_EVENTFD)
		return unmask ? fp_intx_unmask_fd(fm, *(const s32 *)data) : -ENOTTY;
	if (hdr->flags & VFIO_IRQ_SET_DATA_BOOL && !*(const u8 *)data)
		return 0;
	if (unmask) {
		fp_intx_unmask(fm);
	} else {
		spin_lock_irq(&fm->irq_lock);
		fm->intx_masked = true;
		spin_unlock_irq(&fm->irq_lock);
	}
	return 0;
}

/*
 * VFIO_DEVICE_SET_IRQS triggers of INTx, MSI and MSI-X, as vfio-pci's vfio_pci_set_intx_trigger()
 * and vfio_pci_set_msi_trigger(): DATA_EVENTFD enables the index with start + count vectors if it is
 * off, then sets the eventfds (-1: none for that vector, the index stays on); DATA_NONE with
 * count 0 disables; DATA_NONE/BOOL trigger the vectors' eventfds. Enabling, disabling or resizing is
 * a SET_IRQS upcall while borrowed (the lender arms that many vectors on the device). bm_lock held.
 */
static int fp_irq_set_trigger(struct fp_mdev *fm, const struct vfio_irq_set *hdr, const void *data)
{
	struct eventfd_ctx **trig;
	const u8 *bools = data;
	int index = hdr->index;
	u32 i, n;
	int ret;

	lockdep_assert_held(&fm->bm_lock);
	if ((hdr->flags & VFIO_IRQ_SET_ACTION_TYPE_MASK) != VFIO_IRQ_SET_ACTION_TRIGGER) {
		if (index == VFIO_PCI_INTX_IRQ_INDEX)
			return fp_irq_set_intx_mask(fm, hdr, data);
		return -ENOTTY;		/* vfio-pci has no MSI/MSI-X masking either */
	}
	if (fm->irq_index == index && !hdr->count && hdr->flags & VFIO_IRQ_SET_DATA_NONE) {
		fp_irq_disable(fm);
		fp_irq_upcall(fm, index, 0);
		return 0;
	}
	if (fm->irq_index >= 0 && fm->irq_index != index)
		return -EINVAL;
	if (hdr->flags & VFIO_IRQ_SET_DATA_EVENTFD) {
		if (fm->irq_index == index)
			return hdr->start + hdr->count > fm->irq_count ? -EINVAL :
			       fp_irq_set_eventfds(fm, hdr->start, hdr->count, data);
		n = hdr->start + hdr->count;
		trig = kcalloc(n, sizeof(*trig), GFP_KERNEL);
		if (!trig)
			return -ENOMEM;
		fp_irq_swap(fm, index, n, trig);
		ret = fp_irq_set_eventfds(fm, hdr->start, hdr->count, data);
		if (!ret)
			ret = fp_irq_upcall(fm, index, n);
		if (ret)
			fp_irq_disable(fm);
		return ret;
	}
	if (fm->irq_index != index || hdr->start + hdr->count > fm->irq_count)
		return hdr->count ? -EINVAL : 0;	/* disabling what is off is a no-op */
	spin_lock_irq(&fm->irq_lock);
	for (i = 0; i < hdr->count; i++)
		if (fm->irq_trig[hdr->start + i] && (hdr->flags & VFIO_IRQ_SET_DATA_NONE || bools[i]))
			fp_eventfd_signal(fm->irq_trig[hdr->start + i]);
	spin_unlock_irq(&fm->irq_lock);
	return 0;
}

/* SET_IRQS on ERR or REQ: one trigger each, kept under state_lock. */
static int fp_irq_set_err_req(struct fp_mdev *fm, const struct vfio_irq_set *hdr, const void *data)
{
	struct eventfd_ctx *ctx = NULL, *old, **slot;
	s32 fd = -1;

	if (!(hdr->flags & VFIO_IRQ_SET_ACTION_TRIGGER))
		return -EINVAL;
	slot = hdr->index == VFIO_PCI_ERR_IRQ_INDEX ? &fm->err_trigger : &fm->req_trigger;
	if (hdr->flags & (VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_DATA_BOOL)) {
		if (hdr->count && (hdr->flags & VFIO_IRQ_SET_DATA_NONE || *(const u8 *)data))
			fp_signal(fm, slot);
		return 0;
	}
	/* DATA_EVENTFD */
	if (hdr->count)
		fd = *(const s32 *)data;
	if (fd >= 0) {
		ctx = eventfd_ctx_fdget(fd);
		if (IS_ERR(ctx))
			return PTR_ERR(ctx);
	}
	spin_lock(&fm->state_lock);
	old = *slot;
	*slot = ctx;
	/* A device that died before the VFIO user set its error eventfd: tell it now. */
	if (ctx && slot == &fm->err_trigger && fm->dead)
		fp_eventfd_signal(ctx);
	spin_unlock(&fm->state_lock);
	if (old)
		eventfd_ctx_put(old);
	return 0;
}

static int fp_vfio_set_irqs(struct fp_mdev *fm, unsigned long arg)
{
	unsigned long minsz = offsetofend(struct vfio_irq_set, count);
	struct vfio_irq_set hdr;
	size_t data_size = 0;
	void *data = NULL;
	u32 max;
	int ret;

	if (copy_from_user(&hdr, (void __user *)arg, minsz))
		return -EFAULT;
	if (hdr.index >= VFIO_PCI_NUM_IRQS)
		return -EINVAL;
	max = fp_irq_max(fm, hdr.index);
	if (!max)
		return hdr.count ? -EINVAL : 0;		/* no INTx pin or no such capability: nothing to disable */
	ret = vfio_set_irqs_validate_and_prepare(&hdr, max, VFIO_PCI_NUM_IRQS, &data_size);
	if (ret)
		return ret;
	if (data_size) {
		data = memdup_user((void __user *)(arg + minsz), data_size);
		if (IS_ERR(data))
			return PTR_ERR(data);
	}
	if (hdr.index <= VFIO_PCI_MSIX_IRQ_INDEX) {	/* INTx, MSI, MSI-X */
		mutex_lock(&fm->bm_lock);
		ret = fp_irq_set_trigger(fm, &hdr, data);
		mutex_unlock(&fm->bm_lock);
	} else {
		ret = fp_irq_set_err_req(fm, &hdr, data);
	}
	kfree(data);
	return ret;
}

static long fp_vfio_ioctl(struct vfio_device *vdev, unsigned int cmd, unsigned long arg)
{
	struct fp_mdev *fm = fp_mdev_of(vdev);
	struct vfio_device_info info;
	unsigned long minsz;

	switch (cmd) {
	case VFIO_DEVICE_GET_INFO:
		minsz = offsetofend(struct vfio_device_info, num_irqs);
		if (copy_from_user(&info, (void __user *)arg, minsz))
			return -EFAULT;
		if (info.argsz < minsz)
			return -EINVAL;
		info.flags = VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET;
		info.num_regions = VFIO_PCI_NUM_REGIONS;
		info.num_irqs = VFIO_PCI_NUM_IRQS;
		return copy_to_user((void __user *)arg, &info, minsz) ? -EFAULT : 0;
	case VFIO_DEVICE_GET_REGION_INFO:
		return fp_vfio_region_info(fm, arg);
	case VFIO_DEVICE_GET_IRQ_INFO:
		return fp_vfio_irq_info(fm, arg);
	case VFIO_DEVICE_SET_IRQS:
		return fp_vfio_set_irqs(fm, arg);
	case VFIO_DEVICE_RESET:
		return fp_vfio_reset(fm);
	default:
		return -ENOTTY;
	}
}

/* The instance is being removed while a VFIO user holds it: ask the user to let go (REQ eventfd). */
static void fp_vfio_request(struct vfio_device *vdev, unsigned int count)
{
	struct fp_mdev *fm = fp_mdev_of(vdev);

	if (fm->req_trigger) {
		if (!(count % 10))
			dev_notice_ratelimited(vdev->dev, "farpass: asking the VFIO user to release the device (%u)\n",
					       count);
		fp_signal(fm, &fm->req_trigger);
	}
}

/*
 * The VFIO user unmaps guest memory (DIMM unplug, reset): pages of the DMA window there leave the
 * NTB's domain (IOTLB flushed) and are unpinned before we return, as vfio_pin_pages() requires. The
 * borrow stays; device DMA to that memory now faults, as on real hardware.
 */
static void fp_vfio_dma_unmap(struct vfio_device *vdev, u64 iova, u64 length)
{
	struct fp_mdev *fm = fp_mdev_of(vdev);
	struct fp_dmawin *w;

	fp_count(FP_C_DMA_UNMAP, 1);
	fp_dmauser_unmap_begin(fm->dmauser);
	mutex_lock(&fm->dma_lock);
	w = fm->dmawin ?: fm->staged;
	if (w && fp_dmawin_dma_unmap(w, iova, length)) {
		/* Not before QEMU's unmap is done: pins in its range now would make it call us again. */
		fm->refill_tries = 0;
		mod_delayed_work(system_wq, &fm->refill, msecs_to_jiffies(FP_REFILL_DELAY_MS));
	}
	mutex_unlock(&fm->dma_lock);
	fp_dmauser_unmap_end(fm->dmauser, msecs_to_jiffies(FP_REFILL_DELAY_MS));
}

static const struct vfio_device_ops fp_vfio_ops = {
	.name = FP_NAME,
	FP_VFIO_EMULATED_IOMMU_OPS,
	.open_device = fp_vfio_open,
	.close_device = fp_vfio_close,
	.read = fp_vfio_read,
	.write = fp_vfio_write,
	.ioctl = fp_vfio_ioctl,
	.mmap = fp_bar_mmap,
	.request = fp_vfio_request,
	.dma_unmap = fp_vfio_dma_unmap,
};

/* ------------------------------------------------------------------------------------ mdev_driver */

/* The device in @slot now, NULL if empty (inst_lock: see fp.h). */
static struct fp_rdev *fp_slot_rdev(struct fp_slot *slot)
{
	lockdep_assert_held(&slot->link->inst_lock);
	return slot->rdev;
}

static int fp_mdev_probe(struct mdev_device *mdev)
{
	struct fp_slot *slot = fp_slot_of(mdev->type);
	struct fp_link *link = slot->link;
	struct fp_rdev *rdev;
	struct fp_mdev *fm;
	int ret = 0;

	/* Claimed, the device stays in its slot (WITHDRAW fails with -EBUSY) until remove unclaims it. */
	spin_lock(&link->inst_lock);
	rdev = fp_slot_rdev(slot);
	if (!rdev)
		ret = -ENODEV;	/* an empty slot: its lender lends no device there now */
	else if (rdev->claimed)
		ret = -EUSERS;
	else
		rdev->claimed = true;
	spin_unlock(&link->inst_lock);
	if (ret)
		return ret;

	fm = vfio_alloc_device(fp_mdev, vdev, &mdev->dev, &fp_vfio_ops);
	if (IS_ERR(fm)) {
		ret = PTR_ERR(fm);
		goto err_unclaim;
	}
	fm->rdev = rdev;
	fm->instance = atomic_inc_return(&fp_instance_seq);
	mutex_init(&fm->scan_lock);
	mutex_init(&fm->bm_lock);
	spin_lock_init(&fm->state_lock);
	mutex_init(&fm->dma_lock);
	INIT_DELAYED_WORK(&fm->refill, fp_refill_work);
	spin_lock_init(&fm->irq_lock);
	mutex_init(&fm->bar_lock);
	fp_upcall_share_init(&fm->uq_share);
	fm->irq_index = -1;
	ret = vfio_register_emulated_iommu_dev(&fm->vdev);
	if (ret)
		goto err_put_vdev;
	dev_set_drvdata(&mdev->dev, fm);
	spin_lock(&link->inst_lock);
	rdev->inst = fm;
	spin_unlock(&link->inst_lock);
	fp_count(FP_C_INSTANCES, 1);
	return 0;

err_put_vdev:
	vfio_put_device(&fm->vdev);
err_unclaim:
	spin_lock(&link->inst_lock);
	rdev->claimed = false;
	spin_unlock(&link->inst_lock);
	return ret;
}

static void fp_mdev_remove(struct mdev_device *mdev)
{
	struct fp_mdev *fm = dev_get_drvdata(&mdev->dev);
	struct fp_rdev *rdev = fm->rdev;
	struct fp_link *link = rdev->link;

	/* REVOKE_DEVICE finds the instance under inst_lock only until here: then it may be freed. */
	spin_lock(&link->inst_lock);
	rdev->inst = NULL;
	spin_unlock(&link->inst_lock);
	vfio_unregister_group_dev(&fm->vdev);
	vfio_put_device(&fm->vdev);
	fp_count(FP_C_INSTANCES, -1);

	spin_lock(&link->inst_lock);
	rdev->claimed = false;
	spin_unlock(&link->inst_lock);
}

static unsigned int fp_mdev_get_available(struct mdev_type *mtype)
{
	struct fp_slot *slot = fp_slot_of(mtype);
	struct fp_rdev *rdev;
	unsigned int avail;

	spin_lock(&slot->link->inst_lock);
	rdev = fp_slot_rdev(slot);
	avail = rdev && !rdev->claimed;
	spin_unlock(&slot->link->inst_lock);
	return avail;
}

/* A filled slot names its device (as the lender's agent lists it), an empty one says so. */
static ssize_t fp_mdev_show_description(struct mdev_type *mtype, char *buf)
{
	struct fp_slot *slot = fp_slot_of(mtype);
	const struct farpass_announce *d;
	char label[FARPASS_NAME_LEN * 2 + 16];
	struct fp_rdev *rdev;
	ssize_t n;

	spin_lock(&slot->link->inst_lock);
	rdev = fp_slot_rdev(slot);
	if (!rdev) {
		n = sysfs_emit(buf, "empty: lender %s lends no device at slot %u to this host (NTB %s)\n",
			       slot->link->lender, slot->index, slot->link->name);
	} else {
		d = &rdev->desc;
		if (fp_device_label(label, sizeof(label), d->lender, d->vendor, d->device, d->lender_addr) < 0)
			label[0] = '\0';	/* cannot happen: the names fit */
		n = sysfs_emit(buf, "%s: class %06x, via NTB %s, farpass id %u\n", label, d->class_code,
			       d->ntb, d->device_id);
	}
	spin_unlock(&slot->link->inst_lock);
	return n;
}

struct mdev_driver fp_mdev_driver = {
	.device_api = VFIO_DEVICE_API_PCI_STRING,
	.driver = {
		.name = FP_NAME,
		.owner = THIS_MODULE,
		.mod_name = KBUILD_MODNAME,
	},
	.probe = fp_mdev_probe,
	.remove = fp_mdev_remove,
	.get_available = fp_mdev_get_available,
	.show_description = fp_mdev_show_description,
};

int fp_mdev_init(void)
{
	return mdev_register_driver(&fp_mdev_driver);
}

void fp_mdev_exit(void)
{
	mdev_unregister_driver(&fp_mdev_driver);
}
