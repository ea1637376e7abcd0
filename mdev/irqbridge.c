// SPDX-License-Identifier: GPL-2.0-only
/*
 * irqbridge.c - the interrupt bridge (irqbridge.h): per link, a producer mailbox towards the peer
 * (lender role) and a consumer mailbox from it (borrower role), both mailbox.c.
 *
 * Memory (xwin.h): our consumer's ring area is local pages mapped at the tail of our DMA window, its
 * acks go to the peer's BAR window's last page through our outbound window; our producer writes the
 * peer's ring through our outbound DMA window (write-combining) and reads acks from a local page
 * mapped at our BAR window's last page. All of it is mapped at probe and stays until remove.
 *
 * (Re)start: at link up our ring is cleared locally (nothing posts to it before the peer has our
 * HELLO, sent after). Nothing is written to the peer before its first HELLO of the session proves it
 * runs farpass (its windows may belong to another NTB client): then our producer starts (our ack
 * page and the peer's ring zeroed) and our consumer (the peer's ack area zeroed, tail 0, one drain
 * for what the peer posted while we were not listening). Either side may start first: posts before
 * the consumer listens wait in the ring (or the bitmap), none is lost. Link down stops both. A link
 * flap too short for the link work to see leaves the old session running: at worst every vector is
 * delivered once more (a resynchronising drain), which MSI semantics allow.
 *
 * INTx (docs/mdev.md "INTx"): the borrower posts each unmask of a lent device's INTx back to the lender
 * in the same mailbox geometry, at the slot FP_IRQ_UNMASK_SLOT(slot); the lender's consumer signals the
 * unmask eventfd the agent gave it and vfio-pci (IRQ_BRIDGE_F_UNMASK): the level-triggered round trip.
 *
 * debugfs: <link dir>/irq, state and counts; writing "hold" stops draining (doorbells are still
 * cleared), "release" drains and resumes, "clear" forgets the deliveries listed as "seen".
 *
 * Locking: irq->prod_lock (spin, irqsave: posts come from eventfd wake-ups on any CPU) protects the
 * producer; irq->cons_lock (spin, irqsave: the ring's drain runs in the doorbell's hard irq) the
 * consumer, the targets, the debugfs record and the bulk work's schedule; irq->hook_lock (mutex) the
 * eventfd hooks, under fp_lock. Order: cons_lock -> prod_lock (a target's link_back posts an unmask).
 */
#include <linux/bitmap.h>
#include <linux/debugfs.h>
#include <linux/eventfd.h>
#include <linux/file.h>
#include <linux/io.h>
#include <linux/iommu.h>
#include <linux/ntb.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vfio.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include "compat.h"
#include "counters.h"
#include "fp.h"
#include "irqbridge.h"
#include "link.h"
#include "mailbox.h"
#include "proto.h"
#include "xwin.h"

/*
 * 256 entries: a burst of that many distinct interrupts goes through the ring in order; beyond it
 * the pending bitmap coalesces with no loss, and the drain in hard irq stays short.
 */
#define FP_IRQ_ORDER		8
/*
 * The bulk of a drain (a bitmap scan: up to 65536 deliveries; a resync: all 65536) runs in a work
 * item, no sooner than these after the previous one: a peer that toggles OVF or writes garbage HEADs
 * costs us that much at most. Nothing is lost meanwhile: what is owed stays owed (mailbox.h).
 */
#define FP_IRQ_SCAN_GAP		msecs_to_jiffies(10)
#define FP_IRQ_RESYNC_GAP	HZ
/*
 * Device slots of a mailbox: the sender's lent devices' interrupts (slot < FARPASS_IRQ_SLOTS, lender to
 * borrower) and, above them, INTx unmasks of the receiver's lent devices (FP_IRQ_UNMASK_SLOT(slot),
 * vector 0, borrower to lender). Both directions of a link may carry both: each host may lend.
 */
