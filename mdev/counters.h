/* SPDX-License-Identifier: GPL-2.0-only */
/* counters.h - debugfs counters (/sys/kernel/debug/farpass/counters), lock-free atomics. */
#ifndef FARPASS_COUNTERS_H
#define FARPASS_COUNTERS_H

#include <linux/atomic.h>
#include <linux/types.h>

/*
 * Gauges (G) go back to zero when everything is torn down; a test checks that after unload-free
 * sequences. Events (E) only grow.
 */
enum fp_counter {
	FP_C_LINKS,		/* G NTB devices bound */
	FP_C_LINKS_UP,		/* G links up */
	FP_C_LINK_UP_EVENTS,	/* E */
	FP_C_LINK_DOWN_EVENTS,	/* E */
	FP_C_DB_EVENTS,		/* E doorbell interrupts */
	FP_C_CTRL_TX,		/* E control messages sent */
	FP_C_CTRL_RX,		/* E control messages received */
	FP_C_CTRL_RETRIES,	/* E sends retried (peer mailbox busy, no ACK yet) */
	FP_C_CTRL_ERRORS,	/* E bad magic/version/command, send failures */
	FP_C_AGENT_FILES,	/* G open /dev/farpass files */
	FP_C_IOCTL_ERRORS,	/* E ioctls that returned an error */
	FP_C_DEVICES,		/* G announced devices (each in its slot's type) */
	FP_C_TYPES,		/* G mdev types registered (FARPASS_IRQ_SLOTS per parent) */
	FP_C_PARENTS,		/* G mdev parents registered */
	FP_C_INSTANCES,		/* G mdev instances */
	FP_C_VFIO_OPEN,		/* G instances opened by a VFIO user */
	FP_C_DMA_UNMAP,		/* E dma_unmap callbacks */
	FP_C_PINNED_PAGES,	/* G guest pages pinned for DMA windows */
	FP_C_UPCALL_BORROW,	/* E upcalls made, by op */
	FP_C_UPCALL_RETURN,	/* E */
	FP_C_UPCALL_CFG_READ,	/* E */
	FP_C_UPCALL_CFG_WRITE,	/* E */
	FP_C_UPCALL_RESET,	/* E */
	FP_C_UPCALLS_PENDING,	/* G requests queued or taken, not answered */
	FP_C_UPCALL_TIMEOUTS,	/* E requests that expired (-ETIMEDOUT) */
	FP_C_UPCALL_NOTCONN,	/* E requests failed for want of an agent (-ENOTCONN) */
	FP_C_UPCALL_LATE_REPLIES, /* E replies to no pending request (-ENOENT) */
	FP_C_CFG_READS,		/* E trapped config-space reads (VFIO region 7), by access */
	FP_C_CFG_WRITES,	/* E trapped config-space writes */
	FP_C_CFG_FORWARDED,	/* E pieces of them forwarded to the lender */
	FP_C_CFG_DEFERRED,	/* E forwarded pieces written before the borrow, kept for it */
	FP_C_CFG_REPLAYED,	/* E pieces of those written to the lender at the borrow */
	FP_C_CFG_REPLAY_FAILED,	/* E ... that the lender refused */
	FP_C_SURPRISE_REMOVED,	/* E instances marked surprise-removed (dead agent) */
	FP_C_REVOKED,		/* E instances revoked (the lender ended their lease: REVOKE_DEVICE) */
	FP_C_RESETS,		/* E VFIO_DEVICE_RESET served */
	FP_C_XWIN_BAR_BYTES,	/* G bytes mapped in inbound BAR windows (BARs, mailbox ack pages) */
	FP_C_XWIN_DMA_BYTES,	/* G bytes mapped in inbound DMA windows (guest RAM, mailbox rings) */
	FP_C_BAR_MAPS,		/* G lent BARs mapped in a BAR window (BAR_MAP) */
	FP_C_IRQ_HOOKS,		/* G eventfds relayed by the interrupt bridge (IRQ_BRIDGE) */
	FP_C_IRQ_POSTED,	/* E interrupts posted to a peer (ring or overflow bitmap) */
	FP_C_IRQ_OVERFLOWS,	/* E ... of them that found the ring full (went to the bitmap) */
	FP_C_IRQ_UNPOSTED,	/* E eventfd signals while the link's mailbox was not up (lost) */
	FP_C_IRQ_DELIVERED,	/* E interrupts received and handed to an attached target */
	FP_C_IRQ_DROPPED,	/* E interrupts received for a slot with no target */
	FP_C_IRQ_BAD,		/* E mailbox entries rejected, corrupt heads */
	FP_C_DMA_WINDOWS,	/* G borrowers' DMA windows mapped (dmawin.c) */
	FP_C_UPCALL_SET_IRQS,	/* E SET_IRQS upcalls */
	FP_C_BAR_TRAPPED_MSIX,	/* E trapped BAR accesses to MSI-X table/PBA pages */
	FP_C_BAR_TRAPPED,	/* E trapped BAR accesses elsewhere (none expected: those are mmapped) */
	FP_C_IRQ_SIGNALLED,	/* E bridged interrupts signalled to the VFIO user */
	FP_C_IRQ_NO_EVENTFD,	/* E bridged interrupts of a vector with no eventfd */
	FP_C_DMA_REFILLED,	/* E guest pages pinned again after the VFIO user re-mapped them */
	FP_C_DMA_QUARANTINED,	/* G DMA window ranges kept after a RETURN the lender did not confirm */
	FP_C_UPCALL_BUSY,	/* E upcalls refused: their instance's share stayed full (-EBUSY) */
	FP_C_IRQ_RESYNCS,	/* E every vector delivered once after a corrupt mailbox HEAD */
	FP_C_INTX_UNMASKS_POSTED,	/* E borrower: INTx unmasks posted to the lender */
	FP_C_INTX_UNMASKS_SIGNALLED,	/* E lender: ... received and signalled to vfio-pci */
	FP_C_INTX_MASKED,	/* E borrower: INTx deliveries while masked (not signalled) */
	FP_C_DMA_PEERS,		/* G peer BARs mapped in borrowers' DMA windows (dmawin.c, p2p.c) */
	FP_C_DMA_LENDER_PEERS,	/* G ... and peer BARs on the same link, listed for the lender to map */
	FP_C_IRQ_RESENT,	/* E armed MSI/MSI-X vectors signalled again when their link came back */
	FP_C_DMA_STAGED,	/* E guest pages pinned ahead of a borrow (a window staged at open) */
	FP_C_PINNED_HUGE,	/* G of pinned_pages: held by the pins of their hugetlb page's ends */
	FP_C_NR
};

