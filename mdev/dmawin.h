/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * dmawin.h - the borrower's DMA window of one borrow (dmawin.c), docs/mdev.md "The DMA window".
 *
 * At bus-master enable, before the BORROW upcall, the guest's RAM is found by probing (ramscan.c),
 * laid out (winlayout.c) in a free sub-window of the link's inbound window FARPASS_MW_DMA (first fit
 * among the link's current leases), every page pinned (vfio_pin_pages) and mapped at its offset
 * (fp_xwin_map). The lender's agent reads the layout with FARPASS_IOCTL_DMA_LAYOUT while it serves
 * BORROW. Teardown unmaps (the IOTLB is flushed before fp_xwin_unmap returns), then unpins.
 *
 * Staged ahead (fp_dmawin_stage): at the first access after open, the layout and page arrays of the RAM the VFIO user has
 * mapped, pinned in the background by the instance's refill work, so that the borrow finds its pages
 * pinned and only places and maps them (docs/mdev.md "The DMA window").
 *
 * Locking: fp_dmawin_lock (mutex, dmawin.c) protects the list of windows (sub-window allocation, the
 * DMA_LAYOUT lookup) and whether each peer slot is mapped; each window's pages are protected by the
 * caller's lock (the instance's dma_lock), which serialises create, destroy and dma_unmap of one
 * instance. Order: dma_lock -> fp_p2p_lock -> fp_dmawin_lock, link->ctrl_lock -> fp_dmawin_lock;
 * fp_dmawin_lock is never held with fp_lock.
 */
#ifndef FARPASS_DMAWIN_H
#define FARPASS_DMAWIN_H

#include <linux/types.h>

struct fp_link;
struct fp_dmawin;
struct vfio_device;
struct farpass_dma_layout;
struct fp_borrow_stat;

/* Peer BARs a window can lead to (p2p.c): one device's few memory BARs, for a few devices. */
#define FP_DMAWIN_MAX_PEERS	8

/*
 * A memory BAR of another farpass instance of the same VFIO user. On another link, its guest addresses
 * get a slot of the window after the RAM, mapped (MMIO) onto the BAR's slot in the other link's
 * outbound BAR window. On the same link (a lender peer), it takes no window space: DMA_LAYOUT lists it
 * while its instance is open, and the lender's agent maps it onto its own device's BAR.
 */
struct fp_dmawin_peer {
	u64 owner;		/* the instance's identity (p2p.c), never reused */
	u64 gpa;		/* where the guest placed the BAR: aligned to its size */
	u64 size;		/* a power of two, page multiple */
	phys_addr_t phys;	/* another link: the BAR's slot in that link's outbound BAR window */
	bool on_lender;		/* the same link: a lender peer */
	u32 device_id;		/* a lender peer: its farpass id */
	u32 bar;		/* a lender peer: its BAR index */
};

/*
 * Ahead of the borrow, in the VFIO user's context (its memlock limit, its memory cgroup): the RAM it has mapped
 * found and laid out for @link's DMA window, the page arrays allocated, nothing pinned, no window range
 * taken: 0 and *out, -ENODATA if it has no RAM mapped yet, or -errno. fp_dmawin_refill() pins it;
 * fp_dmawin_dma_unmap() only unpins its pages.
 */
int fp_dmawin_stage(struct fp_link *link, struct vfio_device *vdev, u32 device_id, struct fp_dmawin **out);
/* A staged window that no borrow took: unpinned and freed. */
void fp_dmawin_discard(struct fp_dmawin *w);
/*
 * Discover, lay out, pin and map the RAM of @vdev's VFIO user, and lay out the @nr_peers @peers (those
 * overlapping RAM or each other, or beyond the window, left out): 0 and *out, or -errno (nothing
 * kept). A *@staged window laid out the same gives its pinned pages (only the missing ones are pinned
 * then); it is taken or discarded either way (*@staged NULL after). The peers are not mapped yet
 * (fp_dmawin_map_peers). On success @st gets the times of the steps and the pages pinned.
 */
int fp_dmawin_create(struct fp_link *link, struct vfio_device *vdev, u32 device_id,
		     const struct fp_dmawin_peer *peers, u32 nr_peers, struct fp_dmawin **staged,
		     struct fp_dmawin **out, struct fp_borrow_stat *st);
/*
 * Map the window's peer slots (list its lender peers) whose owner @open says is still open (p2p.c,
 * under the lock its instances close under, so a peer either is seen gone here or has its mapping
 * removed by its close).
 */
void fp_dmawin_map_peers(struct fp_dmawin *w, bool (*open)(u64 owner));
/*
 * The instance @owner closes: every window's mappings of its BARs go, the IOTLB flushed, and no
 * DMA_LAYOUT lists it as a lender peer any more.
 */
void fp_dmawin_unmap_peers_of(u64 owner);
/*
 * Unmap from the NTB's domain (flushed), then unpin. @returned: the lender confirmed the lease ended
 * (RETURN answered): the range is free again, and so are the device's quarantined ones. Otherwise the
 * lender may still map the range onto our window: it stays allocated (quarantined, no pages behind
 * it) until a confirmed RETURN of the same device or the link goes down or away.
 */
void fp_dmawin_destroy(struct fp_dmawin *w, bool returned);
/*
 * The VFIO user unmaps [iova, iova + length): the pinned pages there leave the window, then unpinned.
 * Returns how many were unpinned.
 */
u64 fp_dmawin_dma_unmap(struct fp_dmawin *w, u64 iova, u64 length);
/*
 * Pin (and, unless staged, map) the window's pages not pinned that the VFIO user has mapped: a staged
 * window's, and those an unmap took out and the VFIO user has mapped again since (QEMU re-splits its
 * RAM sections at PAM, SMRAM and reset changes: one unmap of the whole old section, then maps of the
 * new ones). At most @budget pages: *@more says the budget ended it. Returns the window's pages still
 * not pinned, or -errno.
 */
long fp_dmawin_refill(struct fp_dmawin *w, u64 budget, bool *more);

/* FARPASS_IOCTL_DMA_LAYOUT (argsz/flags validated by the chardev). */
int fp_dmawin_layout(struct farpass_dma_layout *l);

#endif /* FARPASS_DMAWIN_H */
