/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * fp.h - farpass.ko's shared objects: NTB links, announced remote devices, and the one global lock.
 *
 * Locking (outer to inner):
 *   fp_lock (mutex)        fp_links, fp_devices, each link's mdev parent registration and lender name,
 *                          and a slot's device (with inst_lock: see below). Taken by ioctls and NTB
 *                          client probe/remove.
 *   link->ctrl_lock (mutex) a link's control-protocol state (up, handshake); work items only.
 *   link->inst_lock (spin)  the link's slots and instances: slot->rdev (written under fp_lock AND
 *                          inst_lock, read under either), rdev->claimed and rdev->inst; REVOKE_DEVICE
 *                          takes an instance's state_lock inside it. The mdev callbacks (probe, remove,
 *                          available_instances, description) take ONLY this lock: they run under the
 *                          mdev core's parent unreg_sem or sysfs active references, which the NTB
 *                          remove's mdev_unregister_parent() waits for, and that runs (waiting for VFIO
 *                          users) without fp_lock on a link marked dying (fp_link_types_teardown()).
 */
#ifndef FARPASS_FP_H
#define FARPASS_FP_H

#include <linux/list.h>
#include <linux/mdev.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/workqueue.h>

#include "uapi/farpass.h"
#include "xwin.h"

#define FP_NAME "farpass"

struct dentry;
struct fp_irq;
struct fp_link;
struct fp_rdev;
struct iommu_domain;
struct ntb_dev;
struct pci_dev;

extern struct mutex fp_lock;
extern struct list_head fp_links;	/* struct fp_link.node; fp_lock */
extern struct list_head fp_devices;	/* struct fp_rdev.node; fp_lock */
extern struct dentry *fp_debugfs_root;

enum fp_hs_state {
	FP_HS_DOWN,		/* link down: hs_err = -ENOLINK */
	FP_HS_PENDING,		/* HELLO sent, waiting for the peer's HELLO_ACK */
	FP_HS_OK,		/* both directions answered: the peer speaks our protocol */
	FP_HS_FAILED,		/* gave up: hs_err = -EAGAIN (no answer) or -EPROTO (other version) */
};

/*
 * One of a link's mdev types: slot `index` of the link's lender, filled by ANNOUNCE with the device the
 * lender lends at that slot, emptied by WITHDRAW. Registered once with the link's parent (types.c).
 */
struct fp_slot {
	struct mdev_type type;
	struct fp_link *link;
	unsigned int index;
	char sysfs_name[64];		/* "farpass-<lender>-<index>": constant once registered */
	char pretty_name[48];		/* "<lender> slot <index>": constant once registered */
	struct fp_rdev *rdev;		/* fp_lock + inst_lock to write, either to read; NULL: empty */
};

/* One NTB device = one link to one peer host; both the borrower and the lender role hang off it. */
struct fp_link {
	struct list_head node;		/* in fp_links; fp_lock */
	struct ntb_dev *ntb;
	struct pci_dev *pdev;		/* the NTB's PCI device: the mdev parent */
	const char *name;		/* pci_name(pdev) */
	u32 id;				/* 1.., unique while loaded: outbound window mmap cookies */
	struct list_head win_maps;	/* struct fp_win_map (window.c); fp_win_lock */
	bool dying;			/* fp_lock: being removed, no new work */

	/* Control protocol (ntb.c). */
	struct mutex ctrl_lock;		/* protects the fields down to hello_work */
	bool up;
	enum fp_hs_state hs_state;
	int hs_err;
	bool acked;			/* the peer acknowledged our HELLO */
	bool peer_seen;			/* we got a valid message from the peer */
	u32 peer_roles;
	u32 peer_version;
	u32 tx_seq;
	u32 hello_seq;			/* seq of our last HELLO */
	u32 epoch;			/* ours, sent in each HELLO: set at probe, then constant */
	u32 peer_epoch;			/* of the peer's last HELLO; 0 before the first */
	unsigned long down_since;	/* jiffies: the last link down, or the probe */
	unsigned int hello_tries;
	struct work_struct link_work;	/* link_event (hard irq) -> process context */
	struct work_struct db_work;	/* db_event (hard irq) -> process context */
	struct delayed_work hello_work;	/* (re)send HELLO until acknowledged, bounded */

	/*
	 * mdev parent (types.c): registered at probe with no type, then at the link's first ANNOUNCE
	 * with one type per slot, named after that ANNOUNCE's lender, and never again while the link
	 * lives. fp_lock.
	 */
	struct mdev_parent parent;
	bool parent_registered;
	char lender[FARPASS_NAME_LEN];		/* the lender at the other end; set with slots, then
						 * constant (the mdev callbacks read it) */
	struct fp_slot *slots;		/* FARPASS_IRQ_SLOTS, by the lender's slot (irq_slot); NULL
					 * until the first ANNOUNCE, freed after the unregistration */
	struct mdev_type *slot_types[FARPASS_IRQ_SLOTS];	/* &slots[i].type, for mdev_register_parent() */

	/* Inbound windows (xwin.c): set at probe, torn down at remove, constant in between. */
	struct iommu_domain *xwin_domain;	/* the NTB's DMA domain; NULL: no data path */
	struct fp_xwin xwin[FP_XWIN_NR];	/* by FARPASS_MW_*; page tables inside: see xwin.h */
	struct mutex xwin_lock;		/* lent BARs (lend.c): bar_maps */
	struct list_head bar_maps;	/* struct fp_bar_map; xwin_lock */

	struct fp_irq *irq;		/* interrupt bridge (irqbridge.c); NULL: no data path */

	spinlock_t inst_lock;		/* see the top of this file */

	struct dentry *dbg_dir;
};

/* An announced remote device: the device of its slot's mdev type on its link's parent. */
struct fp_rdev {
	struct list_head node;		/* in fp_devices; fp_lock */
	struct fp_link *link;
	struct farpass_announce desc;	/* as announced; immutable */
	bool claimed;			/* inst_lock: an instance exists (one per remote device) */
	struct fp_mdev *inst;		/* inst_lock: that instance, while it is registered with VFIO */
};

static inline struct fp_slot *fp_slot_of(struct mdev_type *mtype)
{
	return container_of(mtype, struct fp_slot, type);
}

#endif /* FARPASS_FP_H */
