// SPDX-License-Identifier: GPL-2.0-only
/*
 * vfio_irq.c - an instance's interrupts, as vfio-pci's: GET_IRQ_INFO and SET_IRQS of INTx, MSI, MSI-X,
 * ERR and REQ. The interrupt bridge (irqbridge.c) signals the eventfds; INTx is automasked at delivery
 * and its unmask goes back over the link; while borrowed, the lender is told how many vectors to arm.
 */
#include <linux/bitfield.h>
#include <linux/eventfd.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/vfio.h>

#include "cfg.h"
#include "compat.h"
#include "counters.h"
#include "fp.h"
#include "instance.h"
#include "irqbridge.h"
#include "proto.h"

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

const struct fp_irq_target_ops fp_irq_target = {
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
void fp_irq_disable(struct fp_mdev *fm)
{
	fp_intx_unmask_fd(fm, -1);
	fp_irq_swap(fm, -1, 0, NULL);
}

/* Tell the lender how many vectors of which index to arm (SET_IRQS upcall); only while borrowed. */
int fp_irq_upcall(struct fp_mdev *fm, int index, u32 count)
{
	lockdep_assert_held(&fm->bm_lock);
	if (!fm->borrowed || index < 0)
		return 0;
	return fp_call(fm, FARPASS_UPCALL_SET_IRQS, fm->instance, index, count, NULL);
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

int fp_vfio_irq_info(struct fp_mdev *fm, unsigned long arg)
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

int fp_vfio_set_irqs(struct fp_mdev *fm, unsigned long arg)
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
