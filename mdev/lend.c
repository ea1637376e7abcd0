// SPDX-License-Identifier: GPL-2.0-only
/*
 * lend.c - lender role: a lent device's memory BARs in a link's BAR window (FARPASS_IOCTL_BAR_MAP).
 *
 * A mapping is an IOMMU mapping of the BAR's MMIO at its slot of the inbound window FARPASS_MW_BAR
 * (xwin.c): while it exists the borrower's CPU reaches the device through its outbound window, with
 * no software in between; once unmapped (IOTLB flushed) its accesses fault in our IOMMU and read
 * all-ones. Only devices bound to vfio-pci can be exposed: nothing else on this host drives them.
 *
 * Locking: fp_lock (the link stays listed) -> link->xwin_lock (the link's list of mappings).
 */
#include <linux/device.h>
#include <linux/iommu.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/sizes.h>

#include "counters.h"
#include "fp.h"
#include "link.h"
#include "xwin.h"

struct fp_bar_map {
	struct list_head node;	/* in link->bar_maps; link->xwin_lock */
	struct pci_dev *pdev;	/* a reference */
	u32 bar;
	u64 off;		/* in the BAR window */
	u64 size;
};

static struct pci_dev *fp_lend_pci_get(const char *name)
{
	unsigned int domain, bus, slot, fn;
	char end;

	if (sscanf(name, "%x:%x:%x.%x%c", &domain, &bus, &slot, &fn, &end) != 4 ||
	    bus > 0xff || slot > 0x1f || fn > 7)
		return NULL;
	return pci_get_domain_bus_and_slot(domain, bus, PCI_DEVFN(slot, fn));
}

static bool fp_lend_is_vfio(struct pci_dev *pdev)
{
	bool ret;

	device_lock(&pdev->dev);
	ret = pdev->dev.driver && !strcmp(pdev->dev.driver->name, "vfio-pci");
	device_unlock(&pdev->dev);
	return ret;
}

static void fp_lend_unmap_one(struct fp_link *link, struct fp_bar_map *b)
{
	lockdep_assert_held(&link->xwin_lock);
	fp_xwin_unmap(link, FARPASS_MW_BAR, b->off, b->size);
	list_del(&b->node);
	pci_dev_put(b->pdev);
	kfree(b);
	fp_count(FP_C_BAR_MAPS, -1);
}

static int fp_lend_map(struct fp_link *link, const struct farpass_bar_map *m)
{
	u64 usable = fp_xwin_usable(link, FARPASS_MW_BAR);
	resource_size_t start, len;
	struct fp_bar_map *b;
	struct pci_dev *pdev;
	int ret;

	lockdep_assert_held(&link->xwin_lock);
	pdev = fp_lend_pci_get(m->pci);
	if (!pdev)
		return -ENODEV;
	ret = -EPERM;
	if (!fp_lend_is_vfio(pdev))
		goto out_put;
	start = pci_resource_start(pdev, m->bar);
	len = pci_resource_len(pdev, m->bar);
	ret = -EINVAL;
	/* The slot is aligned as announced: to the BAR's size up to 2 MiB, at least to the page. */
	if (!(pci_resource_flags(pdev, m->bar) & IORESOURCE_MEM) || !m->size ||
	    !PAGE_ALIGNED(m->size) || m->size > len || !PAGE_ALIGNED(start) ||
	    !IS_ALIGNED(m->win_offset, max_t(u64, PAGE_SIZE, min_t(u64, len, SZ_2M))))
		goto out_put;
	ret = -ERANGE;
	if (m->win_offset >= usable || m->size > usable - m->win_offset)
		goto out_put;
	ret = -EEXIST;
	list_for_each_entry(b, &link->bar_maps, node)
		if (m->win_offset < b->off + b->size && b->off < m->win_offset + m->size)
			goto out_put;

	ret = -ENOMEM;
	b = kzalloc(sizeof(*b), GFP_KERNEL);
	if (!b)
		goto out_put;
	ret = fp_xwin_map(link, FARPASS_MW_BAR, m->win_offset, start, m->size,
			  IOMMU_READ | IOMMU_WRITE | IOMMU_MMIO);
	if (ret)
		goto out_free;
	b->pdev = pdev;
	b->bar = m->bar;
	b->off = m->win_offset;
	b->size = m->size;
	list_add_tail(&b->node, &link->bar_maps);
	fp_count(FP_C_BAR_MAPS, 1);
	pci_info(pdev, "BAR %u (%#llx bytes) lent at %#llx of %s's BAR window\n",
		 m->bar, m->size, m->win_offset, link->name);
	return 0;

out_free:
	kfree(b);
out_put:
	pci_dev_put(pdev);
	return ret;
}

static int fp_lend_unmap(struct fp_link *link, const struct farpass_bar_map *m)
{
	struct fp_bar_map *b;

	lockdep_assert_held(&link->xwin_lock);
	list_for_each_entry(b, &link->bar_maps, node) {
		if (b->off == m->win_offset && b->bar == m->bar && !strcmp(pci_name(b->pdev), m->pci)) {
			pci_info(b->pdev, "BAR %u no longer lent to %s\n", b->bar, link->name);
			fp_lend_unmap_one(link, b);
			return 0;
		}
	}
	return -ENOENT;
}

int fp_lend_bar_map(const struct farpass_bar_map *m)
{
	struct fp_link *link;
	int ret;

	mutex_lock(&fp_lock);
	link = fp_link_find(m->ntb);
	ret = -ENODEV;
	if (!link || link->dying)
		goto out_unlock;
	ret = -EOPNOTSUPP;
	if (!fp_xwin_ready(link))
		goto out_unlock;
	mutex_lock(&link->xwin_lock);
	if (m->flags & FARPASS_BAR_MAP_F_UNMAP)
		ret = fp_lend_unmap(link, m);
	else
		ret = fp_lend_map(link, m);
	mutex_unlock(&link->xwin_lock);
out_unlock:
	mutex_unlock(&fp_lock);
	return ret;
}

/* The peer loses the lent BARs before the link goes. */
static void fp_lend_link_teardown(struct fp_link *link)
{
	struct fp_bar_map *b, *next;

	mutex_lock(&link->xwin_lock);
	list_for_each_entry_safe(b, next, &link->bar_maps, node)
		fp_lend_unmap_one(link, b);
	mutex_unlock(&link->xwin_lock);
}

const struct fp_link_role_ops fp_lend_role = {
	.detach = fp_lend_link_teardown,
};
