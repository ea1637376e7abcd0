// SPDX-License-Identifier: GPL-2.0-only
/*
 * xwin.c - a link's two inbound windows: one IOVA range per window reserved in the NTB's IOMMU domain
 * at probe, the window's inbound translation pointed at it at link up, and IOMMU mappings inside it
 * (xwin.h).
 *
 * Why a reserved range and not dma_map_resource() per mapping: the offsets inside a window are fixed
 * by the protocol (BAR slots, the mailbox tails, the DMA layout), a window has one translation, and
 * iommu_unmap() flushes the IOTLB before it returns (docs/mdev.md "How the lender maps device BARs").
 */
#include <linux/dma-mapping.h>
#include <linux/iommu.h>
#include <linux/ntb.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>

#include "compat.h"
#include "counters.h"
#include "fp.h"
#include "link.h"
#include "xwin.h"

static_assert(FP_C_XWIN_BAR_BYTES + FARPASS_MW_DMA == FP_C_XWIN_DMA_BYTES);

static struct device *fp_xwin_dev(struct fp_link *link)
{
	return &link->ntb->pdev->dev;
}

static bool fp_xwin_mw_valid(int mw)
{
	return mw == FARPASS_MW_BAR || mw == FARPASS_MW_DMA;
}

int fp_xwin_peer(struct fp_link *link, int mw, phys_addr_t *base, u64 *size)
{
	resource_size_t rsize;
	int ret;

	if (!fp_xwin_mw_valid(mw) || mw >= ntb_peer_mw_count(link->ntb))
		return -ENOENT;
	ret = ntb_peer_mw_get_addr(link->ntb, mw, base, &rsize);
	if (ret)
		return ret;
	*size = rsize;
	return 0;
}

static int fp_xwin_reserve(struct fp_link *link, int mw)
{
	struct fp_xwin *xw = &link->xwin[mw];
	struct device *dev = fp_xwin_dev(link);
	phys_addr_t phys;
	dma_addr_t iova;
	size_t unmapped;
	u64 size;
	int ret;

	ret = fp_xwin_peer(link, mw, &phys, &size);
	if (ret)
		return ret;
	size &= PAGE_MASK;
	/* The mailbox tail and at least one page for BARs or guest RAM. */
	if (size <= FP_XWIN_DMA_TAIL || !PAGE_ALIGNED(phys))
		return -ENOSPC;
	iova = dma_map_resource(dev, phys, size, DMA_BIDIRECTIONAL, 0);
	if (dma_mapping_error(dev, iova))
		return -ENOMEM;
	/*
	 * The range is ours now; drop the allocator's PTEs before any translation can reach them. Only
	 * the NTB uses this domain and inbound traffic needs the translation (set at link up).
	 */
	unmapped = iommu_unmap(link->xwin_domain, iova, size);
	if (unmapped != size) {
		/* dma_unmap_resource() expects the PTEs it made (it WARNs on a short unmap). */
		if (fp_iommu_map(link->xwin_domain, iova, phys, unmapped,
				 IOMMU_READ | IOMMU_WRITE | IOMMU_MMIO))
			dev_warn(&link->ntb->dev, "window %d: reserved range not restored\n", mw);
		dma_unmap_resource(dev, iova, size, DMA_BIDIRECTIONAL, 0);
		return -EIO;
	}
	xw->iova = iova;
	xw->size = size;
	xw->resv_phys = phys;
	atomic64_set(&xw->mapped, 0);
	dev_info(&link->ntb->dev, "inbound window %d: %#llx bytes at IOVA %pad\n", mw, size, &iova);
	return 0;
}

/*
 * Link up: point each inbound window at its range. ntb_mw_get_align() answers only with the link up
 * (the peer may decide the window's limits), so this cannot be done at probe; the range was sized
 * from our outbound window, the peer's twin (xwin.h). Done at every link up: an NTB may forget its
 * translations while the link is down, and setting the same one again is harmless.
 */
