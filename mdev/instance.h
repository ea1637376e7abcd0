/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * instance.h - one mdev instance (struct fp_mdev) and what its parts call of each other: the VFIO
 * device and mdev driver (mdev.c), its upcalls and state (instance.c), config region (vfio_cfg.c),
 * borrow and return (borrow.c), interrupts (vfio_irq.c), DMA window (vfio_dma.c), BAR regions (bar.c).
 */
#ifndef FARPASS_INSTANCE_H
#define FARPASS_INSTANCE_H

#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/vfio.h>
#include <linux/workqueue.h>

#include "cfg.h"
#include "fp.h"
#include "upcall.h"

struct eventfd_ctx;
struct fp_dmauser;
struct fp_dmawin;
struct fp_irq_target_ops;
struct fp_link;
struct inode;
struct page;
struct vm_area_struct;

/*
 * Region offsets in the device file: index << 40, as vfio-pci and the mdev samples do (QEMU takes the
 * offsets from VFIO_DEVICE_GET_REGION_INFO, never computes them).
 */
#define FP_OFFSET_SHIFT		40
#define FP_OFFSET_MASK		((1ULL << FP_OFFSET_SHIFT) - 1)
#define FP_OFFSET(index)	((u64)(index) << FP_OFFSET_SHIFT)

/*
 * One instance. Locks: scan_lock (mutex) builds vcfg at the first config access after open; bm_lock
 * (mutex) serialises borrow-state and interrupt-state changes and is held across their upcall, and
 * guards pend (forwarded config writes kept until the borrow) and the forwarded writes themselves;
 * state_lock (spinlock) the shadow, the flags and the ERR/REQ eventfds, never held across an upcall;
 * dma_lock (mutex) the DMA window's and the staged window's pages, between open/close, borrow/return,
 * the refill work and the VFIO user's unmaps; irq_lock
 * (spinlock, irqsave: the bridge delivers in hard-irq context) the interrupt eventfds; bar_lock (mutex)
 * the BAR ioremaps. Order: bm_lock -> dma_lock; bm_lock -> state_lock; bm_lock -> irq_lock.
 * refill (delayed work) takes dma_lock; it is cancelled at close, outside the locks.
 */
struct fp_mdev {
	struct vfio_device vdev;
	struct fp_rdev *rdev;		/* stays valid while the instance exists (see struct fp_type) */
	u32 instance;			/* args[0] of BORROW/RETURN/RESET: tells instances apart */
	struct mutex scan_lock;
	struct mutex bm_lock;
	spinlock_t state_lock;
	bool scanned;			/* vcfg built (acquire/release) */
	int scan_err;			/* the capability scan's error; written before scanned */
	bool dead;			/* surprise-removed: the agent did not answer; until next open */
	bool borrowed;			/* BORROW succeeded, no RETURN yet; bm_lock (WRITE_ONCE) */
	struct eventfd_ctx *err_trigger;	/* VFIO_PCI_ERR_IRQ_INDEX */
	struct eventfd_ctx *req_trigger;	/* VFIO_PCI_REQ_IRQ_INDEX */
	struct fp_vcfg vcfg;
	struct fp_cfg_pend pend;	/* bm_lock: forwarded bytes written before the borrow */
	struct fp_upcall_share uq_share;	/* its requests in the upcall queue (upcall.c) */

	struct mutex dma_lock;		/* dmawin, staged and their pages */
	struct fp_dmawin *dmawin;	/* dma_lock: from before BORROW to after RETURN */
	struct fp_dmawin *staged;	/* dma_lock: laid out at open, pinned ahead, until the borrow or close */
	struct delayed_work refill;	/* pins the staged window, and what the VFIO user maps again */
	unsigned int refill_tries;	/* dma_lock: refills since the last unmap */
	struct fp_dmauser *dmauser;	/* the VFIO user's unmaps in flight (dmauser.c); open..close */
	struct list_head p2p_node;	/* fp_p2p_lock: in the open instances (p2p.c); open..close */
	u64 p2p_id;			/* fp_p2p_lock: this open's identity, never reused */

	spinlock_t irq_lock;		/* the INTx/MSI/MSI-X triggers; irqsave (hard-irq delivery) */
	int irq_index;			/* INTx, MSI or MSI-X enabled, -1 none; bm_lock + irq_lock to write */
	u32 irq_count;			/* vectors enabled; as irq_index */
	struct eventfd_ctx **irq_trig;	/* irq_count triggers, NULL = none; as irq_index */
	bool intx_masked;		/* irq_lock: INTx automasked at delivery, or masked by the user */
	struct virqfd *intx_unmask;	/* bm_lock: the VFIO user's INTx unmask eventfd */

