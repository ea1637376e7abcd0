// SPDX-License-Identifier: GPL-2.0-only
/*
 * mailbox.c - the interrupt bridge's shared mailbox; see mailbox.h for the layout, the protocol and
 * where the barriers go. No kernel headers beyond types and errno values, so the same file compiles
 * in userspace for the unit tests.
 */
#ifdef __KERNEL__
#include <linux/errno.h>
#include <linux/kernel.h>
#else
#include <errno.h>
#endif

#include "mailbox.h"

bool fp_mbox_geom_valid(const struct fp_mbox_geom *g)
{
	return g->order >= FP_MBOX_MIN_ORDER && g->order <= FP_MBOX_MAX_ORDER &&
	       g->nr_dev >= 1 && g->nr_dev <= FP_MBOX_MAX_DEV &&
	       g->nr_vec >= 1 && g->nr_vec <= FP_MBOX_MAX_VEC;
}

u32 fp_mbox_bitmap_words(const struct fp_mbox_geom *g)
{
	return (g->nr_dev * g->nr_vec + 31) / 32;
}

u32 fp_mbox_ring_words(const struct fp_mbox_geom *g)
{
	return FP_MBOX_RING + (1u << g->order) + fp_mbox_bitmap_words(g);
}

static u32 fp_mbox_lap(u32 index, u32 order)
{
	return (index >> order) & 7;
}

u32 fp_mbox_encode(u32 index, u32 order, u32 dev, u32 vec)
{
	return FP_MBOX_E_MARKER | fp_mbox_lap(index, order) << FP_MBOX_E_LAP_SHIFT |
	       (dev & FP_MBOX_E_DEV_MASK) << FP_MBOX_E_DEV_SHIFT | (vec & FP_MBOX_E_VEC_MASK);
}

int fp_mbox_decode(u32 entry, u32 index, const struct fp_mbox_geom *g, u32 *dev, u32 *vec)
{
	u32 d = (entry >> FP_MBOX_E_DEV_SHIFT) & FP_MBOX_E_DEV_MASK;
	u32 v = entry & FP_MBOX_E_VEC_MASK;

	if (!(entry & FP_MBOX_E_MARKER) ||
	    ((entry >> FP_MBOX_E_LAP_SHIFT) & 7) != fp_mbox_lap(index, g->order) ||
	    d >= g->nr_dev || v >= g->nr_vec)
		return -EINVAL;
	*dev = d;
	*vec = v;
	return 0;
}

int fp_mbox_prod_init(struct fp_mbox_prod *p, const struct fp_mbox_geom *g, volatile u32 *ring_area,
		      const volatile u32 *ack_area, u32 *pending, const struct fp_mbox_barriers *bar)
{
	u32 i;

	if (!fp_mbox_geom_valid(g))
		return -EINVAL;
	p->geom = *g;
	p->ring_area = ring_area;
	p->ack_area = ack_area;
	p->pending = pending;
	p->bar = bar;
	p->head = 0;
	p->tail = 0;
	p->ovf = 0;
	p->posted = 0;
	p->overflowed = 0;
	p->coalesced = 0;
	for (i = 0; i < fp_mbox_bitmap_words(g); i++)
		pending[i] = 0;
	for (i = 0; i < fp_mbox_ring_words(g); i++)
		ring_area[i] = 0;
	bar->write_barrier(bar->ctx);
	return 0;
}

int fp_mbox_cons_init(struct fp_mbox_cons *c, const struct fp_mbox_geom *g,
		      const volatile u32 *ring_area, volatile u32 *ack_area,
		      const struct fp_mbox_barriers *bar)
{
	u32 i;

	if (!fp_mbox_geom_valid(g))
		return -EINVAL;
	c->geom = *g;
	c->ring_area = ring_area;
	c->ack_area = ack_area;
	c->bar = bar;
	c->tail = 0;
	c->ovf_seen = 0;
	c->delivered = 0;
	c->bad = 0;
	c->scans = 0;
	c->resync = false;
	c->resyncs = 0;
	for (i = 0; i < FP_MBOX_ACK_WORDS; i++)
		ack_area[i] = 0;
	bar->write_barrier(bar->ctx);
	return 0;
}

/* The ring is full unless a fresh look at the consumer's tail says otherwise. */
static bool fp_mbox_full(struct fp_mbox_prod *p)
{
	u32 size = 1u << p->geom.order;

	if (p->head - p->tail < size)
		return false;
	p->tail = p->ack_area[FP_MBOX_TAIL];
	/* The consumer's slot loads happened before its tail store; ours come after our tail load. */
	p->bar->full_barrier(p->bar->ctx);
	if (p->head - p->tail > size)	/* a tail ahead of the head: broken peer, stay safe */
		p->tail = p->head - size;
	return p->head - p->tail >= size;
}

