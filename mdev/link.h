/* SPDX-License-Identifier: GPL-2.0-only */
/* link.h - the NTB client (ntb.c): one struct fp_link per NTB device. */
#ifndef FARPASS_LINK_H
#define FARPASS_LINK_H

#include <linux/types.h>

struct fp_link;

/*
 * A role's part in every link's life. ntb.c calls the roles of its fp_link_roles[] in that order as a
 * link comes (probe, link up, the peer's HELLO, doorbells) and in reverse as it goes (link down, remove),
 * the way NTB clients hook into an NTB through ntb_client_ops. Any hook may be NULL.
 */
struct fp_link_role_ops {
	/* Probe, before the peer can see the link. Undone by .free, also when a later probe step fails. */
	int (*probe)(struct fp_link *link);
	/* Probe, once the link is on fp_links (fp_lock held): what requests may find from now on. */
	int (*listed)(struct fp_link *link);
	/* Under link->ctrl_lock. */
	void (*link_up)(struct fp_link *link);		/* before our first HELLO */
	/* A HELLO from a new peer end (its first, or the first since it was probed again), before .peer_hello. */
	void (*peer_new)(struct fp_link *link);
	void (*peer_hello)(struct fp_link *link);	/* each HELLO from the peer */
	void (*link_down)(struct fp_link *link);
	/* The NTB's doorbell handler (hard-irq context), with the doorbell bits it read. */
	void (*doorbell)(struct fp_link *link, u64 bits);
	/* Remove, the link off fp_links and dying, its events still running, fp_lock not held. */
	void (*detach)(struct fp_link *link);
	/* Remove, or a failed probe, once no link or doorbell event runs: free what .probe set up. */
	void (*free)(struct fp_link *link);
};

/* In ntb.c's order: the windows first, the mdev types (what guests use) last. */
extern const struct fp_link_role_ops fp_xwin_role;	/* xwin.c: the inbound windows */
extern const struct fp_link_role_ops fp_dmawin_role;	/* dmawin.c: borrowed guests' DMA windows */
extern const struct fp_link_role_ops fp_irq_role;	/* irqbridge.c: the interrupt bridge */
extern const struct fp_link_role_ops fp_win_role;	/* window.c: the agent's outbound window mmaps */
extern const struct fp_link_role_ops fp_lend_role;	/* lend.c: lent BARs */
extern const struct fp_link_role_ops fp_types_role;	/* types.c: the mdev parent and its types */

int fp_ntb_init(void);
void fp_ntb_exit(void);

/* The link whose NTB PCI device is called @name; NULL if none. Caller holds fp_lock. */
struct fp_link *fp_link_find(const char *name);
struct farpass_link_status;
int fp_link_status(struct farpass_link_status *st);

/* window.c: the lender role's outbound window mmap. */
struct farpass_outbound_window;
struct file;
struct vm_area_struct;
int fp_win_describe(struct farpass_outbound_window *w);
int fp_win_mmap(struct file *file, struct vm_area_struct *vma);

#endif /* FARPASS_LINK_H */