#define FP_IRQ_NR_DEV		(2 * FARPASS_IRQ_SLOTS)
#define FP_IRQ_UNMASK_SLOT(slot) (FARPASS_IRQ_SLOTS + (slot))
#define FP_IRQ_NR_BITS		(FP_IRQ_NR_DEV * FARPASS_IRQ_VECTORS)
#define FP_IRQ_RING_BYTES	((FP_MBOX_RING + (1u << FP_IRQ_ORDER) + FP_IRQ_NR_BITS / 32) * 4)
static_assert(FP_IRQ_RING_BYTES <= FP_XWIN_DMA_TAIL);
static_assert(FP_MBOX_ACK_WORDS * 4 <= FP_XWIN_BAR_TAIL);

static const struct fp_mbox_geom fp_irq_geom = {
	.order = FP_IRQ_ORDER,
	.nr_dev = FP_IRQ_NR_DEV,
	.nr_vec = FARPASS_IRQ_VECTORS,
};

struct fp_irq_target {
	const struct fp_irq_target_ops *ops;
	void *ctx;
};

/* One relayed eventfd. */
struct fp_irq_hook {
	struct file *file;	/* the eventfd: held, so the agent may close its fd (no EPOLLHUP unhook) */
	struct virqfd *virqfd;	/* vfio_virqfd's */
	struct fp_irq *irq;
	u32 slot, vec;
};

struct fp_irq {
	struct fp_link *link;

	bool started;			/* link->ctrl_lock: this session's first HELLO was seen */

	spinlock_t prod_lock;
	bool prod_on;			/* prod_lock */
	struct fp_mbox_prod prod;	/* prod_lock */
	u32 *pending;			/* the producer's copy of the bitmap; prod_lock */
	void __iomem *ring_io;		/* the peer's ring area */
	struct page *ack_page;		/* our producer's ack area */

	spinlock_t cons_lock;
	bool cons_on;			/* cons_lock */
	bool held;			/* cons_lock: debugfs "hold" */
	struct fp_mbox_cons cons;	/* cons_lock */
	struct page *ring_pages;	/* our consumer's ring area */
	void __iomem *ack_io;		/* the peer's ack area */
	struct fp_irq_target targets[FARPASS_IRQ_SLOTS];	/* cons_lock */
	/* Lender: the INTx unmask eventfd (IRQ_BRIDGE_F_UNMASK) of each slot; cons_lock and hook_lock */
	struct fp_irq_unmask {
		struct eventfd_ctx *ctx;
		/*
		 * Held as the hooks' are: vfio-pci polls this eventfd (a virqfd), and the last close of
		 * the file would unhook it (EPOLLHUP) once the agent closed its fd.
		 */
		struct file *file;
	} unmask[FARPASS_IRQ_SLOTS];
	unsigned long *seen;		/* cons_lock: slot * FARPASS_IRQ_VECTORS + vector received */
	struct delayed_work bulk;	/* the drain's bulk, out of hard irq */
	unsigned long bulk_next;	/* cons_lock: no bulk run before this (jiffies) */

	struct mutex hook_lock;
	struct xarray hooks;		/* struct fp_irq_hook by slot * FARPASS_IRQ_VECTORS + vector */

	struct dentry *dbg_file;
};

static void fp_irq_wmb(void *ctx)
{
	wmb();	/* the ring is write-combining MMIO: smp_wmb() would not order it */
}

static void fp_irq_rmb(void *ctx)
{
	rmb();	/* HEAD (or OVF) before the entries (or bitmap) the peer wrote ahead of it */
}

static void fp_irq_mb(void *ctx)
{
	mb();	/* our loads of the shared words before the store that releases them */
}

static const struct fp_mbox_barriers fp_irq_barriers = {
	.write_barrier = fp_irq_wmb,
	.read_barrier = fp_irq_rmb,
	.full_barrier = fp_irq_mb,
};

static u64 fp_irq_ring_off(struct fp_link *link)
{
	return link->xwin[FARPASS_MW_DMA].size - FP_XWIN_DMA_TAIL;
}

