// SPDX-License-Identifier: GPL-2.0-only
/*
 * instance.c - what every part of an instance (struct fp_mdev) calls: its upcalls, which make it
 * surprise-removed when the agent does not answer, the revocation a lease's end brings, its ERR/REQ
 * eventfds, and the virtual config space built at the first access after open.
 */
#include <linux/eventfd.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>

#include "cfg.h"
#include "compat.h"
#include "counters.h"
#include "fp.h"
#include "instance.h"
#include "link.h"
#include "types.h"
#include "upcall.h"

void fp_signal(struct fp_mdev *fm, struct eventfd_ctx *const *trigger)
{
	spin_lock(&fm->state_lock);
	if (*trigger)
		fp_eventfd_signal(*trigger);
	spin_unlock(&fm->state_lock);
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
int fp_call(struct fp_mdev *fm, u32 op, u64 arg0, u64 arg1, u64 arg2, u64 *out)
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

/* A forwarded piece to the lender: CFG_READ or CFG_WRITE upcall. */
int fp_cfg_upcall(struct fp_mdev *fm, const struct fp_cfg_piece *p, u8 *buf, bool write)
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
