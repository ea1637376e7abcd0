/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * fp.h - farpass.ko's shared objects: NTB links, announced remote devices, and the one global lock.
 *
 * Locking (outer to inner):
 *   fp_lock (mutex)        fp_links, fp_devices, each link's type table and mdev parent registration.
 *                          Taken by ioctls, NTB client probe/remove and the re-registration work.
 *   link->ctrl_lock (mutex) a link's control-protocol state (up, handshake); work items only.
 *   link->inst_lock (spin)  instance accounting: link->nr_instances, rereg_busy, rdev->claimed,
 *                          rdev->inst and rdev->withdrawn; REVOKE_DEVICE takes an instance's
 *                          state_lock inside it. The mdev probe/remove callbacks take ONLY this lock: they
 *                          run under the mdev core's parent unreg_sem, and fp_lock is held around
 *                          mdev_unregister_parent() (which takes unreg_sem for writing) when a type
 *                          table is re-registered, so taking fp_lock there would deadlock. The NTB
 *                          remove's unregistration, which waits for VFIO users, runs without fp_lock
 *                          on a link marked dying (fp_link_types_teardown()).
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

	/* mdev parent (mdev.c); fp_lock. */
	struct mdev_parent parent;
	bool parent_registered;
	bool rereg_pending;		/* the type table is stale: re-register when no instance is left */
	struct mdev_type **types;	/* what the parent was registered with: fp_type.type */
	unsigned int nr_types;
	struct work_struct rereg_work;

	/* Inbound windows (xwin.c): set at probe, torn down at remove, constant in between. */
	struct iommu_domain *xwin_domain;	/* the NTB's DMA domain; NULL: no data path */
	struct fp_xwin xwin[FP_XWIN_NR];	/* by FARPASS_MW_*; page tables inside: see xwin.h */
	struct mutex xwin_lock;		/* lent BARs (lend.c): bar_maps */
	struct list_head bar_maps;	/* struct fp_bar_map; xwin_lock */

	struct fp_irq *irq;		/* interrupt bridge (irqbridge.c); NULL: no data path */

	spinlock_t inst_lock;		/* see the top of this file */
	unsigned int nr_instances;
	bool rereg_busy;		/* parent being re-registered: mdev probe fails with -EAGAIN */

	struct dentry *dbg_dir;
};

/* An announced remote device: one mdev type on its link's parent. */
struct fp_rdev {
	struct list_head node;		/* in fp_devices; fp_lock */
	struct fp_link *link;
	struct farpass_announce desc;	/* as announced; immutable */
	char sysfs_name[64];
	char pretty_name[128];
	bool registered;		/* fp_lock: in the link's current type table */
	bool withdrawn;			/* fp_lock + inst_lock to write, either to read */
	bool claimed;			/* inst_lock: an instance exists (one per remote device) */
	struct fp_mdev *inst;		/* inst_lock: that instance, while it is registered with VFIO */
};

/*
 * The mdev type object of one registration of the parent. The mdev core embeds a kobject in struct
 * mdev_type and never lets the driver know when it is released, and a kobject cannot be initialised
 * twice: so each (re-)registration gets fresh fp_type objects, freed after mdev_unregister_parent().
 */
struct fp_type {
	struct mdev_type type;
	struct fp_rdev *rdev;		/* outlives the type: freed only after its type is unregistered */
};

static inline struct fp_rdev *fp_rdev_of(struct mdev_type *mtype)
{
	return container_of(mtype, struct fp_type, type)->rdev;
}

#endif /* FARPASS_FP_H */
