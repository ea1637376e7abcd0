// SPDX-License-Identifier: GPL-2.0-only
/*
 * mdev.c - the borrower role's instances: the mdev driver of every link's parent (types.c) and a
 * VFIO device per instance, whose vfio_device_ops are here and decode the region offsets. Each remote
 * device can be passed to one VM at a time: one instance per type.
 *
 * VFIO device: the config region is virtualised (cfg.c decides, vfio_cfg.c serves; forwarded registers
 * go to the agent as CFG_READ/CFG_WRITE upcalls), bus-master enable/clear and reset are
 * BORROW/RETURN/RESET upcalls (borrow.c), the ERR and REQ eventfds are served (vfio_irq.c). A dead agent
 * (upcall timeout, or no agent file) makes the instance surprise-removed until it is opened again
 * (instance.c): config reads return all-ones, everything else fails at once with -ENODEV, the ERR
 * eventfd fires.
 * Data path (docs/mdev.md "BAR and DMA windows"): BAR regions are mmapped from the outbound window
 * FARPASS_MW_BAR at the slot the lender announced, but for the MSI-X table/PBA pages, whose accesses are
 * trapped and go through an ioremap of the same window (bar.c); bus-master enable builds the DMA window
 * (dmawin.c, staged by vfio_dma.c) before BORROW; INTx/MSI/MSI-X eventfds from SET_IRQS are signalled by
 * the interrupt bridge, INTx unmasks go back to the lender over it (vfio_irq.c).
 */
#include <linux/eventfd.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/vfio.h>
#include <linux/workqueue.h>

#include "cfg.h"
#include "compat.h"
#include "counters.h"
#include "dmauser.h"
#include "fp.h"
#include "instance.h"
#include "link.h"
#include "p2p.h"
#include "proto.h"
#include "types.h"
#include "upcall.h"

/* ------------------------------------------------------------------------------ vfio_device_ops */

static atomic_t fp_instance_seq = ATOMIC_INIT(0);

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
