// SPDX-License-Identifier: GPL-2.0-only
/*
 * dmauser.c - the VFIO users of our instances, by mm (QEMU opens all of a VM's devices in one
 * process, and puts them in one container), and the unmaps their instances are being told about.
 *
 * type1's VFIO_IOMMU_UNMAP_DMA calls .dma_unmap of each emulated-IOMMU device in the container in
 * turn, with its own lock dropped, then looks again: if a page of the range is pinned by then, it
 * calls all of them again, and after 10 such rounds it BUG()s. An instance's refill (pinning what the
 * VFIO user mapped again after an unmap, vfio_dma.c) could pin in that range while type1 is still telling
 * a sibling instance about the same unmap — a large window's teardown takes long — and did, every
 * round. So a refill waits while any instance of its VFIO user is inside .dma_unmap, and for a quiet
 * time after the last one left (type1's second look follows at once).
 *
 * The mm is an identity only, never dereferenced: a process that inherited the fds after the opener
 * exited shares the entry with whoever reuses that mm, which costs a refill at most a delay.
 *
 * fp_dmauser_lock (spinlock) protects the list and every field of its entries.
 */
#include <linux/jiffies.h>
#include <linux/list.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/spinlock.h>

#include "dmauser.h"

struct fp_dmauser {
	struct list_head node;		/* in fp_dmausers */
	const struct mm_struct *mm;
	unsigned int refs;		/* open instances */
	unsigned int unmapping;		/* instances inside .dma_unmap */
	unsigned long quiet_at;		/* jiffies: the last of them left + the caller's quiet time */
};

static DEFINE_SPINLOCK(fp_dmauser_lock);
static LIST_HEAD(fp_dmausers);

struct fp_dmauser *fp_dmauser_get(void)
{
	struct fp_dmauser *u, *fresh;

	/* Allocated before the lock, freed unused if the process already has an entry. */
	fresh = kzalloc(sizeof(*fresh), GFP_KERNEL_ACCOUNT);
	if (!fresh)
		return ERR_PTR(-ENOMEM);
	spin_lock(&fp_dmauser_lock);
	list_for_each_entry(u, &fp_dmausers, node) {
		if (u->mm == current->mm) {
			u->refs++;
			spin_unlock(&fp_dmauser_lock);
			kfree(fresh);
			return u;
		}
	}
	fresh->mm = current->mm;
	fresh->refs = 1;
	fresh->quiet_at = jiffies;
	list_add(&fresh->node, &fp_dmausers);
	spin_unlock(&fp_dmauser_lock);
	return fresh;
}

void fp_dmauser_put(struct fp_dmauser *u)
{
	spin_lock(&fp_dmauser_lock);
	if (--u->refs) {
		spin_unlock(&fp_dmauser_lock);
		return;
	}
	list_del(&u->node);
	spin_unlock(&fp_dmauser_lock);
	kfree(u);
}

void fp_dmauser_unmap_begin(struct fp_dmauser *u)
{
	spin_lock(&fp_dmauser_lock);
	u->unmapping++;
	spin_unlock(&fp_dmauser_lock);
}

void fp_dmauser_unmap_end(struct fp_dmauser *u, unsigned long quiet)
{
	spin_lock(&fp_dmauser_lock);
	u->unmapping--;
	u->quiet_at = jiffies + quiet;
	spin_unlock(&fp_dmauser_lock);
}

unsigned long fp_dmauser_refill_wait(struct fp_dmauser *u, unsigned long quiet)
{
	unsigned long wait = 0;

	spin_lock(&fp_dmauser_lock);
	if (u->unmapping)
		wait = quiet;
	else if (time_before(jiffies, u->quiet_at))
		wait = u->quiet_at - jiffies;
	spin_unlock(&fp_dmauser_lock);
	return wait;
}