static u64 fp_irq_ack_off(struct fp_link *link)
{
	return link->xwin[FARPASS_MW_BAR].size - FP_XWIN_BAR_TAIL;
}

/* ------------------------------------------------------------------------------ consumer */

/*
 * An unmask from the borrower of our device in @slot: its VFIO INTx unmask eventfd (vfio-pci unmasks
 * the line; one still asserted fires again). Anything else there is the peer's mistake: dropped.
 */
static void fp_irq_unmask_deliver(struct fp_irq *irq, u32 slot, u32 vec)
{
	if (!vec && irq->unmask[slot].ctx) {
		fp_eventfd_signal(irq->unmask[slot].ctx);
		fp_count(FP_C_INTX_UNMASKS_SIGNALLED, 1);
	} else {
		fp_count(FP_C_IRQ_DROPPED, 1);
	}
}

static void fp_irq_deliver(void *ctx, u32 slot, u32 vec)
{
	struct fp_irq *irq = ctx;
	struct fp_irq_target *t;

	lockdep_assert_held(&irq->cons_lock);
	__set_bit(slot * FARPASS_IRQ_VECTORS + vec, irq->seen);
	if (slot >= FARPASS_IRQ_SLOTS) {	/* the mailbox checked slot < FP_IRQ_NR_DEV */
		fp_irq_unmask_deliver(irq, slot - FARPASS_IRQ_SLOTS, vec);
		return;
	}
	t = &irq->targets[slot];
	if (t->ops) {
		t->ops->deliver(t->ctx, vec);
		fp_count(FP_C_IRQ_DELIVERED, 1);
	} else {
		fp_count(FP_C_IRQ_DROPPED, 1);
	}
}

/* The ring now (at most its 256 entries: fine in hard irq); the bulk, if due, in the work item. */
static void fp_irq_drain(struct fp_irq *irq)
{
	u64 bad = irq->cons.bad;
	long wait;

	lockdep_assert_held(&irq->cons_lock);
	if (!irq->cons_on || irq->held)
		return;
	fp_mbox_drain_ring(&irq->cons, fp_irq_deliver, irq);
	if (irq->cons.bad != bad) {
		fp_count(FP_C_IRQ_BAD, irq->cons.bad - bad);
		dev_warn_ratelimited(&irq->link->ntb->dev, "interrupt mailbox: %llu bad entries\n",
				     irq->cons.bad - bad);
	}
	if (fp_mbox_bulk_due(&irq->cons)) {
		wait = (long)(irq->bulk_next - jiffies);
		/* Already queued: it runs the bulk as it then is. */
		queue_delayed_work(system_highpri_wq, &irq->bulk, max(wait, 0L));
	}
}

static void fp_irq_bulk_work(struct work_struct *work)
{
	struct fp_irq *irq = container_of(to_delayed_work(work), struct fp_irq, bulk);
	unsigned long flags;
	bool resync;

	spin_lock_irqsave(&irq->cons_lock, flags);
	if (irq->cons_on && !irq->held && fp_mbox_bulk_due(&irq->cons)) {
		resync = irq->cons.resync;
		fp_mbox_drain_bulk(&irq->cons, fp_irq_deliver, irq);
		irq->bulk_next = jiffies + (resync ? FP_IRQ_RESYNC_GAP : FP_IRQ_SCAN_GAP);
		if (resync)
			fp_count(FP_C_IRQ_RESYNCS, 1);
	}
	spin_unlock_irqrestore(&irq->cons_lock, flags);
}

/* The NTB's doorbell handler (hard irq): FP_DB_IRQ is ours. */
static void fp_irq_doorbell(struct fp_link *link, u64 bits)
{
	struct fp_irq *irq = link->irq;
	unsigned long flags;

	if (!(bits & BIT_ULL(FP_DB_IRQ)))
		return;
	/* Clear first: a post after the drain rings again. */
	ntb_db_clear(link->ntb, BIT_ULL(FP_DB_IRQ));
	if (!irq)
		return;
	spin_lock_irqsave(&irq->cons_lock, flags);
	fp_irq_drain(irq);
	spin_unlock_irqrestore(&irq->cons_lock, flags);
}

