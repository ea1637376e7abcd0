/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * xwin.h - a link's two inbound windows (xwin.c) and the lender's BAR exposure (lend.c).
 *
 * Each side of a link reserves, at NTB probe, one IOVA range per window in its NTB's IOMMU domain and
 * points the window's inbound translation at it (ntb_mw_set_trans) at link up; afterwards only IOMMU
 * page tables change (iommu_map/iommu_unmap in that range, docs/mdev.md "How the lender maps device BARs"):
 *   FARPASS_MW_BAR  the BAR window: lent devices' BARs at the offsets the lender announced (lend.c),
 *                   and on its last page the interrupt mailbox's ack area (irqbridge.c)
 *   FARPASS_MW_DMA  the DMA window: borrowing guests' RAM (dmawin.c), and in its last FP_XWIN_DMA_TAIL
 *                   bytes the interrupt mailbox's ring area (irqbridge.c)
 * The peer reaches them through its outbound windows of the same index; this side reaches the peer's
 * through fp_xwin_peer(). A link whose NTB has no IOMMU domain (or an identity one) has no data path:
 * fp_xwin_ready() is false and everything here fails with -EOPNOTSUPP.
 *
 * Window size: our own outbound window of the same index rounded down to the page (ntb_mw_get_align()
 * needs the link up; at link up the size is checked against its size_max and alignments). The
 * reserved range is a dma_map_resource() of that outbound window's own MMIO (never RAM, exactly as
 * large), so the later dma_unmap_resource() undoes exactly that.
 * The interrupt mailbox's tails are found in the PEER's windows from our outbound window sizes:
 * both sides of a link must have windows of the same sizes (symmetric NTBs such as ntb_hw_epf).
 *
 * Locking: the ranges are set at probe and torn down at remove (no lock needed in between); the
 * IOMMU page tables inside them belong to their users (lend.c under link->xwin_lock, irqbridge.c at
 * init/exit), which never map overlapping ranges.
 */
#ifndef FARPASS_XWIN_H
#define FARPASS_XWIN_H

#include <linux/atomic.h>
#include <linux/types.h>

#include "uapi/farpass.h"

struct fp_link;
struct farpass_bar_map;
struct iommu_iotlb_gather;
struct sg_table;

#define FP_XWIN_NR		2
#define FP_XWIN_DMA_TAIL	(64 * 1024)	/* ring area of the interrupt mailbox */
#define FP_XWIN_BAR_TAIL	PAGE_SIZE	/* ack area of the interrupt mailbox */

/* One inbound window's reserved IOVA range (struct fp_link.xwin[]). */
struct fp_xwin {
	dma_addr_t iova;	/* base of the range, the window's inbound translation */
	u64 size;		/* bytes, page multiple; 0: not set up */
	phys_addr_t resv_phys;	/* what dma_map_resource() mapped: re-mapped before its unmap */
	atomic64_t mapped;	/* bytes mapped by fp_xwin_map() now (the counters' gauge) */
};

bool fp_xwin_ready(struct fp_link *link);
/* Some link has a data path now (VERSION's FARPASS_FEAT_DATA_PATH). Takes fp_lock. */
bool fp_xwin_any_ready(void);

/* Bytes of inbound window @mw usable for BARs or guest RAM (below its reserved tail). */
u64 fp_xwin_usable(struct fp_link *link, int mw);
/*
 * Map [phys, phys + size) at @off of inbound window @mw (page aligned; IOMMU_READ | IOMMU_WRITE
 * [| IOMMU_MMIO] in @prot). -ERANGE outside the window, -EOPNOTSUPP no data path, or iommu_map's.
 * Unmap flushes the IOTLB before it returns.
 */
int fp_xwin_map(struct fp_link *link, int mw, u64 off, phys_addr_t phys, size_t size, int prot);
void fp_xwin_unmap(struct fp_link *link, int mw, u64 off, size_t size);
/*
 * Map the pages of @sgt (size bytes) back to back from @off with one IOMMU call and one IOTLB sync;
 * each physically contiguous part of it gets its own mappings. 0, or as fp_xwin_map (nothing mapped).
 */
int fp_xwin_map_sg(struct fp_link *link, int mw, u64 off, struct sg_table *sgt, size_t size, int prot);
/*
 * Unmap without flushing: the IOTLB keeps the old translations until fp_xwin_unmap_sync(@gather)
 * (one flush for many unmaps), so no page unmapped this way may be freed or unpinned before it.
 */
void fp_xwin_unmap_gather(struct fp_link *link, int mw, u64 off, size_t size, struct iommu_iotlb_gather *gather);
void fp_xwin_unmap_sync(struct fp_link *link, struct iommu_iotlb_gather *gather);

/* The peer's inbound window @mw as this side reaches it: physical base and size of our outbound MW. */
int fp_xwin_peer(struct fp_link *link, int mw, phys_addr_t *base, u64 *size);

/* lend.c: FARPASS_IOCTL_BAR_MAP (validated argsz/flags/pad by the chardev). */
int fp_lend_bar_map(const struct farpass_bar_map *m);

#endif /* FARPASS_XWIN_H */