static void fp_xwin_link_up(struct fp_link *link)
{
	resource_size_t addr_align, size_align, size_max;
	int mw, ret;

	lockdep_assert_held(&link->ctrl_lock);
	if (!fp_xwin_ready(link))
		return;
	for (mw = 0; mw < FP_XWIN_NR; mw++) {
		struct fp_xwin *xw = &link->xwin[mw];

		ret = ntb_mw_get_align(link->ntb, 0, mw, &addr_align, &size_align, &size_max);
		if (!ret && (xw->size > size_max || !IS_ALIGNED(xw->size, max_t(u64, size_align, 1)) ||
			     !IS_ALIGNED(xw->iova, max_t(u64, addr_align, 1))))
			ret = -ERANGE;
		if (!ret)
			ret = ntb_mw_set_trans(link->ntb, 0, mw, xw->iova, xw->size);
		if (ret)
			dev_warn(&link->ntb->dev, "inbound window %d not translated: %pe: the peer cannot reach it\n",
				 mw, ERR_PTR(ret));
	}
}

static void fp_xwin_release(struct fp_link *link, int mw)
{
	struct fp_xwin *xw = &link->xwin[mw];
	int ret;

	if (!xw->size)
		return;
	ntb_mw_clear_trans(link->ntb, 0, mw);
	/* A user that left a mapping is a bug: keep the range reserved rather than map over it. */
	if (WARN_ON(atomic64_read(&xw->mapped)))
		return;
	ret = fp_iommu_map(link->xwin_domain, xw->iova, xw->resv_phys, xw->size,
			   IOMMU_READ | IOMMU_WRITE | IOMMU_MMIO);
	if (ret)
		dev_warn(&link->ntb->dev, "window %d: reserved range not restored: %pe\n", mw, ERR_PTR(ret));
	dma_unmap_resource(fp_xwin_dev(link), xw->iova, xw->size, DMA_BIDIRECTIONAL, 0);
	xw->size = 0;
}

/*
 * Probe, before the peer can see the link: reserve both ranges, or leave the link without data path
 * (logged: the control path and the rest of farpass still work, so this never fails the probe).
 */
static int fp_xwin_setup(struct fp_link *link)
{
	struct iommu_domain *domain = iommu_get_domain_for_dev(fp_xwin_dev(link));
	int mw, ret;

	if (!domain || !(domain->type & __IOMMU_DOMAIN_DMA_API)) {
		dev_info(&link->ntb->dev, "no IOMMU DMA domain: no data path on this link\n");
		return 0;
	}
	if (ntb_mw_count(link->ntb, 0) < FP_XWIN_NR || ntb_peer_mw_count(link->ntb) < FP_XWIN_NR) {
		dev_info(&link->ntb->dev, "fewer than %d memory windows: no data path on this link\n",
			 FP_XWIN_NR);
		return 0;
	}
	link->xwin_domain = domain;
	for (mw = 0; mw < FP_XWIN_NR; mw++) {
		ret = fp_xwin_reserve(link, mw);
		if (ret) {
			dev_warn(&link->ntb->dev, "inbound window %d: %pe: no data path on this link\n",
				 mw, ERR_PTR(ret));
			goto out_release;
		}
	}
	return 0;

out_release:
	while (mw--)
		fp_xwin_release(link, mw);
	link->xwin_domain = NULL;
	return 0;
}

/* Inbound translations off, every mapping gone (IOTLB flushed), ranges released. */
static void fp_xwin_teardown(struct fp_link *link)
{
	int mw;

	if (!link->xwin_domain)
		return;
	for (mw = FP_XWIN_NR - 1; mw >= 0; mw--)
		fp_xwin_release(link, mw);
	link->xwin_domain = NULL;
}

const struct fp_link_role_ops fp_xwin_role = {
	.probe = fp_xwin_setup,
	.link_up = fp_xwin_link_up,
	.free = fp_xwin_teardown,
};