int fp_irq_attach(struct fp_link *link, u32 slot, const struct fp_irq_target_ops *ops, void *ctx)
{
	struct fp_irq *irq = link->irq;
	unsigned long flags;
	int ret = 0;

	if (!irq)
		return -EOPNOTSUPP;
	if (slot >= FARPASS_IRQ_SLOTS || !ops)
		return -EINVAL;
	spin_lock_irqsave(&irq->cons_lock, flags);
	if (irq->targets[slot].ops) {
		ret = -EBUSY;
	} else {
		irq->targets[slot].ops = ops;
		irq->targets[slot].ctx = ctx;
	}
	spin_unlock_irqrestore(&irq->cons_lock, flags);
	return ret;
}

void fp_irq_detach(struct fp_link *link, u32 slot)
{
	struct fp_irq *irq = link->irq;
	unsigned long flags;

	if (!irq || slot >= FARPASS_IRQ_SLOTS)
		return;
	/* Deliveries run under cons_lock: once we hold it, none of the old target is running. */
	spin_lock_irqsave(&irq->cons_lock, flags);
	irq->targets[slot].ops = NULL;
	irq->targets[slot].ctx = NULL;
	spin_unlock_irqrestore(&irq->cons_lock, flags);
}

/* ------------------------------------------------------------------------------ producer */

/* Post (@slot, @vec) to the peer and ring its doorbell; any context. 1 overflowed, -ENOLINK not up. */
static int fp_irq_post(struct fp_irq *irq, u32 slot, u32 vec)
{
	unsigned long flags;
	int ret = -ENOLINK;

	spin_lock_irqsave(&irq->prod_lock, flags);
	if (irq->prod_on)
		ret = fp_mbox_post(&irq->prod, slot, vec);
	spin_unlock_irqrestore(&irq->prod_lock, flags);
	if (ret < 0)
		return ret;
	if (ret)
		fp_count(FP_C_IRQ_OVERFLOWS, 1);
	wmb();	/* the ring's write-combined stores before the doorbell's uncached one */
	ntb_peer_db_set(irq->link->ntb, BIT_ULL(FP_DB_IRQ));
	return ret;
}

/* vfio_virqfd handler: the eventfd's wake-up, atomic context, any CPU. */
static int fp_irq_fired(void *opaque, void *data)
{
	struct fp_irq_hook *h = data;

	fp_count(fp_irq_post(opaque, h->slot, h->vec) < 0 ? FP_C_IRQ_UNPOSTED : FP_C_IRQ_POSTED, 1);
	return 0;
}

int fp_irq_post_unmask(struct fp_link *link, u32 slot)
{
	int ret;

	if (!link->irq || slot >= FARPASS_IRQ_SLOTS)
		return -EINVAL;
	ret = fp_irq_post(link->irq, FP_IRQ_UNMASK_SLOT(slot), 0);
	fp_count(ret < 0 ? FP_C_IRQ_UNPOSTED : FP_C_INTX_UNMASKS_POSTED, 1);
	return ret < 0 ? ret : 0;
}

static void fp_irq_unhook(struct fp_irq *irq, unsigned long idx)
{
	struct fp_irq_hook *h;

	lockdep_assert_held(&irq->hook_lock);
	h = xa_erase(&irq->hooks, idx);
	if (!h)
		return;
	/* Returns once the handler is off the eventfd's wait queue. */
	vfio_virqfd_disable(&h->virqfd);
	fput(h->file);
	kfree(h);
	fp_count(FP_C_IRQ_HOOKS, -1);
}

