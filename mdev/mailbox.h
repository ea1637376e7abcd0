/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * mailbox.h - the interrupt bridge's shared mailbox, pure logic with no kernel dependency (compiled
 * into farpass.ko and, from the same source, into tests/unit/test_farpass_mailbox).
 *
 * The lender (producer) turns each device interrupt (a VFIO eventfd firing) into an entry
 * "device slot + vector" in a ring in the borrower's memory, then rings one doorbell; the borrower
 * (consumer) drains the ring in its doorbell handler and signals the guest's eventfd per vector.
 * Single producer, single consumer, lock-free, fixed-width little-endian u32 words.
 *
 * Each word has exactly one writer, and each side reads only its own memory (remote reads across an
 * NTB are slow non-posted transactions; posted writes are cheap):
 *   ring area (consumer's memory, written by the producer through its outbound window)
 *     FP_MBOX_HEAD   entries written, free running
 *     FP_MBOX_OVF    overflows, free running: bumped after each post that found the ring full
 *     ring[]         1 << order entries at FP_MBOX_RING
 *     pending[]      bitmap, one bit per (device, vector), after the ring
 *   ack area (producer's memory, written by the consumer through its outbound window)
 *     FP_MBOX_TAIL   entries consumed, free running
 *     FP_MBOX_OVF_ACK the FP_MBOX_OVF value whose bitmap the consumer has delivered
 *
 * Overflow: a post that finds the ring full (after re-reading the tail) sets the vector's pending bit
 * (coalescing: a set bit stays set) and bumps OVF. A drain that sees OVF changed delivers every set
 * bit, then acknowledges that OVF. The producer clears the bitmap only at its next overflow and only
 * if OVF_ACK equals its OVF (every bit set so far was read after the consumer saw that OVF). No word
 * is read-modify-written by both sides (an NTB has no atomics across it), so no interrupt is lost;
 * a vector may be delivered more than once (stale bits), which MSI semantics allow.
 *
 * Every entry carries a marker bit and the lap of its index, so a slot not yet (or no longer) written
 * for this index, a dead link's all-ones, or a vector out of range is rejected and counted, never
 * delivered.
 *
 * Shared words are accessed through volatile u32 pointers: each access is one aligned 32-bit load or
 * store the compiler may not tear, merge or drop (what READ_ONCE()/WRITE_ONCE() are; on x86 also what
 * ioread32()/iowrite32() compile to, so the kernel wrapper may pass an ioremap_wc() window with a
 * __force cast). Ordering comes only from the barrier hooks.
 *
 * Barriers (hooks, so the kernel wrapper picks the right ones for the memory types):
 *   producer: load tail; mb (the consumer's loads of a slot happen before its tail store releases
 *     the slot; our later store to the slot must not pass our tail load: kernel smp_mb(), or
 *     smp_load_acquire() on the tail); store entry; wmb; store HEAD. The ring area is an ioremap_wc()
 *     NTB window, so wmb must be wmb() (sfence on x86), not smp_wmb(): write-combining buffers are
 *     not ordered by a compiler barrier. Same between the bitmap words and OVF. The wrapper then does
 *     wmb() before ringing the doorbell (an uncached MMIO write).
 *   consumer: the doorbell handler clears its doorbell bit first, then drains the ring (a post after
 *     the drain rings again) and has the bulk (bitmap, resync) done outside the hard irq. Load HEAD; rmb (smp_rmb(): the entries were DMA-written in PCIe order before
 *     HEAD); load entries; mb (loads of the slots complete before the TAIL store frees them:
 *     smp_mb()); store TAIL. Likewise load OVF; rmb; load bitmap; mb; store OVF_ACK.
 */
#ifndef FARPASS_MAILBOX_H
#define FARPASS_MAILBOX_H

#include "portable.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Word indexes in the ring area and the ack area. */
#define FP_MBOX_HEAD		0
#define FP_MBOX_OVF		1
#define FP_MBOX_RING		16	/* 64-byte header */
#define FP_MBOX_TAIL		0
#define FP_MBOX_OVF_ACK		1
#define FP_MBOX_ACK_WORDS	16

#define FP_MBOX_MIN_ORDER	1
#define FP_MBOX_MAX_ORDER	12	/* 4096 entries */
#define FP_MBOX_MAX_DEV		256	/* device slots per mailbox (per link) */
#define FP_MBOX_MAX_VEC		2048	/* MSI-X's maximum */

/* Entry: bit 31 marker, 30..28 lap (index >> order, mod 8), 27..16 device slot, 15..0 vector. */
#define FP_MBOX_E_MARKER	(1u << 31)
#define FP_MBOX_E_LAP_SHIFT	28
#define FP_MBOX_E_DEV_SHIFT	16
#define FP_MBOX_E_DEV_MASK	0xfffu
#define FP_MBOX_E_VEC_MASK	0xffffu

struct fp_mbox_geom {
	u32 order;	/* 1 << order ring entries */
	u32 nr_dev;	/* device slots */
	u32 nr_vec;	/* vectors per device slot */
};

struct fp_mbox_barriers {
	/* Not named wmb/rmb/mb: those are macros in the kernel. */
	void (*write_barrier)(void *ctx);	/* "wmb": earlier stores visible before later stores */
	void (*read_barrier)(void *ctx);	/* "rmb": earlier loads complete before later loads */
	void (*full_barrier)(void *ctx);	/* "mb": earlier loads and stores before later stores */
	void *ctx;
};

typedef void (*fp_mbox_deliver_fn)(void *ctx, u32 dev, u32 vec);

struct fp_mbox_prod {
	struct fp_mbox_geom geom;
	volatile u32 *ring_area;	/* fp_mbox_ring_words() words, the consumer's memory */
	const volatile u32 *ack_area;	/* FP_MBOX_ACK_WORDS words, ours */
	u32 *pending;			/* our copy of the bitmap, fp_mbox_bitmap_words() words */
	const struct fp_mbox_barriers *bar;
	u32 head, tail, ovf;
	u64 posted;		/* into the ring */
	u64 overflowed;		/* into the bitmap */
	u64 coalesced;		/* ... onto a bit already set */
};

struct fp_mbox_cons {
	struct fp_mbox_geom geom;
	const volatile u32 *ring_area;	/* ours */
	volatile u32 *ack_area;		/* the producer's memory */
	const struct fp_mbox_barriers *bar;
	u32 tail, ovf_seen;
	bool resync;		/* a corrupt HEAD was seen: every vector is owed one delivery */
	u64 delivered;		/* deliver() calls */
	u64 bad;		/* entries rejected; corrupt HEAD values */
	u64 scans;		/* bitmap scans */
	u64 resyncs;		/* deliveries of every vector */
};

bool fp_mbox_geom_valid(const struct fp_mbox_geom *g);
u32 fp_mbox_bitmap_words(const struct fp_mbox_geom *g);
/* Size of the ring area in u32 words: header, ring, bitmap. */
u32 fp_mbox_ring_words(const struct fp_mbox_geom *g);

u32 fp_mbox_encode(u32 index, u32 order, u32 dev, u32 vec);
/* 0 and *dev, *vec if @entry is valid for ring index @index under @g, else -EINVAL. */
int fp_mbox_decode(u32 entry, u32 index, const struct fp_mbox_geom *g, u32 *dev, u32 *vec);

/*
 * Producer set-up: writes the whole ring area (HEAD, OVF, ring, bitmap) to zero. The consumer must
 * have zeroed the ack area before the producer's first post (the control protocol orders this).
 * 0 or -EINVAL (bad geometry).
 */
int fp_mbox_prod_init(struct fp_mbox_prod *p, const struct fp_mbox_geom *g, volatile u32 *ring_area,
		      const volatile u32 *ack_area, u32 *pending, const struct fp_mbox_barriers *bar);
/* Consumer set-up: zeroes the ack area. 0 or -EINVAL. */
int fp_mbox_cons_init(struct fp_mbox_cons *c, const struct fp_mbox_geom *g,
		      const volatile u32 *ring_area, volatile u32 *ack_area,
		      const struct fp_mbox_barriers *bar);

/*
 * Post one interrupt: 0 queued in the ring, 1 the ring was full and it went to the pending bitmap,
 * -EINVAL for a device slot or vector out of range (nothing written). After a post (or a batch of
 * them) the caller rings the doorbell.
 */
int fp_mbox_post(struct fp_mbox_prod *p, u32 dev, u32 vec);

/*
 * Drain in two parts. The ring: deliver each valid ring entry in order, at most 1 << order (short
 * enough for a hard irq). A HEAD more than a ring ahead of the tail (a broken peer) is counted bad and
 * owes a resync. The bulk, when fp_mbox_bulk_due(): an owed resync delivers every vector once (so
 * nothing is lost even then), else a changed OVF delivers every pending bit; up to nr_dev * nr_vec
 * deliveries, for a context that may take long. The caller may delay the bulk (both sides keep what
 * it owes) but must run it once due. Each returns the number of deliveries.
 */
u32 fp_mbox_drain_ring(struct fp_mbox_cons *c, fp_mbox_deliver_fn deliver, void *ctx);
bool fp_mbox_bulk_due(const struct fp_mbox_cons *c);
u32 fp_mbox_drain_bulk(struct fp_mbox_cons *c, fp_mbox_deliver_fn deliver, void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* FARPASS_MAILBOX_H */
