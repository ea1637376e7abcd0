// SPDX-License-Identifier: GPL-2.0-only
/*
 * vfio_dma.c - an instance's DMA window against its VFIO user's memory map: staged at the first access
 * after open, pinned back after the user's unmaps (QEMU re-splits its RAM sections), destroyed at the
 * return. dmawin.c builds the window; dmauser.c orders the refills against the user's unmaps.
 */
#include <linux/mutex.h>
#include <linux/sizes.h>
#include <linux/workqueue.h>

#include "counters.h"
#include "dmauser.h"
#include "dmawin.h"
#include "fp.h"
#include "instance.h"
#include "xwin.h"

/*
 * Ahead of the borrow, at the VFIO user's first access after open (type1 pins only for a device already
 * registered for its unmaps, which open_device is not yet): the RAM it has mapped (QEMU maps it before it
 * opens the device) laid out in its context, pinned by the refill work, so the guest's bus-master write
 * waits only for what is left. Nothing mapped yet, or no room: the borrow does it all, as without.
 */
void fp_dma_stage(struct fp_mdev *fm)
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

void fp_dma_unstage(struct fp_mdev *fm)
{
	mutex_lock(&fm->dma_lock);
	if (fm->staged)
		fp_dmawin_discard(fm->staged);
	fm->staged = NULL;
	mutex_unlock(&fm->dma_lock);
}

/* Our DMA window goes; its range stays quarantined unless the lender confirmed the lease ended. */
void fp_dma_destroy(struct fp_mdev *fm, bool returned)
{
	mutex_lock(&fm->dma_lock);
	if (fm->dmawin)
		fp_dmawin_destroy(fm->dmawin, returned);
	fm->dmawin = NULL;
	mutex_unlock(&fm->dma_lock);
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

void fp_refill_work(struct work_struct *work)
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

/*
 * The VFIO user unmaps guest memory (DIMM unplug, reset): pages of the DMA window there leave the
 * NTB's domain (IOTLB flushed) and are unpinned before we return, as vfio_pin_pages() requires. The
 * borrow stays; device DMA to that memory now faults, as on real hardware.
 */
void fp_vfio_dma_unmap(struct vfio_device *vdev, u64 iova, u64 length)
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
