// SPDX-License-Identifier: GPL-2.0-only
/*
 * types.c - the borrower role's devices: an mdev parent on each NTB's PCI device (libvirt's nodedev
 * only accepts PCI/css/ap parents) with one mdev type per slot of the lender at the link's other end
 * (FARPASS_IRQ_SLOTS of them); ANNOUNCE puts a remote device in its slot's type, WITHDRAW takes it out.
 * The instances and their VFIO devices are mdev.c's (and the files instance.h names).
 *
 * Linux 6.1 and 6.12 register all of a parent's types at mdev_register_parent() (an array of struct
 * mdev_type) and cannot add or remove one later; registering again removes the parent's instances,
 * which would take a device from a running guest. So the types are fixed slots: the parent registers at
 * probe with no type and once more at the link's first ANNOUNCE, with FARPASS_IRQ_SLOTS types named
 * after that ANNOUNCE's lender and the slot ("farpass-<lender>-<slot>"); no instance can exist before
 * (no type did), and the parent is never registered again while the link lives: a device lent while
 * guests run is usable at once, a withdrawal touches no other instance. The lender agent keeps a
 * device's slot while it lends it, the same towards every borrower, so a type name means the same
 * device on every borrower (libvirt XML, cold migration). An empty slot's type has no available
 * instance and refuses to create one. Costs: docs/mdev.md, "mdev types under Linux 6.1 and 6.12".
 */
#include <linux/kobject.h>
#include <linux/list.h>
#include <linux/mdev.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "counters.h"
#include "fp.h"
#include "instance.h"
#include "link.h"
#include "proto.h"
#include "types.h"

/* Probe, the link listed: the parent, with no type until the agent announces the link's lender. */
static int fp_link_types_listed(struct fp_link *link)
{
	int ret;

	lockdep_assert_held(&fp_lock);
	ret = mdev_register_parent(&link->parent, &link->pdev->dev, &fp_mdev_driver, link->slot_types, 0);
	if (ret) {
		dev_err(&link->pdev->dev, "farpass: mdev parent registration failed: %pe\n", ERR_PTR(ret));
		return ret;
	}
	link->parent_registered = true;
	fp_count(FP_C_PARENTS, 1);
	return 0;
}

/*
 * The link's first ANNOUNCE, from @lender: the parent registered again, with its slot types, the only
 * time it is. No instance can exist before (no type did), so none is removed. The slots are allocated
 * here and freed after the parent's unregistration: the mdev core's kobject in each struct mdev_type
 * cannot be initialised twice, and a failed registration may have initialised some.
 */
static int fp_link_register_slots(struct fp_link *link, const char *lender)
{
	struct fp_slot *slots;
	unsigned int i;
	int ret;

	lockdep_assert_held(&fp_lock);
	slots = kcalloc(FARPASS_IRQ_SLOTS, sizeof(*slots), GFP_KERNEL);
	if (!slots)
		return -ENOMEM;
	for (i = 0; i < FARPASS_IRQ_SLOTS; i++) {
		struct fp_slot *slot = &slots[i];

		/* Cannot fail: a valid lender name is at most 31 characters. */
		if (fp_type_sysfs_name(slot->sysfs_name, sizeof(slot->sysfs_name), lender, i) < 0 ||
		    fp_type_pretty_name(slot->pretty_name, sizeof(slot->pretty_name), lender, i) < 0) {
			kfree(slots);
			return -EINVAL;
		}
		slot->link = link;
		slot->index = i;
		slot->type.sysfs_name = slot->sysfs_name;
		slot->type.pretty_name = slot->pretty_name;
		link->slot_types[i] = &slot->type;
	}
	if (link->parent_registered) {
		mdev_unregister_parent(&link->parent);
		link->parent_registered = false;
		fp_count(FP_C_PARENTS, -1);
	}
	/* Before the registration: the mdev callbacks may run from then on. */
	strscpy(link->lender, lender, sizeof(link->lender));
	link->slots = slots;
	ret = mdev_register_parent(&link->parent, &link->pdev->dev, &fp_mdev_driver, link->slot_types,
				   FARPASS_IRQ_SLOTS);
	if (ret) {
		link->slots = NULL;
		link->lender[0] = '\0';
		kfree(slots);
		dev_err(&link->pdev->dev, "farpass: mdev parent registration failed: %pe\n", ERR_PTR(ret));
		return ret;
	}
	link->parent_registered = true;
	fp_count(FP_C_PARENTS, 1);
	fp_count(FP_C_TYPES, FARPASS_IRQ_SLOTS);
	return 0;
}