extern atomic64_t fp_counters[FP_C_NR];

static inline void fp_count(enum fp_counter c, long long delta)
{
	atomic64_add(delta, &fp_counters[c]);
}

/*
 * The last successful borrow (debugfs farpass/last_borrow), for benchmarks: what bus-master enable
 * cost until the device was usable, in nanoseconds, and in which steps.
 */
struct fp_borrow_stat {
	u32 device_id;
	u64 scan_ns;		/* guest RAM found by probing (ramscan) and laid out */
	u64 pin_ns;		/* its pages pinned (vfio_pin_pages) */
	u64 map_ns;		/* and mapped in the NTB's IOMMU domain */
	u64 runs;		/* physically contiguous runs of pinned pages */
	u64 map_calls;		/* IOMMU map calls, each ends with one IOTLB sync */
	u64 upcall_ns;		/* the BORROW upcall: the agents map the lender's side */
	u64 total_ns;		/* all of it, with the interrupt bridge and the SET_IRQS upcall */
	u64 pages;		/* guest pages pinned */
	u64 staged_pages;	/* ... of them pinned ahead, from the VFIO user's first access after open */
	u64 stage_ns;		/* from that access until they were all pinned (or until the borrow) */
};

void fp_borrow_record(const struct fp_borrow_stat *st);

int fp_counters_init(void);
void fp_counters_exit(void);

#endif /* FARPASS_COUNTERS_H */
