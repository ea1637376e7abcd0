// SPDX-License-Identifier: GPL-2.0-only
/*
 * window.c - lender role: the NTB's outbound memory windows mmapped through /dev/farpass for the agent,
 * which maps a lent device's DMA onto them with VFIO_IOMMU_MAP_DMA (docs/uapi.md, OUTBOUND_WINDOW).
 *
 * mmap offset cookie: link id (1..) and window index in the bits above FP_WIN_SHIFT, the offset inside
 * the window below. The mapping is populated at fault time (vmf_insert_pfn), never at mmap time: a vma
 * is linked into the file's address_space only after ->mmap returns, so PTEs made in ->mmap could
 * escape the teardown's unmap_mapping_range(). Each vma holds a struct fp_win_map; the link lists them
 * and, when it goes away, marks them dead (faults then SIGBUS) and zaps their PTEs.
 *
 * Locking: mmap: mmap_lock -> fp_lock -> fp_win_lock. Fault: mmap_lock -> map->lock. vma close:
 * mmap_lock -> fp_win_lock (a listed map's file is alive: remove_vma() closes before its fput).
 * Teardown: fp_win_lock -> map->lock, then with no lock held unmap_mapping_range (i_mmap_rwsem).
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/kref.h>
#include <linux/mm.h>
#include <linux/ntb.h>
#include <linux/pci.h>
#include <linux/slab.h>

#include "compat.h"
#include "fp.h"
#include "link.h"

#define FP_WIN_SHIFT	40	/* windows up to 1 TiB; cookie = key << FP_WIN_SHIFT */
#define FP_WIN_MW_BITS	4	/* key = link id << FP_WIN_MW_BITS | mw */

struct fp_win_map {
	struct kref ref;		/* one per vma */
	struct list_head node;		/* in link->win_maps; fp_win_lock; empty once torn down */
	struct mutex lock;		/* dead vs. inserting PTEs */
	bool dead;
	phys_addr_t base;		/* of the window (the vma's place in it: vm_pgoff, kept by splits) */
	u64 key;
	struct file *file;		/* the vma's: alive while a map is listed (close comes before fput) */
};

static DEFINE_MUTEX(fp_win_lock);

static bool fp_win_prefetchable(struct pci_dev *pdev, phys_addr_t base)
{
	int i;

	for (i = 0; i < PCI_STD_NUM_BARS; i++) {
		struct resource *r = &pdev->resource[i];

		if (r->flags & IORESOURCE_MEM && r->start <= base && base <= r->end)
			return r->flags & IORESOURCE_PREFETCH;
	}
	return false;
}

/* Window @mw of @link: its base and mappable size. Caller holds fp_lock. */
static int fp_win_get(struct fp_link *link, u32 mw, int *count, phys_addr_t *base, u64 *size)
{
	resource_size_t rsize;
	int ret;

	*count = ntb_peer_mw_count(link->ntb);
	if (*count < 0)
		return *count;
	if (mw >= *count || mw >= BIT(FP_WIN_MW_BITS))
		return -ENOENT;
	if (ntb_link_is_up(link->ntb, NULL, NULL) != 1)
		return -ENOLINK;
	ret = ntb_peer_mw_get_addr(link->ntb, mw, base, &rsize);
	if (ret)
		return ret;
	*size = min_t(u64, rsize, BIT_ULL(FP_WIN_SHIFT)) & PAGE_MASK;
	if (!*size || !PAGE_ALIGNED(*base))
		return -ENODEV;
	return 0;
}

int fp_win_describe(struct farpass_outbound_window *w)
{
	struct fp_link *link;
	phys_addr_t base;
	int count = 0;
	int ret;

	mutex_lock(&fp_lock);
	link = fp_link_find(w->ntb);
	if (!link || link->dying) {
		ret = -ENODEV;
		goto out;
	}
	ret = fp_win_get(link, w->mw, &count, &base, &w->size);
	w->count = max(count, 0);
	if (ret)
		goto out;
	ret = -ENOSPC;	/* after 2^20 NTB probes: the cookie would not fit */
	if (link->id >> (64 - FP_WIN_SHIFT - FP_WIN_MW_BITS))
		goto out;
	ret = 0;
	w->offset = ((u64)link->id << FP_WIN_MW_BITS | w->mw) << FP_WIN_SHIFT;
out:
	mutex_unlock(&fp_lock);
	return ret;
}

static void fp_win_release(struct kref *ref)
{
	struct fp_win_map *map = container_of(ref, struct fp_win_map, ref);

	list_del(&map->node);
	kfree(map);
}