static int fp_irq_hook(struct fp_irq *irq, u32 slot, u32 vec, int fd)
{
	unsigned long idx = slot * FARPASS_IRQ_VECTORS + vec;
	struct fp_irq_hook *h;
	int ret;

	lockdep_assert_held(&irq->hook_lock);
	fp_irq_unhook(irq, idx);
	h = kzalloc(sizeof(*h), GFP_KERNEL);
	if (!h)
		return -ENOMEM;
	h->irq = irq;
	h->slot = slot;
	h->vec = vec;
	ret = -EBADF;
	h->file = fget(fd);
	if (!h->file)
		goto out_free;
	ret = xa_insert(&irq->hooks, idx, h, GFP_KERNEL);
	if (ret)
		goto out_fput;
	ret = vfio_virqfd_enable(irq, fp_irq_fired, NULL, h, &h->virqfd, fd);
	if (ret) {
		ret = -EBADF;	/* not an eventfd (or closed meanwhile) */
		goto out_erase;
	}
	fp_count(FP_C_IRQ_HOOKS, 1);
	return 0;

out_erase:
	xa_erase(&irq->hooks, idx);
out_fput:
	fput(h->file);
out_free:
	kfree(h);
	return ret;
}

static void fp_irq_unhook_range(struct fp_irq *irq, u32 slot, u32 start, u32 count)
{
	unsigned long base = slot * FARPASS_IRQ_VECTORS, idx;
	struct fp_irq_hook *h;

	lockdep_assert_held(&irq->hook_lock);
	if (!count)
		return;
	xa_for_each_range(&irq->hooks, idx, h, base + start, base + start + count - 1)
		fp_irq_unhook(irq, idx);
}

/* Swap in @u (none: zeroed) as the unmask eventfd of our device in @slot; the old one is released. */
static void fp_irq_set_unmask(struct fp_irq *irq, u32 slot, struct fp_irq_unmask u)
{
	unsigned long flags;

	lockdep_assert_held(&irq->hook_lock);
	spin_lock_irqsave(&irq->cons_lock, flags);
	swap(irq->unmask[slot], u);
	spin_unlock_irqrestore(&irq->cons_lock, flags);
	if (u.ctx) {
		eventfd_ctx_put(u.ctx);
		fput(u.file);
		fp_count(FP_C_IRQ_HOOKS, -1);
	}
}

/* IRQ_BRIDGE_F_UNMASK: fds[0] (-1: none) becomes the slot's unmask eventfd. */
static int fp_irq_bridge_unmask(struct fp_irq *irq, u32 slot, s32 fd)
{
	struct fp_irq_unmask u = { NULL, NULL };

	if (fd != -1) {
		u.file = fget(fd);
		if (!u.file)
			return -EBADF;
		u.ctx = eventfd_ctx_fileget(u.file);
		if (IS_ERR(u.ctx)) {
			fput(u.file);
			return -EBADF;
		}
		fp_count(FP_C_IRQ_HOOKS, 1);
	}
	fp_irq_set_unmask(irq, slot, u);
	return 0;
}

int fp_irq_bridge(const struct farpass_irq_bridge *b, const s32 *fds)
{
	struct fp_link *link;
	struct fp_irq *irq;
	int ret = 0;
	u32 i;

	mutex_lock(&fp_lock);
	link = fp_link_find(b->ntb);
	if (!link || link->dying) {
		ret = -ENODEV;
		goto out_unlock;
	}
	irq = link->irq;
	if (!irq) {
		ret = -EOPNOTSUPP;
		goto out_unlock;
	}
	mutex_lock(&irq->hook_lock);
	if (b->flags & FARPASS_IRQ_BRIDGE_F_CLEAR) {
		fp_irq_unhook_range(irq, b->irq_slot, 0, FARPASS_IRQ_VECTORS);
		fp_irq_set_unmask(irq, b->irq_slot, (struct fp_irq_unmask){});
	}
	if (b->flags & FARPASS_IRQ_BRIDGE_F_UNMASK) {
		ret = fp_irq_bridge_unmask(irq, b->irq_slot, fds[0]);
		goto out_unlock_hooks;
	}
	for (i = 0; i < b->count; i++) {
		if (fds[i] == -1)
			fp_irq_unhook_range(irq, b->irq_slot, b->start + i, 1);
		else
			ret = fp_irq_hook(irq, b->irq_slot, b->start + i, fds[i]);
		if (ret) {
			/* All or nothing for this call's vectors: the agent retries the whole set. */
			fp_irq_unhook_range(irq, b->irq_slot, b->start, i);
			break;
		}
	}
out_unlock_hooks:
	mutex_unlock(&irq->hook_lock);
out_unlock:
	mutex_unlock(&fp_lock);
	return ret;
}