	struct mutex bar_lock;		/* bar_io, bar_leased; under bm_lock, and mmap_lock (faults) */
	void __iomem *bar_io[FARPASS_NUM_BARS];	/* trapped BAR accesses; bar_lock, unmapped at close */
	bool bar_leased;		/* bar_lock: BAR mmaps reach the slot (else the idle page) */
	struct page *bar_idle;		/* all-ones: what BAR mmaps see while not borrowed; open..close */
	struct inode *bar_inode;	/* its address space holds the BAR mmaps; open..close */
};

static inline struct fp_mdev *fp_mdev_of(struct vfio_device *vdev)
{
	return container_of(vdev, struct fp_mdev, vdev);
}

/* Surprise-removed (the agent did not answer, or the lease was revoked) until the next open. */
static inline bool fp_dead(struct fp_mdev *fm)
{
	return READ_ONCE(fm->dead);
}

/* mdev.c: the driver of every link's mdev parent (registered by types.c). */
extern struct mdev_driver fp_mdev_driver;

/* instance.c */
/* Signal the ERR or REQ eventfd in *@trigger, if set (state_lock). */
void fp_signal(struct fp_mdev *fm, struct eventfd_ctx *const *trigger);
/* One upcall for this instance: -ENODEV at once if dead; no answer makes it dead. */
int fp_call(struct fp_mdev *fm, u32 op, u64 arg0, u64 arg1, u64 arg2, u64 *out);
/* A forwarded config piece to the lender (CFG_READ or CFG_WRITE upcall). */
int fp_cfg_upcall(struct fp_mdev *fm, const struct fp_cfg_piece *p, u8 *buf, bool write);
/* Build the virtual config space at the first access after open (takes scan_lock), then stage DMA. */
void fp_cfg_ready(struct fp_mdev *fm);

/* vfio_cfg.c: a config region access of @count bytes at @off; bytes done or -errno. */
ssize_t fp_cfg_access(struct fp_mdev *fm, u8 *buf, u32 count, u32 off, bool write);

/* borrow.c; each with bm_lock held. */
int fp_borrow(struct fp_mdev *fm);
void fp_return(struct fp_mdev *fm);
/* Forget the config writes kept from before the borrow (reset, close). */
void fp_cfg_pend_drop(struct fp_mdev *fm);

/* vfio_irq.c */
extern const struct fp_irq_target_ops fp_irq_target;	/* the bridge's deliveries to an instance */
int fp_vfio_irq_info(struct fp_mdev *fm, unsigned long arg);
int fp_vfio_set_irqs(struct fp_mdev *fm, unsigned long arg);
/* bm_lock held: INTx/MSI/MSI-X off locally; the lender told how many vectors to arm (if borrowed). */
void fp_irq_disable(struct fp_mdev *fm);
int fp_irq_upcall(struct fp_mdev *fm, int index, u32 count);

/* vfio_dma.c */
void fp_dma_stage(struct fp_mdev *fm);
void fp_dma_unstage(struct fp_mdev *fm);
/* The DMA window goes; its range stays quarantined unless @returned (the lender confirmed). */
void fp_dma_destroy(struct fp_mdev *fm, bool returned);
void fp_refill_work(struct work_struct *work);		/* fm->refill */
void fp_vfio_dma_unmap(struct vfio_device *vdev, u64 iova, u64 length);	/* vfio_device_ops */

/* bar.c: the BAR regions. */
/* ANNOUNCE (fp_lock): @desc's BAR slots in @link's BAR window, apart from every other slot there. */
int fp_bar_slots_check(struct fp_link *link, const struct farpass_announce *desc);
const struct farpass_bar *fp_bar_mapped(struct fp_mdev *fm, u32 index);
int fp_bar_sparse_cap(struct fp_mdev *fm, u32 index, u64 size, struct vfio_info_cap *caps);
ssize_t fp_bar_rw(struct fp_mdev *fm, u32 index, char __user *ubuf, size_t count, u64 off, bool write);
int fp_bar_mmap(struct vfio_device *vdev, struct vm_area_struct *vma);
/* The physical address of BAR @b's slot in @link's outbound BAR window: 0, or -errno if it is not there. */
int fp_bar_slot_phys(struct fp_link *link, const struct farpass_bar *b, phys_addr_t *phys);
/* Open/close of the instance: the BAR mmaps' address space and idle page, the trapped ioremaps. */
int fp_bar_open(struct fp_mdev *fm);
void fp_bar_close(struct fp_mdev *fm);
/* Borrow state (bm_lock): revoke every BAR mmap page; later faults map the slot only if @leased. */
void fp_bar_lease(struct fp_mdev *fm, bool leased);

#endif /* FARPASS_INSTANCE_H */