/* Fill or empty @slot (fp_lock and inst_lock: see fp.h). */
static void fp_slot_set(struct fp_slot *slot, struct fp_rdev *rdev)
{
	lockdep_assert_held(&fp_lock);
	lockdep_assert_held(&slot->link->inst_lock);
	slot->rdev = rdev;
}

static void fp_rdev_free(struct fp_rdev *rdev)
{
	lockdep_assert_held(&fp_lock);
	list_del(&rdev->node);
	kfree(rdev);
	fp_count(FP_C_DEVICES, -1);
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
	/*
	 * Removes the instances, waiting for their VFIO users to let go (however long a guest ignores
	 * the request): without fp_lock, so the other links' ioctls go on. Nothing else touches a dying
	 * link's parent (ANNOUNCE no longer finds the link, WITHDRAW checks `dying`).
	 */
	if (link->parent_registered) {
		mdev_unregister_parent(&link->parent);
		link->parent_registered = false;
		fp_count(FP_C_PARENTS, -1);
		if (link->slots)
			fp_count(FP_C_TYPES, -FARPASS_IRQ_SLOTS);
	}
	/* No mdev callback runs any more: the slots and their devices go together. */
	mutex_lock(&fp_lock);
	list_for_each_entry_safe(rdev, tmp, &fp_devices, node)
		if (rdev->link == link)
			fp_rdev_free(rdev);
	kfree(link->slots);
	link->slots = NULL;
	mutex_unlock(&fp_lock);
}

const struct fp_link_role_ops fp_types_role = {
	.listed = fp_link_types_listed,
	.detach = fp_link_types_teardown,
};

/*
 * Tell udev that a type of the parent on @pdev became usable, as mdev_register_parent() does when a
 * parent registers: mdevctl's rule then starts the mdevs defined with `mdevctl define --auto` on it.
 */
static void fp_parent_uevent(struct pci_dev *pdev)
{
	char state[] = "MDEV_STATE=registered";
	char *envp[] = { state, NULL };

	kobject_uevent_env(&pdev->dev.kobj, KOBJ_CHANGE, envp);
}

int fp_device_announce(const struct farpass_announce *desc)
{
	struct fp_link *link;
	struct fp_rdev *rdev;
	struct fp_slot *slot;
	struct pci_dev *pdev;
	unsigned int count = 0;
	int ret;

	mutex_lock(&fp_lock);
	link = fp_link_find(desc->ntb);
	if (!link) {
		ret = -ENODEV;
		goto out_unlock;
	}
	/* The link's types are named after its lender: another lender's device has no type there. */
	if (link->slots && strcmp(link->lender, desc->lender)) {
		dev_warn_ratelimited(&link->pdev->dev,
				     "farpass: ANNOUNCE %u from lender %s on the link to lender %s\n",
				     desc->device_id, desc->lender, link->lender);
		ret = -EINVAL;
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
	/* Another device's (the agent withdraws a device before announcing the next one in its slot). */
	if (link->slots && link->slots[desc->irq_slot].rdev) {
		ret = -EADDRINUSE;
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
	if (!link->slots) {
		ret = fp_link_register_slots(link, desc->lender);
		if (ret) {
			kfree(rdev);
			goto out_unlock;
		}
	}
	slot = &link->slots[desc->irq_slot];
	list_add_tail(&rdev->node, &fp_devices);
	fp_count(FP_C_DEVICES, 1);
	spin_lock(&link->inst_lock);
	fp_slot_set(slot, rdev);
	spin_unlock(&link->inst_lock);
	pdev = pci_dev_get(link->pdev);	/* the link may go once fp_lock is dropped */
	mutex_unlock(&fp_lock);
	fp_parent_uevent(pdev);
	pci_dev_put(pdev);
	return 0;

out_unlock:
	mutex_unlock(&fp_lock);
	return ret;
}

int fp_device_withdraw(u32 device_id)
{
	struct fp_rdev *rdev;
	bool found = false;
	int ret = 0;

	mutex_lock(&fp_lock);
	list_for_each_entry(rdev, &fp_devices, node) {
		if (rdev->desc.device_id == device_id) {
			found = true;
			break;
		}
	}
	if (!found || rdev->link->dying) {
		ret = -ENOENT;	/* a dying link's devices go with it */
		goto out_unlock;
	}
	spin_lock(&rdev->link->inst_lock);
	if (rdev->claimed)
		ret = -EBUSY;
	else	/* from now on the slot's type has no available instance, and probe refuses one */
		fp_slot_set(&rdev->link->slots[rdev->desc.irq_slot], NULL);
	spin_unlock(&rdev->link->inst_lock);
	if (!ret)
		fp_rdev_free(rdev);
out_unlock:
	mutex_unlock(&fp_lock);
	return ret;
}