/* ------------------------------------------------------------------------------ link life */

/* Link up, before our first HELLO. */
static void fp_irq_link_up(struct fp_link *link)
{
	struct fp_irq *irq = link->irq;
	unsigned long flags;

	lockdep_assert_held(&link->ctrl_lock);
	if (!irq)
		return;
	irq->started = false;
	spin_lock_irqsave(&irq->cons_lock, flags);
	/* The last session's ring must not be drained against this session's fresh tail. */
	memset(page_address(irq->ring_pages), 0, FP_IRQ_RING_BYTES);
	spin_unlock_irqrestore(&irq->cons_lock, flags);
}

/*
 * Each HELLO from the peer (it runs farpass): the first (re)starts both mailboxes, and tells every
 * attached target that what crossed the link while it was down is lost.
 */
static void fp_irq_peer_hello(struct fp_link *link)
{
	struct fp_irq *irq = link->irq;
	unsigned long flags;
	u32 slot;

	lockdep_assert_held(&link->ctrl_lock);
	if (!irq || irq->started)
		return;
	irq->started = true;
	spin_lock_irqsave(&irq->prod_lock, flags);
	/* The peer's consumer writes it, but only once it started too, with its tail at 0. */
	memset(page_address(irq->ack_page), 0, FP_XWIN_BAR_TAIL);
	/* mailbox.h: volatile u32 words are single 32-bit MMIO accesses on x86 (the __iomem casts). */
	fp_mbox_prod_init(&irq->prod, &fp_irq_geom, (__force volatile u32 *)irq->ring_io,
			  page_address(irq->ack_page), irq->pending, &fp_irq_barriers);
	irq->prod_on = true;
	spin_unlock_irqrestore(&irq->prod_lock, flags);

	spin_lock_irqsave(&irq->cons_lock, flags);
	fp_mbox_cons_init(&irq->cons, &fp_irq_geom, page_address(irq->ring_pages),
			  (__force volatile u32 *)irq->ack_io, &fp_irq_barriers);
	irq->cons_on = true;
	fp_irq_drain(irq);
	for (slot = 0; slot < FARPASS_IRQ_SLOTS; slot++)
		if (irq->targets[slot].ops)
			irq->targets[slot].ops->link_back(irq->targets[slot].ctx);
	spin_unlock_irqrestore(&irq->cons_lock, flags);
}

/* Stop posting and draining. */
static void fp_irq_link_down(struct fp_link *link)
{
	struct fp_irq *irq = link->irq;
	unsigned long flags;

	if (!irq)
		return;
	spin_lock_irqsave(&irq->prod_lock, flags);
	irq->prod_on = false;
	spin_unlock_irqrestore(&irq->prod_lock, flags);
	spin_lock_irqsave(&irq->cons_lock, flags);
	irq->cons_on = false;
	spin_unlock_irqrestore(&irq->cons_lock, flags);
}

