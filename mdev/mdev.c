// SPDX-License-Identifier: GPL-2.0-only
/*
 * mdev.c - the borrower role: an mdev parent on each NTB's PCI device (libvirt's nodedev only accepts
 * PCI/css/ap parents), one mdev type per remote device the agent announced on that link, and a VFIO
 * device per instance.
 *
 * Types come and go while Linux 6.1 registers all of a parent's types at mdev_register_parent() (an
 * array of struct mdev_type) and offers no way to add or remove one later. farpass therefore
 * RE-REGISTERS the link's parent with the new type table on every announce/withdraw. That is only
 * safe with no instance on the parent (unregistering removes instances), so:
 *  - with no instance on the link: done at once (the type appears/disappears before the ioctl returns);
 *  - otherwise the change is recorded (the ioctl reports FARPASS_*_F_PENDING) and applied by
 *    rereg_work when the link's last instance is removed.
 * Re-registration keeps type names stable ("<ntb driver>-farpass-<lender>-<device id>"), which fixed
 * pre-registered "slots" could not: libvirt domain XML names the type, so the same remote device must
 * have the same type name on every borrower (cold migration). The price is the pending state.
 *
 * Each remote device can be passed to one VM at a time: one instance per type.
 *
 * This slice: instances exist and open; VFIO_DEVICE_GET_INFO describes a PCI device with reset; config
 * space, BARs, IRQs and reset are not served yet and fail honestly (-ENODEV for region/IRQ info and
 * mmap, -EIO for read/write and reset) rather than invent data.
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/vfio.h>

#include "counters.h"
#include "fp.h"
#include "link.h"
#include "proto.h"
#include "types.h"

struct fp_mdev {
	struct vfio_device vdev;
	struct fp_rdev *rdev;		/* stays valid while the instance exists (see struct fp_type) */
};

static struct mdev_driver fp_mdev_driver;

static void fp_rereg_work(struct work_struct *work)
{
	struct fp_link *link = container_of(work, struct fp_link, rereg_work);
	int ret;

	mutex_lock(&fp_lock);
	if (!link->dying && link->rereg_pending) {
		ret = fp_link_sync_types(link);
		if (ret && ret != -EBUSY)
			dev_err(&link->pdev->dev, "farpass: deferred type update failed: %pe\n", ERR_PTR(ret));
	}
	mutex_unlock(&fp_lock);
}

void fp_link_types_init(struct fp_link *link)
{
	INIT_WORK(&link->rereg_work, fp_rereg_work);
}

static void fp_link_unregister(struct fp_link *link)
{
	unsigned int i;

	lockdep_assert_held(&fp_lock);
	if (link->parent_registered) {
		mdev_unregister_parent(&link->parent);
		link->parent_registered = false;
		fp_count(FP_C_TYPES, -(long long)link->nr_types);
		fp_count(FP_C_PARENTS, -1);
	}
	for (i = 0; i < link->nr_types; i++) {
		struct fp_type *ft = container_of(link->types[i], struct fp_type, type);

		ft->rdev->registered = false;
		kfree(ft);
	}
	kfree(link->types);
	link->types = NULL;
	link->nr_types = 0;
}

static void fp_rdev_free(struct fp_rdev *rdev)
{
	lockdep_assert_held(&fp_lock);
	list_del(&rdev->node);
	kfree(rdev);
	fp_count(FP_C_DEVICES, -1);
}

int fp_link_sync_types(struct fp_link *link)
{
	struct fp_rdev *rdev, *tmp;
	struct mdev_type **types;
	struct fp_type *ft;
	unsigned int n = 0;
	int ret;

	lockdep_assert_held(&fp_lock);
	spin_lock(&link->inst_lock);
	if (link->nr_instances) {
		link->rereg_pending = true;
		spin_unlock(&link->inst_lock);
		return -EBUSY;
	}
	link->rereg_busy = true;
	spin_unlock(&link->inst_lock);

	fp_link_unregister(link);
	list_for_each_entry_safe(rdev, tmp, &fp_devices, node) {
		if (rdev->link != link)
			continue;
		if (rdev->withdrawn)
			fp_rdev_free(rdev);
		else
			n++;
	}

	ret = -ENOMEM;
	types = kcalloc(max(n, 1U), sizeof(*types), GFP_KERNEL);
	if (!types)
		goto out_clear_busy;
	link->types = types;
	list_for_each_entry(rdev, &fp_devices, node) {
		if (rdev->link != link)
			continue;
		ft = kzalloc(sizeof(*ft), GFP_KERNEL);
		if (!ft)
			goto out_free_types;
		ft->rdev = rdev;
		ft->type.sysfs_name = rdev->sysfs_name;
		ft->type.pretty_name = rdev->pretty_name;
		types[link->nr_types++] = &ft->type;
	}

	ret = mdev_register_parent(&link->parent, &link->pdev->dev, &fp_mdev_driver,
				   types, link->nr_types);
	if (ret)
		goto out_free_types;
	for (n = 0; n < link->nr_types; n++)
		fp_rdev_of(types[n])->registered = true;
	link->parent_registered = true;
	link->rereg_pending = false;
	fp_count(FP_C_PARENTS, 1);
	fp_count(FP_C_TYPES, link->nr_types);
	goto out_clear_busy;

out_free_types:
	fp_link_unregister(link);
	dev_err(&link->pdev->dev, "farpass: mdev parent registration failed: %pe\n", ERR_PTR(ret));
out_clear_busy:
	spin_lock(&link->inst_lock);
	link->rereg_busy = false;
	spin_unlock(&link->inst_lock);
	return ret;
}

