// SPDX-License-Identifier: GPL-2.0-only
/*
 * types.c - the borrower role's devices: an mdev parent on each NTB's PCI device (libvirt's nodedev
 * only accepts PCI/css/ap parents), one mdev type per remote device the agent announced on that link
 * (ANNOUNCE, WITHDRAW). The instances and their VFIO devices are mdev.c's.
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
 */
#include <linux/list.h>
#include <linux/mdev.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "counters.h"
#include "fp.h"
#include "instance.h"
#include "link.h"
#include "proto.h"
#include "types.h"

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

static int fp_link_types_probe(struct fp_link *link)
{
	INIT_WORK(&link->rereg_work, fp_rereg_work);
	return 0;
}

/* Under fp_lock, or without it once the link is dying (fp_link_types_teardown()). */
static void fp_link_unregister(struct fp_link *link)
{
	unsigned int i;

	if (!link->dying)
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

/*
 * Detach (an NTB remove, or a probe that failed once listed) of a link already dying and off fp_links:
 * unregister the parent (removing instances, which waits for their VFIO users) and free the link's
 * devices. Caller does not hold fp_lock.
 */
static void fp_link_types_teardown(struct fp_link *link)
{
	struct fp_rdev *rdev, *tmp;

	lockdep_assert_not_held(&fp_lock);
	WARN_ON_ONCE(!link->dying);
	spin_lock(&link->inst_lock);
	link->rereg_busy = true;	/* no new instance */
	link->rereg_pending = false;
	spin_unlock(&link->inst_lock);
	/*
	 * Removes the instances, waiting for their VFIO users to let go (however long a guest ignores
	 * the request): without fp_lock, so the other links' ioctls go on. Nothing else touches a dying
	 * link's parent (rereg_work and WITHDRAW check `dying`; ANNOUNCE no longer finds the link).
	 */
	fp_link_unregister(link);
	mutex_lock(&fp_lock);
	list_for_each_entry_safe(rdev, tmp, &fp_devices, node)
		if (rdev->link == link)
			fp_rdev_free(rdev);
	mutex_unlock(&fp_lock);
	cancel_work_sync(&link->rereg_work);
}

const struct fp_link_role_ops fp_types_role = {
	.probe = fp_link_types_probe,
	/* The mdev parent exists from the start, with no type until the agent announces devices. */
	.listed = fp_link_sync_types,
	.detach = fp_link_types_teardown,
};

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
	ret = fp_bar_slots_check(link, desc);
	if (ret)
		goto out_unlock;
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
	if (!found || rdev->link->dying) {
		ret = -ENOENT;	/* a dying link's devices go with it */
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