static int fp_irq_show(struct seq_file *s, void *unused)
{
	struct fp_irq *irq = s->private;
	unsigned long flags;
	u32 slot;

	spin_lock_irqsave(&irq->prod_lock, flags);
	seq_printf(s, "producer %s\nposted %llu\noverflowed %llu\ncoalesced %llu\n",
		   irq->prod_on ? "on" : "off", irq->prod.posted, irq->prod.overflowed,
		   irq->prod.coalesced);
	spin_unlock_irqrestore(&irq->prod_lock, flags);
	spin_lock_irqsave(&irq->cons_lock, flags);
	seq_printf(s, "consumer %s%s\ndelivered %llu\nbad %llu\nscans %llu\nresyncs %llu\n",
		   irq->cons_on ? "on" : "off", irq->held ? " held" : "", irq->cons.delivered,
		   irq->cons.bad, irq->cons.scans, irq->cons.resyncs);
	for (slot = 0; slot < FP_IRQ_NR_DEV; slot++) {
		unsigned long *bits = irq->seen + BIT_WORD(slot * FARPASS_IRQ_VECTORS);

		if (!bitmap_empty(bits, FARPASS_IRQ_VECTORS))
			seq_printf(s, "seen %u %*pbl\n", slot, FARPASS_IRQ_VECTORS, bits);
	}
	spin_unlock_irqrestore(&irq->cons_lock, flags);
	return 0;
}

static int fp_irq_open(struct inode *inode, struct file *file)
{
	return single_open(file, fp_irq_show, inode->i_private);
}

static ssize_t fp_irq_write(struct file *file, const char __user *ubuf, size_t len, loff_t *ppos)
{
	struct fp_irq *irq = file_inode(file)->i_private;
	ssize_t ret = len;
	unsigned long flags;
	char cmd[16];

	if (len >= sizeof(cmd) || copy_from_user(cmd, ubuf, len))
		return -EINVAL;
	cmd[len] = 0;
	spin_lock_irqsave(&irq->cons_lock, flags);
	if (sysfs_streq(cmd, "hold")) {
		irq->held = true;
	} else if (sysfs_streq(cmd, "release")) {
		irq->held = false;
		fp_irq_drain(irq);
	} else if (sysfs_streq(cmd, "clear")) {
		bitmap_zero(irq->seen, FP_IRQ_NR_BITS);
	} else {
		ret = -EINVAL;
	}
	spin_unlock_irqrestore(&irq->cons_lock, flags);
	return ret;
}

static const struct file_operations fp_irq_fops = {
	.owner = THIS_MODULE,
	.open = fp_irq_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
	.write = fp_irq_write,
};

/* Map @size bytes of fresh zeroed pages at @off of our window @mw: 0 and *pages, or -errno. */
static int fp_irq_map_local(struct fp_link *link, int mw, u64 off, size_t size, struct page **pages)
{
	int ret;

	*pages = alloc_pages(GFP_KERNEL | __GFP_ZERO, get_order(size));
	if (!*pages)
		return -ENOMEM;
	ret = fp_xwin_map(link, mw, off, page_to_phys(*pages), size, IOMMU_READ | IOMMU_WRITE);
	if (ret) {
		__free_pages(*pages, get_order(size));
		return ret;
	}
	return 0;
}

static void fp_irq_unmap_local(struct fp_link *link, int mw, u64 off, size_t size, struct page *pages)
{
	fp_xwin_unmap(link, mw, off, size);
	__free_pages(pages, get_order(size));
}