void fp_link_types_teardown(struct fp_link *link)
{
	struct fp_rdev *rdev, *tmp;

	lockdep_assert_held(&fp_lock);
	spin_lock(&link->inst_lock);
	link->rereg_busy = true;	/* no new instance */
	link->rereg_pending = false;
	spin_unlock(&link->inst_lock);
	fp_link_unregister(link);	/* removes the instances */
	list_for_each_entry_safe(rdev, tmp, &fp_devices, node)
		if (rdev->link == link)
			fp_rdev_free(rdev);
}

int fp_device_announce(const struct farpass_announce *desc, u32 *flags)
{
	struct fp_link *link;
	struct fp_rdev *rdev;
	unsigned int count = 0;
	int ret;

	mutex_lock(&fp_lock);
	link = fp_link_find(desc->ntb);
	if (!link) {
		ret = -ENODEV;
		goto out_unlock;
	}
	list_for_each_entry(rdev, &fp_devices, node) {
		if (rdev->desc.device_id == desc->device_id) {
			ret = -EEXIST;
			goto out_unlock;
		}
		count++;
	}
	if (count >= FARPASS_MAX_DEVICES) {
		ret = -ENOSPC;
		goto out_unlock;
	}
	rdev = kzalloc(sizeof(*rdev), GFP_KERNEL);
	if (!rdev) {
		ret = -ENOMEM;
		goto out_unlock;
	}
	rdev->link = link;
	rdev->desc = *desc;
	if (fp_type_sysfs_name(rdev->sysfs_name, sizeof(rdev->sysfs_name), desc->lender,
			       desc->device_id) < 0 ||
	    fp_type_pretty_name(rdev->pretty_name, sizeof(rdev->pretty_name), desc->lender,
				desc->vendor, desc->device, desc->lender_addr) < 0) {
		ret = -EINVAL;	/* cannot happen with validated names; keep the check */
		goto out_free_rdev;
	}
	list_add_tail(&rdev->node, &fp_devices);
	fp_count(FP_C_DEVICES, 1);

	ret = fp_link_sync_types(link);
	if (ret == -EBUSY) {
		*flags |= FARPASS_ANNOUNCE_F_PENDING;
		ret = 0;
	} else if (ret) {
		fp_rdev_free(rdev);
		/* The other devices of the link lost their types too: try to restore them. */
		if (fp_link_sync_types(link))
			dev_err(&link->pdev->dev, "farpass: no mdev parent on this link now\n");
	}
	goto out_unlock;

out_free_rdev:
	kfree(rdev);
out_unlock:
	mutex_unlock(&fp_lock);
	return ret;
}

int fp_device_withdraw(u32 device_id, u32 *flags)
{
	struct fp_rdev *rdev;
	bool found = false;
	int ret;

	mutex_lock(&fp_lock);
	list_for_each_entry(rdev, &fp_devices, node) {
		if (rdev->desc.device_id == device_id && !rdev->withdrawn) {
			found = true;
			break;
		}
	}
	if (!found) {
		ret = -ENOENT;
		goto out_unlock;
	}
	spin_lock(&rdev->link->inst_lock);
	if (rdev->claimed) {
		spin_unlock(&rdev->link->inst_lock);
		ret = -EBUSY;
		goto out_unlock;
	}
	rdev->withdrawn = true;
	spin_unlock(&rdev->link->inst_lock);

	if (!rdev->registered) {
		/* Announced while the link was busy and never registered: nothing to unregister. */
		fp_rdev_free(rdev);
		ret = 0;
		goto out_unlock;
	}
	ret = fp_link_sync_types(rdev->link);	/* frees rdev when it succeeds */
	if (ret == -EBUSY) {
		*flags |= FARPASS_WITHDRAW_F_PENDING;
		ret = 0;
	}
out_unlock:
	mutex_unlock(&fp_lock);
	return ret;
}

/* ------------------------------------------------------------------------------ vfio_device_ops */

static int fp_vfio_open(struct vfio_device *vdev)
{
	/* Lazy borrow: nothing is borrowed at open; bus-master enable will do it (later slice). */
	fp_count(FP_C_VFIO_OPEN, 1);
	return 0;
}

static void fp_vfio_close(struct vfio_device *vdev)
{
	fp_count(FP_C_VFIO_OPEN, -1);
}