int fp_mbox_post(struct fp_mbox_prod *p, u32 dev, u32 vec)
{
	const struct fp_mbox_geom *g = &p->geom;
	u32 bit, word, mask, i;

	if (dev >= g->nr_dev || vec >= g->nr_vec)
		return -EINVAL;
	if (!fp_mbox_full(p)) {
		p->ring_area[FP_MBOX_RING + (p->head & ((1u << g->order) - 1))] =
			fp_mbox_encode(p->head, g->order, dev, vec);
		p->bar->write_barrier(p->bar->ctx);	/* entry before HEAD */
		p->ring_area[FP_MBOX_HEAD] = ++p->head;
		p->posted++;
		return 0;
	}

	/* Full: the pending bitmap. Clear it first if the consumer delivered all of it. */
	if (p->ack_area[FP_MBOX_OVF_ACK] == p->ovf) {
		for (i = 0; i < fp_mbox_bitmap_words(g); i++) {
			if (p->pending[i]) {
				p->pending[i] = 0;
				p->ring_area[FP_MBOX_RING + (1u << g->order) + i] = 0;
			}
		}
	}
	bit = dev * g->nr_vec + vec;
	word = bit / 32;
	mask = 1u << (bit % 32);
	if (p->pending[word] & mask) {
		p->coalesced++;
	} else {
		p->pending[word] |= mask;
		p->ring_area[FP_MBOX_RING + (1u << g->order) + word] = p->pending[word];
	}
	p->bar->write_barrier(p->bar->ctx);	/* bitmap before OVF */
	p->ring_area[FP_MBOX_OVF] = ++p->ovf;
	p->overflowed++;
	return 1;
}

static u32 fp_mbox_deliver_all(struct fp_mbox_cons *c, fp_mbox_deliver_fn deliver, void *ctx)
{
	u32 d, v;

	for (d = 0; d < c->geom.nr_dev; d++)
		for (v = 0; v < c->geom.nr_vec; v++)
			deliver(ctx, d, v);
	return c->geom.nr_dev * c->geom.nr_vec;
}

u32 fp_mbox_drain_ring(struct fp_mbox_cons *c, fp_mbox_deliver_fn deliver, void *ctx)
{
	const struct fp_mbox_geom *g = &c->geom;
	u32 head, n = 0, dev, vec;

	head = c->ring_area[FP_MBOX_HEAD];
	c->bar->read_barrier(c->bar->ctx);	/* HEAD before the entries */
	if (head - c->tail > (1u << g->order)) {
		c->bad++;
		c->resync = true;
	} else {
		for (; c->tail != head; c->tail++) {
			u32 e = c->ring_area[FP_MBOX_RING + (c->tail & ((1u << g->order) - 1))];

			if (fp_mbox_decode(e, c->tail, g, &dev, &vec)) {
				c->bad++;
				continue;
			}
			deliver(ctx, dev, vec);
			n++;
		}
	}
	c->tail = head;
	c->bar->full_barrier(c->bar->ctx);	/* slot loads before the TAIL store frees them */
	c->ack_area[FP_MBOX_TAIL] = head;
	c->delivered += n;
	return n;
}

bool fp_mbox_bulk_due(const struct fp_mbox_cons *c)
{
	return c->resync || c->ring_area[FP_MBOX_OVF] != c->ovf_seen;
}

u32 fp_mbox_drain_bulk(struct fp_mbox_cons *c, fp_mbox_deliver_fn deliver, void *ctx)
{
	const struct fp_mbox_geom *g = &c->geom;
	const volatile u32 *bitmap = c->ring_area + FP_MBOX_RING + (1u << g->order);
	u32 ovf, n = 0, i;

	ovf = c->ring_area[FP_MBOX_OVF];
	if (c->resync) {
		/* Every vector once covers the pending bits too. */
		n = fp_mbox_deliver_all(c, deliver, ctx);
		c->resync = false;
		c->resyncs++;
	} else if (ovf != c->ovf_seen) {
		c->bar->read_barrier(c->bar->ctx);	/* OVF before the bitmap */
		c->scans++;
		for (i = 0; i < fp_mbox_bitmap_words(g); i++) {
			u32 w = bitmap[i];

			while (w) {
				u32 b = i * 32 + (u32)__builtin_ctz(w);

				w &= w - 1;
				if (b < g->nr_dev * g->nr_vec) {
					deliver(ctx, b / g->nr_vec, b % g->nr_vec);
					n++;
				}
			}
		}
	}
	if (ovf != c->ovf_seen) {
		c->ovf_seen = ovf;
		c->bar->full_barrier(c->bar->ctx);	/* bitmap loads before OVF_ACK */
		c->ack_area[FP_MBOX_OVF_ACK] = ovf;
	}
	c->delivered += n;
	return n;
}
