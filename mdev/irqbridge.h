/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * irqbridge.h - the interrupt bridge (irqbridge.c): one mailbox per link and direction (mailbox.h),
 * docs/mdev.md "The interrupt bridge".
 *
 * Lender (producer): eventfds the agent handed over (IRQ_BRIDGE) are hooked like KVM's irqfd; each
 * signal posts (irq_slot, vector) into the ring area in the peer's DMA window (through our outbound
 * window FARPASS_MW_DMA, last FP_XWIN_DMA_TAIL bytes) and rings doorbell FP_DB_IRQ.
 * Borrower (consumer): the FP_DB_IRQ doorbell drains the ring in the interrupt handler and calls the
 * target attached to (link, irq_slot) for each vector; the ack area is on the last page of the peer's
 * BAR window (our outbound window FARPASS_MW_BAR).
 * INTx unmasks go the other way, borrower to lender, in the same mailboxes (irqbridge.c).
 * Both mailboxes of a link (re)start at the peer's first HELLO after link up (irqbridge.c says why);
 * link down stops them.
 */
#ifndef FARPASS_IRQBRIDGE_H
#define FARPASS_IRQBRIDGE_H

#include <linux/types.h>

struct fp_link;
struct farpass_irq_bridge;

/* Borrower side: an attached slot's target. Both are called under the link's consumer lock. */
struct fp_irq_target_ops {
	/* Every delivered vector, in hard-irq context. */
	void (*deliver)(void *ctx, u32 vector);
	/*
	 * The link is back after an outage (the mailboxes restarted at the peer's first HELLO): what the
	 * lender posted, and what we posted to it, while it was down is lost.
	 */
	void (*link_back)(void *ctx);
};

/*
 * Borrower: route slot @slot's deliveries to @ops with @ctx. -EBUSY if attached, -EINVAL slot,
 * -EOPNOTSUPP the link has no data path.
 */
int fp_irq_attach(struct fp_link *link, u32 slot, const struct fp_irq_target_ops *ops, void *ctx);
/* After it returns no call of the old target runs or will run. Never call from a target. */
void fp_irq_detach(struct fp_link *link, u32 slot);

/*
 * Borrower: tell the lender that the VFIO user unmasked the INTx of its device in @slot (the lender's
 * vfio-pci automasked it when it fired). Any context. -EINVAL slot or no data path, -ENOLINK link down.
 */
int fp_irq_post_unmask(struct fp_link *link, u32 slot);

/* Lender: FARPASS_IOCTL_IRQ_BRIDGE (header validated by the chardev, fds copied in). */
int fp_irq_bridge(const struct farpass_irq_bridge *b, const s32 *fds);

#endif /* FARPASS_IRQBRIDGE_H */