static long fp_vfio_ioctl(struct vfio_device *vdev, unsigned int cmd, unsigned long arg)
{
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
	case VFIO_DEVICE_GET_IRQ_INFO:
	case VFIO_DEVICE_SET_IRQS:
		return -ENODEV;		/* config space, BARs and IRQs: next slice */
	case VFIO_DEVICE_RESET:
		return -EIO;		/* forwarded to the lender: next slice */
	default:
		return -ENOTTY;
	}
}

static ssize_t fp_vfio_read(struct vfio_device *vdev, char __user *buf, size_t count, loff_t *ppos)
{
	dev_dbg_ratelimited(vdev->dev, "read at %#llx: regions not served yet\n", *ppos);
	return -EIO;
}

static ssize_t fp_vfio_write(struct vfio_device *vdev, const char __user *buf, size_t count,
			     loff_t *ppos)
{
	dev_dbg_ratelimited(vdev->dev, "write at %#llx: regions not served yet\n", *ppos);
	return -EIO;
}

static int fp_vfio_mmap(struct vfio_device *vdev, struct vm_area_struct *vma)
{
	return -ENODEV;
}

/* Mandatory: without it vfio_pin_pages() fails with -EINVAL. Nothing is pinned in this slice. */
static void fp_vfio_dma_unmap(struct vfio_device *vdev, u64 iova, u64 length)
{
	fp_count(FP_C_DMA_UNMAP, 1);
}

static void fp_vfio_release(struct vfio_device *vdev)
{
	vfio_free_device(vdev);
}

static const struct vfio_device_ops fp_vfio_ops = {
	.name = FP_NAME,
	.release = fp_vfio_release,
	.open_device = fp_vfio_open,
	.close_device = fp_vfio_close,
	.read = fp_vfio_read,
	.write = fp_vfio_write,
	.ioctl = fp_vfio_ioctl,
	.mmap = fp_vfio_mmap,
	.dma_unmap = fp_vfio_dma_unmap,
};

/* ------------------------------------------------------------------------------------ mdev_driver */

static int fp_mdev_probe(struct mdev_device *mdev)
{
	struct fp_rdev *rdev = fp_rdev_of(mdev->type);
	struct fp_link *link = rdev->link;
	struct fp_mdev *fm;
	int ret = 0;

	spin_lock(&link->inst_lock);
	if (link->rereg_busy)
		ret = -EAGAIN;
	else if (rdev->withdrawn)
		ret = -ENODEV;
	else if (rdev->claimed)
		ret = -EUSERS;
	if (!ret) {
		rdev->claimed = true;
		link->nr_instances++;
	}
	spin_unlock(&link->inst_lock);
	if (ret)
		return ret;

	fm = vfio_alloc_device(fp_mdev, vdev, &mdev->dev, &fp_vfio_ops);
	if (IS_ERR(fm)) {
		ret = PTR_ERR(fm);
		goto err_unclaim;
	}
	fm->rdev = rdev;
	ret = vfio_register_emulated_iommu_dev(&fm->vdev);
	if (ret)
		goto err_put_vdev;
	dev_set_drvdata(&mdev->dev, fm);
	fp_count(FP_C_INSTANCES, 1);
	return 0;

err_put_vdev:
	vfio_put_device(&fm->vdev);
err_unclaim:
	spin_lock(&link->inst_lock);
	rdev->claimed = false;
	link->nr_instances--;
	if (!link->nr_instances && link->rereg_pending)
		schedule_work(&link->rereg_work);
	spin_unlock(&link->inst_lock);
	return ret;
}

static void fp_mdev_remove(struct mdev_device *mdev)
{
	struct fp_mdev *fm = dev_get_drvdata(&mdev->dev);
	struct fp_rdev *rdev = fm->rdev;
	struct fp_link *link = rdev->link;

	vfio_unregister_group_dev(&fm->vdev);
	vfio_put_device(&fm->vdev);
	fp_count(FP_C_INSTANCES, -1);

	spin_lock(&link->inst_lock);
	rdev->claimed = false;
	link->nr_instances--;
	/* Deferred type changes: not from here (we run under the parent's unreg_sem). */
	if (!link->nr_instances && link->rereg_pending)
		schedule_work(&link->rereg_work);
	spin_unlock(&link->inst_lock);
}

static unsigned int fp_mdev_get_available(struct mdev_type *mtype)
{
	struct fp_rdev *rdev = fp_rdev_of(mtype);
	unsigned int avail;

	spin_lock(&rdev->link->inst_lock);
	avail = !rdev->claimed && !rdev->withdrawn;
	spin_unlock(&rdev->link->inst_lock);
	return avail;
}

static ssize_t fp_mdev_show_description(struct mdev_type *mtype, char *buf)
{
	const struct farpass_announce *d = &fp_rdev_of(mtype)->desc;

	return sysfs_emit(buf, "remote PCI device %04x:%04x class %06x on lender %s%s%s via NTB %s, farpass id %u\n",
			  d->vendor, d->device, d->class_code, d->lender,
			  d->lender_addr[0] ? " at " : "", d->lender_addr, d->ntb, d->device_id);
}

static struct mdev_driver fp_mdev_driver = {
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
