// SPDX-License-Identifier: GPL-2.0-only
/*
 * p2p.c - peer-to-peer DMA between the farpass devices of one VFIO user (docs/mdev.md
 * "Peer-to-peer between remote devices").
 *
 * A guest may point a device's DMA at another device's BAR (an NVMe reading into a peer's memory, as
 * SPIN and GPUDirect Storage do). QEMU puts a VM's devices in one container and maps their BARs
 * there; the lender maps only our DMA window, so the borrowing device's window gets a slot for each
 * memory BAR the guest placed of the VFIO user's instances on *other* links, mapped (MMIO) in our
 * NTB's domain onto that BAR's slot in the other link's outbound BAR window. The path: device ->
 * lender A's IOMMU -> NTB A -> our IOMMU -> NTB B -> lender B's IOMMU (which maps the slot only while
 * the peer is borrowed over that link) -> the peer's BAR; no software on it. A peer on the same link
 * is listed instead (a lender peer: no window slot, nothing mapped here), for the lender's agent to
 * map the device's IOVA straight onto its own device's BAR, without the hairpin through us.
 *
 * A mapping to a peer's slot must not outlive the peer's instance: once it is closed, another VM's
 * instance may borrow the same device. So each open instance gets an identity never reused, windows
 * record it, and a close unmaps every window's mappings of it (and stops listing it as a lender peer)
 * before it returns. The peers' BARs are
 * those placed at the borrow: a BAR the guest moves later is followed at the next borrow.
 *
 * fp_p2p_lock (mutex) protects the list of open instances, their identities and the counter. A
 * borrow maps its peers under it, so a peer that closes meanwhile is either seen gone or unmapped by
 * its close. Order: dma_lock -> fp_p2p_lock -> fp_dmawin_lock; fp_p2p_lock -> a peer's state_lock.
 */
#include <linux/list.h>
#include <linux/mutex.h>

#include "dmawin.h"
#include "instance.h"
#include "link.h"
#include "p2p.h"

static DEFINE_MUTEX(fp_p2p_lock);
static LIST_HEAD(fp_p2p_open_list);
static u64 fp_p2p_next_id;

void fp_p2p_open(struct fp_mdev *fm)
{
	mutex_lock(&fp_p2p_lock);
	fm->p2p_id = ++fp_p2p_next_id;
	list_add_tail(&fm->p2p_node, &fp_p2p_open_list);
	mutex_unlock(&fp_p2p_lock);
}

void fp_p2p_close(struct fp_mdev *fm)
{
	mutex_lock(&fp_p2p_lock);
	list_del(&fm->p2p_node);
	fp_dmawin_unmap_peers_of(fm->p2p_id);
	mutex_unlock(&fp_p2p_lock);
}

/* fp_dmawin_map_peers' question: is the instance @id still open? */
static bool fp_p2p_is_open(u64 id)
{
	struct fp_mdev *p;

	lockdep_assert_held(&fp_p2p_lock);
	list_for_each_entry(p, &fp_p2p_open_list, p2p_node)
		if (p->p2p_id == id)
			return true;
	return false;
}

/*
 * The memory BARs @p's guest placed: on @link, lender peers; else each with its slot in @p's link's
 * outbound BAR window.
 */
static u32 fp_p2p_bars_of(struct fp_mdev *p, struct fp_link *link, struct fp_dmawin_peer *out, u32 room)
{
	const struct farpass_bar *bars = p->rdev->desc.bars;
	u32 n = 0;
	u64 gpa;
	int i;

	lockdep_assert_held(&fp_p2p_lock);
	if (!smp_load_acquire(&p->scanned))
		return 0;	/* config space not built: the guest placed nothing yet */
	for (i = 0; i < FARPASS_NUM_BARS && n < room; i++) {
		bool placed;

		if (!(bars[i].flags & FARPASS_BAR_MAPPED))
			continue;
		spin_lock(&p->state_lock);
		placed = fp_vcfg_bar_addr(&p->vcfg, bars, i, &gpa);
		spin_unlock(&p->state_lock);
		if (!placed)
			continue;
		out[n] = (struct fp_dmawin_peer){ .owner = p->p2p_id, .gpa = gpa, .size = bars[i].size };
		if (p->rdev->link == link) {
			out[n].on_lender = true;
			out[n].device_id = p->rdev->desc.device_id;
			out[n].bar = i;
		} else if (fp_bar_slot_phys(p->rdev->link, &bars[i], &out[n].phys)) {
			continue;
		}
		n++;
	}
	return n;
}

int fp_p2p_window_create(struct fp_mdev *fm, struct fp_borrow_stat *st)
{
	struct fp_dmawin_peer peers[FP_DMAWIN_MAX_PEERS];
	struct fp_link *link = fm->rdev->link;
	struct fp_mdev *p;
	u32 n = 0;
	int ret;

	lockdep_assert_held(&fm->dma_lock);
	mutex_lock(&fp_p2p_lock);
	list_for_each_entry(p, &fp_p2p_open_list, p2p_node)
		if (p != fm && p->dmauser == fm->dmauser)
			n += fp_p2p_bars_of(p, link, peers + n, FP_DMAWIN_MAX_PEERS - n);
	mutex_unlock(&fp_p2p_lock);

	/* Pinning takes long: without the lock, so other instances open and close meanwhile. */
	ret = fp_dmawin_create(link, &fm->vdev, fm->rdev->desc.device_id, peers, n, &fm->staged, &fm->dmawin,
			       st);
	if (ret || !n)
		return ret;
	mutex_lock(&fp_p2p_lock);
	fp_dmawin_map_peers(fm->dmawin, fp_p2p_is_open);
	mutex_unlock(&fp_p2p_lock);
	return 0;
}