/* Probe, after the windows' (xwin.c): 0 also when there is no data path. */
static int fp_irq_link_init(struct fp_link *link)
{
	phys_addr_t dma_base, bar_base;
	u64 dma_size, bar_size;
	struct fp_irq *irq;
	int ret;

	if (!fp_xwin_ready(link))
		return 0;
	ret = fp_xwin_peer(link, FARPASS_MW_DMA, &dma_base, &dma_size);
	if (!ret)
		ret = fp_xwin_peer(link, FARPASS_MW_BAR, &bar_base, &bar_size);
	if (ret)
		return ret;
	irq = kzalloc(sizeof(*irq), GFP_KERNEL);
	if (!irq)
		return -ENOMEM;
	irq->link = link;
	spin_lock_init(&irq->prod_lock);
	spin_lock_init(&irq->cons_lock);
	mutex_init(&irq->hook_lock);
	xa_init(&irq->hooks);
	INIT_DELAYED_WORK(&irq->bulk, fp_irq_bulk_work);
	irq->bulk_next = jiffies;	/* not 0: jiffies start near the wrap */
	ret = -ENOMEM;
	irq->pending = kcalloc(fp_mbox_bitmap_words(&fp_irq_geom), sizeof(u32), GFP_KERNEL);
	if (!irq->pending)
		goto out_free;
	irq->seen = bitmap_zalloc(FP_IRQ_NR_BITS, GFP_KERNEL);
	if (!irq->seen)
		goto out_free;
	/* The peer's tails sit where ours do: the windows of a link are symmetric (xwin.h). */
	irq->ring_io = ioremap_wc(dma_base + fp_irq_ring_off(link), FP_XWIN_DMA_TAIL);
	if (!irq->ring_io)
		goto out_free;
	irq->ack_io = ioremap(bar_base + fp_irq_ack_off(link), FP_XWIN_BAR_TAIL);
	if (!irq->ack_io)
		goto out_unmap_ring_io;
	ret = fp_irq_map_local(link, FARPASS_MW_DMA, fp_irq_ring_off(link), FP_XWIN_DMA_TAIL,
			       &irq->ring_pages);
	if (ret)
		goto out_unmap_ack_io;
	ret = fp_irq_map_local(link, FARPASS_MW_BAR, fp_irq_ack_off(link), FP_XWIN_BAR_TAIL,
			       &irq->ack_page);
	if (ret)
		goto out_unmap_ring;
	irq->dbg_file = debugfs_create_file("irq", 0600, link->dbg_dir, irq, &fp_irq_fops);
	link->irq = irq;
	return 0;

out_unmap_ring:
	fp_irq_unmap_local(link, FARPASS_MW_DMA, fp_irq_ring_off(link), FP_XWIN_DMA_TAIL,
			   irq->ring_pages);
out_unmap_ack_io:
	iounmap(irq->ack_io);
out_unmap_ring_io:
	iounmap(irq->ring_io);
out_free:
	bitmap_free(irq->seen);
	kfree(irq->pending);
	kfree(irq);
	return ret;
}

/* Remove, no doorbell left: unhook every eventfd, free. */
static void fp_irq_link_exit(struct fp_link *link)
{
	struct fp_irq *irq = link->irq;
	struct fp_irq_hook *h;
	unsigned long idx;

	if (!irq)
		return;
	debugfs_remove(irq->dbg_file);	/* waits for readers and writers */
	mutex_lock(&irq->hook_lock);
	xa_for_each(&irq->hooks, idx, h)
		fp_irq_unhook(irq, idx);
	for (idx = 0; idx < FARPASS_IRQ_SLOTS; idx++)
		fp_irq_set_unmask(irq, idx, (struct fp_irq_unmask){});
	mutex_unlock(&irq->hook_lock);
	xa_destroy(&irq->hooks);
	fp_irq_link_down(link);
	cancel_delayed_work_sync(&irq->bulk);	/* off now: nothing queues it again */
	link->irq = NULL;
	fp_irq_unmap_local(link, FARPASS_MW_BAR, fp_irq_ack_off(link), FP_XWIN_BAR_TAIL,
			   irq->ack_page);
	fp_irq_unmap_local(link, FARPASS_MW_DMA, fp_irq_ring_off(link), FP_XWIN_DMA_TAIL,
			   irq->ring_pages);
	iounmap(irq->ack_io);
	iounmap(irq->ring_io);
	bitmap_free(irq->seen);
	kfree(irq->pending);
	kfree(irq);
}

const struct fp_link_role_ops fp_irq_role = {
	.probe = fp_irq_link_init,
	.link_up = fp_irq_link_up,
	.peer_hello = fp_irq_peer_hello,
	.link_down = fp_irq_link_down,
	.doorbell = fp_irq_doorbell,
	.free = fp_irq_link_exit,
};