bool fp_xwin_ready(struct fp_link *link)
{
	return link->xwin_domain;
}

bool fp_xwin_any_ready(void)
{
	struct fp_link *link;
	bool ret = false;

	mutex_lock(&fp_lock);
	list_for_each_entry(link, &fp_links, node)
		ret |= fp_xwin_ready(link);
	mutex_unlock(&fp_lock);
	return ret;
}

u64 fp_xwin_usable(struct fp_link *link, int mw)
{
	if (!fp_xwin_ready(link) || !fp_xwin_mw_valid(mw))
		return 0;
	return link->xwin[mw].size - (mw == FARPASS_MW_DMA ? FP_XWIN_DMA_TAIL : FP_XWIN_BAR_TAIL);
}

static int fp_xwin_range(struct fp_link *link, int mw, u64 off, u64 size)
{
	if (!fp_xwin_ready(link))
		return -EOPNOTSUPP;
	if (!fp_xwin_mw_valid(mw) || !PAGE_ALIGNED(off) || !PAGE_ALIGNED(size) || !size)
		return -EINVAL;
	if (off >= link->xwin[mw].size || size > link->xwin[mw].size - off)
		return -ERANGE;
	return 0;
}

int fp_xwin_map(struct fp_link *link, int mw, u64 off, phys_addr_t phys, size_t size, int prot)
{
	int ret;

	ret = fp_xwin_range(link, mw, off, size);
	if (ret)
		return ret;
	if (!PAGE_ALIGNED(phys))
		return -EINVAL;
	ret = fp_iommu_map(link->xwin_domain, link->xwin[mw].iova + off, phys, size, prot);
	if (ret)
		return ret;
	atomic64_add(size, &link->xwin[mw].mapped);
	fp_count(FP_C_XWIN_BAR_BYTES + mw, size);
	return 0;
}

/* The pages of @sgt back to back, each physically contiguous part its own mapping, one IOTLB sync. */
int fp_xwin_map_sg(struct fp_link *link, int mw, u64 off, struct sg_table *sgt, size_t size, int prot)
{
	ssize_t mapped;
	int ret;

	ret = fp_xwin_range(link, mw, off, size);
	if (ret)
		return ret;
	/* iommu_map_sg() undoes its own mappings when it fails. */
	mapped = iommu_map_sgtable(link->xwin_domain, link->xwin[mw].iova + off, sgt, prot);
	if (mapped < 0)
		return mapped;
	if (WARN_ON(mapped != size)) {
		iommu_unmap(link->xwin_domain, link->xwin[mw].iova + off, mapped);
		return -EIO;
	}
	atomic64_add(size, &link->xwin[mw].mapped);
	fp_count(FP_C_XWIN_BAR_BYTES + mw, size);
	return 0;
}

void fp_xwin_unmap_gather(struct fp_link *link, int mw, u64 off, size_t size, struct iommu_iotlb_gather *gather)
{
	size_t unmapped;

	if (WARN_ON(fp_xwin_range(link, mw, off, size)))
		return;
	unmapped = iommu_unmap_fast(link->xwin_domain, link->xwin[mw].iova + off, size, gather);
	atomic64_sub(unmapped, &link->xwin[mw].mapped);
	fp_count(FP_C_XWIN_BAR_BYTES + mw, -(long long)unmapped);
}

void fp_xwin_unmap_sync(struct fp_link *link, struct iommu_iotlb_gather *gather)
{
	iommu_iotlb_sync(link->xwin_domain, gather);
}

void fp_xwin_unmap(struct fp_link *link, int mw, u64 off, size_t size)
{
	struct iommu_iotlb_gather gather;

	/* As iommu_unmap(): the IOTLB synced before this returns (no flush queue on this path). */
	iommu_iotlb_gather_init(&gather);
	fp_xwin_unmap_gather(link, mw, off, size, &gather);
	if (fp_xwin_ready(link))
		fp_xwin_unmap_sync(link, &gather);
}