static void fp_win_vm_open(struct vm_area_struct *vma)
{
	struct fp_win_map *map = vma->vm_private_data;

	kref_get(&map->ref);
}

static void fp_win_vm_close(struct vm_area_struct *vma)
{
	struct fp_win_map *map = vma->vm_private_data;

	mutex_lock(&fp_win_lock);
	kref_put(&map->ref, fp_win_release);
	mutex_unlock(&fp_win_lock);
}

static vm_fault_t fp_win_vm_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct fp_win_map *map = vma->vm_private_data;
	vm_fault_t ret = VM_FAULT_SIGBUS;

	mutex_lock(&map->lock);
	if (!map->dead)
		ret = vmf_insert_pfn(vma, vmf->address,
				     (map->base + (((u64)vma->vm_pgoff << PAGE_SHIFT) & (BIT_ULL(FP_WIN_SHIFT) - 1)) +
				      (vmf->address - vma->vm_start)) >> PAGE_SHIFT);
	mutex_unlock(&map->lock);
	return ret;
}

static const struct vm_operations_struct fp_win_vm_ops = {
	.open = fp_win_vm_open,
	.close = fp_win_vm_close,
	.fault = fp_win_vm_fault,
};

int fp_win_mmap(struct file *file, struct vm_area_struct *vma)
{
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 key = off >> FP_WIN_SHIFT;
	u64 start = off & (BIT_ULL(FP_WIN_SHIFT) - 1);
	u64 len = vma->vm_end - vma->vm_start;
	struct fp_win_map *map;
	struct fp_link *link;
	phys_addr_t base;
	int count, ret;
	u64 size;

	if (!(vma->vm_flags & VM_SHARED) || vma->vm_pgoff > (U64_MAX >> PAGE_SHIFT))
		return -EINVAL;
	map = kzalloc(sizeof(*map), GFP_KERNEL);
	if (!map)
		return -ENOMEM;
	kref_init(&map->ref);
	mutex_init(&map->lock);
	INIT_LIST_HEAD(&map->node);
	map->key = key;
	map->file = file;

	mutex_lock(&fp_lock);
	ret = -EINVAL;
	list_for_each_entry(link, &fp_links, node)
		if (link->id == key >> FP_WIN_MW_BITS)
			break;
	if (list_entry_is_head(link, &fp_links, node))
		goto err_unlock;
	ret = -ENODEV;
	if (link->dying)
		goto err_unlock;
	ret = fp_win_get(link, key & (BIT(FP_WIN_MW_BITS) - 1), &count, &base, &size);
	if (ret == -ENOENT)
		ret = -EINVAL;
	if (ret)
		goto err_unlock;
	ret = -EINVAL;
	if (start > size || len > size - start)
		goto err_unlock;
	map->base = base;
	vma->vm_page_prot = fp_win_prefetchable(link->pdev, base) ?
			    pgprot_writecombine(vma->vm_page_prot) : pgprot_noncached(vma->vm_page_prot);
	fp_vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_private_data = map;
	vma->vm_ops = &fp_win_vm_ops;
	mutex_lock(&fp_win_lock);
	list_add_tail(&map->node, &link->win_maps);
	mutex_unlock(&fp_win_lock);
	mutex_unlock(&fp_lock);
	return 0;

err_unlock:
	mutex_unlock(&fp_lock);
	kfree(map);
	return ret;
}

/* The link is going away (link->dying set under fp_lock before): no mapping of it may stay. */
static void fp_win_link_teardown(struct fp_link *link)
{
	struct fp_win_map *map, *next;
	LIST_HEAD(dead);

	mutex_lock(&fp_win_lock);
	list_for_each_entry_safe(map, next, &link->win_maps, node) {
		mutex_lock(&map->lock);
		map->dead = true;
		mutex_unlock(&map->lock);
		/* Pin it and its file until its PTEs are gone. */
		kref_get(&map->ref);
		get_file(map->file);
		list_move_tail(&map->node, &dead);
	}
	mutex_unlock(&fp_win_lock);
	list_for_each_entry_safe(map, next, &dead, node) {
		unmap_mapping_range(map->file->f_mapping, map->key << FP_WIN_SHIFT, BIT_ULL(FP_WIN_SHIFT), 1);
		fput(map->file);
		mutex_lock(&fp_win_lock);
		/* Off our local list first: a vma may hold the last reference after we return. */
		list_del_init(&map->node);
		kref_put(&map->ref, fp_win_release);
		mutex_unlock(&fp_win_lock);
	}
}

const struct fp_link_role_ops fp_win_role = {
	.detach = fp_win_link_teardown,
};
