// SPDX-License-Identifier: GPL-2.0-only
/*
 * dmawin.c - the borrower's DMA window of one borrow: guest RAM found by probing, laid out in a
 * sub-window of the link's inbound window FARPASS_MW_DMA, pinned and mapped in the NTB's IOMMU domain
 * (docs/mdev.md "The DMA window", steps 1-4). The lender maps the slots itself (step 5), from
 * FARPASS_IOCTL_DMA_LAYOUT.
 *
 * Invariant (per slot): every pinned page (pages[i] != NULL) is mapped, and each IOMMU mapping lies
 * inside one maximal physically contiguous run of pinned pages. Runs are unmapped as a whole, so an
 * unmap never cuts into a large IOMMU page; a VFIO user's partial unmap re-maps the surviving parts of
 * the runs it cut. Pages pinned again by a refill are mapped on their own (a run may then span
 * several mappings, each wholly inside it).
 *
 * Cost: the borrow maps each stretch of pinned pages (a whole slot unless the VFIO user unmapped part
 * of it) with one IOMMU call and one IOTLB sync, each run in it its own mappings (iommu_map_sg); the
 * release unmaps every stretch, then flushes once, then unpins.
 *
 * Huge pages: where a 2 MiB block of guest RAM is one hugetlb page, only its first and last 4 KiB
 * pages are pinned (vfio_pin_pages); they hold the whole folio, and the pages between are "held"
 * (held[] set, accounted to the VFIO user's locked_vm here as type1 accounts its pins). A held page
 * goes only with its whole block (fp_huge_widen()), never while an anchor of its block stays.
 *
 * Staged (docs/mdev.md "The DMA window"): after open, a window laid out for the RAM the VFIO user has
 * mapped, its page arrays allocated, on no list and mapped nowhere; the refill pins it in the
 * background. A borrow whose layout is the same takes its pages and pins only what is still missing.
 */
#include <linux/capability.h>
#include <linux/iommu.h>
#include <linux/ktime.h>
#include <linux/mm.h>
#include <linux/ntb.h>
#include <linux/overflow.h>
#include <linux/scatterlist.h>
#include <linux/sched/signal.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/vfio.h>

#include "counters.h"
#include "dmawin.h"
#include "fp.h"
#include "link.h"
#include "ramscan.h"
#include "winlayout.h"
#include "xwin.h"

/* Beyond any x86-64 guest's physical address width: ramscan's searches are bounded by what it finds. */
#define FP_DMAWIN_SCAN_LIMIT	BIT_ULL(52)
/* offset == GPA mod 2 MiB: low memory an identity map, huge IOMMU pages possible on both sides. */
#define FP_DMAWIN_RANGE_ALIGN	SZ_2M
#define FP_DMAWIN_PROT		(IOMMU_READ | IOMMU_WRITE)
/* Guest pages of a 2 MiB block (GPA-aligned), which a hugetlb page may hold whole. */
#define FP_HUGE_PAGES		(SZ_2M >> PAGE_SHIFT)

struct fp_dmawin {
	struct list_head node;		/* in fp_dmawins, ascending base per link; fp_dmawin_lock */
	struct fp_link *link;
	struct vfio_device *vdev;
	u32 device_id;
	u64 base;			/* sub-window start in FARPASS_MW_DMA */
	u64 span;			/* sub-window bytes */
	u64 usable;			/* FARPASS_MW_DMA's bytes the layout was made for */
	u64 align;			/* the sub-window's start alignment */
	struct fp_win_layout layout;	/* immutable once on the list */
	bool mapped;			/* caller's dma_lock: pinned pages are mapped (not staged) */
	u64 staged_at;			/* staged: when it was laid out (ktime ns) */
	u64 staged_ns;			/* caller's dma_lock: from staged_at until every page was pinned, 0 not yet */
	struct page **pages[FP_WIN_MAX_SLOTS];	/* per slot page; NULL = not pinned; caller's dma_lock */
	unsigned long *held[FP_WIN_MAX_SLOTS];	/* per slot page: held by its huge page's pins; as pages */
	struct mm_struct *mm;		/* the VFIO user's (mmgrab), charged for the held pages; NULL: none */
	atomic64_t pinned;		/* pages pinned now (DMA_LAYOUT reads it without dma_lock) */
	bool quarantined;		/* fp_dmawin_lock: no pages, the lender may still map the range */
	struct fp_dmawin_peer peers[FP_DMAWIN_MAX_PEERS];	/* immutable once on the list */
	u64 peer_off[FP_DMAWIN_MAX_PEERS];	/* each peer's slot in the sub-window, after the RAM */
	bool peer_mapped[FP_DMAWIN_MAX_PEERS];	/* fp_dmawin_lock; a lender peer's: listed */
	u32 nr_peers;
};

static DEFINE_MUTEX(fp_dmawin_lock);
static LIST_HEAD(fp_dmawins);

/* @w (its pages let go), or NULL. */
static void fp_dmawin_free(struct fp_dmawin *w)
{
	if (w && w->mm)
		mmdrop(w->mm);
	kfree(w);
}

/*
 * ramscan's probe: can one page be pinned for read and write? -EINVAL/-EPERM mean a hole, and so does
 * -EFAULT: type1 refuses a PFNMAP page that is normal memory, which is what QEMU's mapping of another
 * farpass device's BAR mmap shows while that device is not borrowed (its idle page).
 */
static int fp_dmawin_probe(void *ctx, u64 iova, u64 npages)
{
	struct vfio_device *vdev = ctx;
	struct page *page;
	int ret;

	ret = vfio_pin_pages(vdev, iova, 1, FP_DMAWIN_PROT, &page);
	if (ret == 1) {
		vfio_unpin_pages(vdev, iova, 1);
		return 1;
	}
	if (ret == -EINVAL || ret == -EPERM || ret == -EFAULT)
		return 0;
	return ret < 0 ? ret : -EIO;
}

static u64 fp_slot_pages(const struct fp_win_slot *s)
{
	return s->size >> PAGE_SHIFT;
}

/*
 * The next pinned pages of @w's slot @i at or after @from, [*rs, *re): a stretch of consecutive ones,
 * or only a run of physically contiguous ones if @run.
 */
static bool fp_pinned_next(const struct fp_dmawin *w, int i, u64 from, bool run, u64 *rs, u64 *re)
{
	struct page **p = w->pages[i];
	u64 n = fp_slot_pages(&w->layout.slots[i]);
	u64 k;

	while (from < n && !p[from])
		from++;
	if (from == n)
		return false;
	for (k = from + 1; k < n && p[k] && (!run || page_to_phys(p[k]) == page_to_phys(p[k - 1]) + PAGE_SIZE); k++)
		;
	*rs = from;
	*re = k;
	return true;
}

/* The next pages of @w's slot @i not pinned, at or after @from: [*a, *b). */
static bool fp_unpinned_next(const struct fp_dmawin *w, int i, u64 from, u64 *a, u64 *b)
{
	struct page **p = w->pages[i];
	u64 n = fp_slot_pages(&w->layout.slots[i]);
	u64 k;

	while (from < n && p[from])
		from++;
	if (from == n)
		return false;
	for (k = from + 1; k < n && !p[k]; k++)
		;
	*a = from;
	*b = k;
	return true;
}

static bool fp_run_next(const struct fp_dmawin *w, int i, u64 from, u64 *rs, u64 *re)
{
	return fp_pinned_next(w, i, from, true, rs, re);
}

static bool fp_stretch_next(const struct fp_dmawin *w, int i, u64 from, u64 *rs, u64 *re)
{
	return fp_pinned_next(w, i, from, false, rs, re);
}

static u64 fp_run_off(const struct fp_dmawin *w, int i, u64 page)
{
	return w->base + w->layout.slots[i].offset + (page << PAGE_SHIFT);
}

static int fp_run_map(struct fp_dmawin *w, int i, u64 rs, u64 re)
{
	return fp_xwin_map(w->link, FARPASS_MW_DMA, fp_run_off(w, i, rs), page_to_phys(w->pages[i][rs]),
			   (re - rs) << PAGE_SHIFT, FP_DMAWIN_PROT);
}

static void fp_run_unmap(struct fp_dmawin *w, int i, u64 rs, u64 re)
{
	fp_xwin_unmap(w->link, FARPASS_MW_DMA, fp_run_off(w, i, rs), (re - rs) << PAGE_SHIFT);
}

/* @n more pages (fewer if negative) in @w's window, pinned or held. */
static void fp_present(struct fp_dmawin *w, long long n)
{
	atomic64_add(n, &w->pinned);
	fp_count(FP_C_PINNED_PAGES, n);
}

/*
 * The held pages' charge to the VFIO user's locked_vm (@pages < 0: uncharged). Its RLIMIT_MEMLOCK was
 * checked for the whole layout when the window was made (fp_dmawin_memlock_check()); an exited user
 * has nothing left to charge.
 */
static void fp_huge_account(struct fp_dmawin *w, long pages)
{
	if (!pages || !w->mm || !mmget_not_zero(w->mm))
		return;
	mmap_write_lock(w->mm);
	__account_locked_vm(w->mm, abs(pages), pages > 0, current, true);
	mmap_write_unlock(w->mm);
	mmput(w->mm);
}

/*
 * Does page @k of slot @i lie in a block of held pages? Its first page in *@start if so. The second
 * page of a block is held exactly while the block is (its anchors, the first and last, are pinned).
 */
static bool fp_huge_block_of(const struct fp_dmawin *w, int i, u64 k, u64 *start)
{
	u64 g0 = w->layout.slots[i].gpa >> PAGE_SHIFT;
	u64 s = round_down(g0 + k, FP_HUGE_PAGES);

	if (s < g0 || s - g0 + FP_HUGE_PAGES > fp_slot_pages(&w->layout.slots[i]))
		return false;
	*start = s - g0;
	return test_bit(*start + 1, w->held[i]);
}

/* [*a, *b) of slot @i grown to whole blocks of held pages where it cuts one. */
static void fp_huge_widen(const struct fp_dmawin *w, int i, u64 *a, u64 *b)
{
	u64 start;

	if (*a < *b && fp_huge_block_of(w, i, *a, &start))
		*a = start;
	if (*a < *b && fp_huge_block_of(w, i, *b - 1, &start))
		*b = start + FP_HUGE_PAGES;
}

/*
 * Unpin the pinned pages of slot @i in [from, to), in batches of contiguous IOVAs; held pages are let
 * go with them. The range cuts no block of held pages (fp_huge_widen()).
 */
static void fp_unpin(struct fp_dmawin *w, int i, u64 from, u64 to)
{
	struct page **p = w->pages[i];
	unsigned long *held = w->held[i];
	u64 gpa = w->layout.slots[i].gpa;
	u64 k, n, nr_held = 0;
	bool is_held;

	for (k = from; k < to; k += n) {
		if (!p[k]) {
			n = 1;
			continue;
		}
		/* A run of held pages, or of pinned ones (at most one vfio_unpin_pages() batch). */
		is_held = test_bit(k, held);
		for (n = 1; k + n < to && p[k + n] && test_bit(k + n, held) == is_held &&
			    (is_held || n < VFIO_PIN_PAGES_MAX_ENTRIES); n++)
			;
		if (is_held) {
			bitmap_clear(held, k, n);
			nr_held += n;
		} else {
			vfio_unpin_pages(w->vdev, gpa + (k << PAGE_SHIFT), n);
		}
		memset(&p[k], 0, n * sizeof(*p));
		fp_present(w, -(long long)n);
	}
	fp_count(FP_C_PINNED_HUGE, -(long long)nr_held);
	fp_huge_account(w, -(long)nr_held);
}

/* vfio_pin_pages() of [from, to) of slot @i (at most VFIO_PIN_PAGES_MAX_ENTRIES): all or none. */
static int fp_pin_batch(struct fp_dmawin *w, int i, u64 from, u64 to)
{
	int ret = vfio_pin_pages(w->vdev, w->layout.slots[i].gpa + (from << PAGE_SHIFT), to - from,
				 FP_DMAWIN_PROT, &w->pages[i][from]);

	/* On failure vfio_pin_pages() unwound its own batch (and cleared its entries). */
	if (ret != to - from)
		return ret < 0 ? ret : -EFAULT;
	fp_present(w, to - from);
	return 0;
}

/*
 * With the first page of a whole block [k, k + FP_HUGE_PAGES) of slot @i pinned: if it is part of a
 * hugetlb page, pin the block's last page, and if both are the ends of 2 MiB of that page, hold the
 * pages between through them; returns how many were held (0: none, the block is pinned page by page).
 * A VFIO user that mapped something else between two such ends gives its device pages of the hugetlb
 * page it has mapped (hugetlb maps its pages whole), pinned by us.
 */
static long fp_huge_hold(struct fp_dmawin *w, int i, u64 k)
{
	struct page **p = &w->pages[i][k];
	const u64 last = FP_HUGE_PAGES - 1;
	struct folio *folio = page_folio(p[0]);
	u64 j;

	if (!w->mm || !folio_test_hugetlb(folio) || fp_pin_batch(w, i, k + last, k + last + 1))
		return 0;
	if (page_folio(p[last]) != folio || page_to_pfn(p[last]) - page_to_pfn(p[0]) != last)
		return 0;
	for (j = 1; j < last; j++)
		p[j] = nth_page(p[0], j);
	bitmap_set(w->held[i], k + 1, last - 1);
	fp_present(w, last - 1);
	fp_count(FP_C_PINNED_HUGE, last - 1);
	return last - 1;
}

/*
 * Pin the (unpinned) pages [from, to) of slot @i, a GPA-aligned 2 MiB block at a time: the whole
 * blocks backed by a hugetlb page through their two ends (fp_huge_hold()), the rest in batches. On
 * failure none of them stays pinned.
 */
static int fp_pin(struct fp_dmawin *w, int i, u64 from, u64 to)
{
	u64 g0 = w->layout.slots[i].gpa >> PAGE_SHIFT, k, end, rest;
	long held = 0, n;
	int ret = 0;

	for (k = from; k < to && !ret; k = end) {
		end = min(round_down(g0 + k, FP_HUGE_PAGES) + FP_HUGE_PAGES - g0, to);
		rest = end;
		if (end - k == FP_HUGE_PAGES) {
			ret = fp_pin_batch(w, i, k, k + 1);
			if (ret)
				break;
			n = fp_huge_hold(w, i, k);
			held += n;
			if (n)
				continue;
			if (w->pages[i][end - 1])	/* pinned to look: not a block of one huge page */
				rest = end - 1;
			k++;
		}
		ret = fp_pin_batch(w, i, k, rest);
	}
	fp_huge_account(w, held);
	if (ret)
		fp_unpin(w, i, from, to);
	return ret;
}

/*
 * The pins count against the VFIO user's RLIMIT_MEMLOCK as VFIO's own do (unless it has CAP_IPC_LOCK):
 * a layout beyond it is refused before its page arrays are allocated.
 */
static int fp_dmawin_memlock_check(const struct fp_dmawin *w)
{
	u64 pages = 0, locked;
	int i;

	if (!current->mm || capable(CAP_IPC_LOCK))
		return 0;
	for (i = 0; i < w->layout.nr; i++)
		pages += fp_slot_pages(&w->layout.slots[i]);
	if (check_add_overflow(pages, (u64)READ_ONCE(current->mm->locked_vm), &locked) ||
	    locked > rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT)
		return -ENOMEM;
	return 0;
}

/* The page arrays, in the VFIO user's context: charged to its memory cgroup, as the pins are to its memlock. */
static int fp_dmawin_alloc_pages(struct fp_dmawin *w)
{
	u64 n;
	int i;

	for (i = 0; i < w->layout.nr; i++) {
		n = fp_slot_pages(&w->layout.slots[i]);
		w->pages[i] = kvcalloc(n, sizeof(struct page *), GFP_KERNEL_ACCOUNT);
		w->held[i] = kvcalloc(BITS_TO_LONGS(n), sizeof(unsigned long), GFP_KERNEL_ACCOUNT);
		if (!w->pages[i] || !w->held[i])
			return -ENOMEM;
	}
	return 0;
}

/* Pin the pages of slot @i not pinned yet (a staged window's missing ones, or all of them). */
static int fp_pin_missing(struct fp_dmawin *w, int i)
{
	u64 a, b;
	int ret;

	for (a = 0; fp_unpinned_next(w, i, a, &a, &b); a = b) {
		ret = fp_pin(w, i, a, b);
		if (ret)
			return ret;
	}
	return 0;
}

static void fp_dmawin_unpin_all(struct fp_dmawin *w)
{
	int i;

	for (i = 0; i < w->layout.nr; i++) {
		if (w->pages[i] && w->held[i])
			fp_unpin(w, i, 0, fp_slot_pages(&w->layout.slots[i]));
		kvfree(w->pages[i]);
		kvfree(w->held[i]);
		w->pages[i] = NULL;
		w->held[i] = NULL;
	}
	w->mapped = false;
}

/* Map the stretch [rs, re) of slot @i: one IOMMU call and sync. @st counts the runs and the calls. */
static int fp_stretch_map(struct fp_dmawin *w, int i, u64 rs, u64 re, struct fp_borrow_stat *st)
{
	struct sg_table sgt;
	int ret;

	/* One entry per run (at most 4 GiB each), freed at once; charged as the page arrays are. */
	ret = sg_alloc_table_from_pages(&sgt, &w->pages[i][rs], re - rs, 0, (re - rs) << PAGE_SHIFT,
					GFP_KERNEL_ACCOUNT);
	if (ret)
		return ret;
	ret = fp_xwin_map_sg(w->link, FARPASS_MW_DMA, fp_run_off(w, i, rs), &sgt, (re - rs) << PAGE_SHIFT,
			     FP_DMAWIN_PROT);
	if (!ret) {
		st->runs += sgt.orig_nents;
		st->map_calls++;
	}
	sg_free_table(&sgt);
	return ret;
}

/*
 * Unmap the stretches before slot @to_i's page @to_page (every one: the slot count and 0), then
 * flush the IOTLB once.
 */
static void fp_dmawin_unmap_before(struct fp_dmawin *w, int to_i, u64 to_page)
{
	struct iommu_iotlb_gather gather;
	bool unmapped = false;
	u64 rs, re;
	int i;

	iommu_iotlb_gather_init(&gather);
	for (i = 0; i < w->layout.nr && i <= to_i; i++)
		for (re = 0; w->pages[i] && fp_stretch_next(w, i, re, &rs, &re) && (i < to_i || rs < to_page);) {
			fp_xwin_unmap_gather(w->link, FARPASS_MW_DMA, fp_run_off(w, i, rs), (re - rs) << PAGE_SHIFT,
					     &gather);
			unmapped = true;
		}
	if (unmapped)
		fp_xwin_unmap_sync(w->link, &gather);
}

/* Map every stretch; on failure unmap those mapped before it. @st counts the runs and the map calls. */
static int fp_dmawin_map_all(struct fp_dmawin *w, struct fp_borrow_stat *st)
{
	u64 rs, re;
	int i, ret;

	for (i = 0; i < w->layout.nr; i++) {
		for (re = 0; fp_stretch_next(w, i, re, &rs, &re);) {
			ret = fp_stretch_map(w, i, rs, re, st);
			if (ret) {
				fp_dmawin_unmap_before(w, i, rs);
				return ret;
			}
		}
	}
	return 0;
}

/* Unmap everything (the IOTLB flushed), then unpin: never a page unpinned that the NTB can reach. */
static void fp_dmawin_release_pages(struct fp_dmawin *w)
{
	if (w->mapped)
		fp_dmawin_unmap_before(w, w->layout.nr, 0);
	fp_dmawin_unpin_all(w);
}

/* First fit of @w->span bytes among the link's leases, aligned to @align below @usable. */
static int fp_dmawin_place(struct fp_dmawin *w, u64 align, u64 usable)
{
	struct list_head *before = &fp_dmawins;
	struct fp_dmawin *e;
	u64 pos = 0;

	lockdep_assert_held(&fp_dmawin_lock);
	list_for_each_entry(e, &fp_dmawins, node) {
		if (e->link != w->link)
			continue;
		if (e->base >= pos + w->span) {
			before = &e->node;
			break;
		}
		pos = round_up(e->base + e->span, align);
	}
	if (pos + w->span > usable)
		return -ENOSPC;
	w->base = pos;
	list_add_tail(&w->node, before);
	return 0;
}

/* Does [gpa, gpa + size) overlap a RAM slot of the layout or a peer placed before? */
static bool fp_peer_overlaps(const struct fp_dmawin *w, u64 gpa, u64 size)
{
	u32 i;

	for (i = 0; i < w->layout.nr; i++)
		if (gpa < w->layout.slots[i].gpa + w->layout.slots[i].size && w->layout.slots[i].gpa < gpa + size)
			return true;
	for (i = 0; i < w->nr_peers; i++)
		if (gpa < w->peers[i].gpa + w->peers[i].size && w->peers[i].gpa < gpa + size)
			return true;
	return false;
}

/*
 * Give each usable peer BAR a slot after the RAM, aligned to min(size, 2 MiB) as its guest address
 * is (the lender's mappings can use large pages); returns the window bytes used. A peer that is not
 * page-sized, overlaps, or does not fit in @usable is left out (its addresses fault as before).
 */
static u64 fp_dmawin_place_peers(struct fp_dmawin *w, const struct fp_dmawin_peer *peers, u32 nr, u64 usable)
{
	u64 end = w->layout.size, off, top;
	u32 i;

	for (i = 0; i < nr && w->nr_peers < FP_DMAWIN_MAX_PEERS; i++) {
		const struct fp_dmawin_peer *p = &peers[i];

		if (!is_power_of_2(p->size) || p->size < PAGE_SIZE || !IS_ALIGNED(p->gpa, p->size) ||
		    !PAGE_ALIGNED(p->phys) || fp_peer_overlaps(w, p->gpa, p->size))
			continue;
		if (p->on_lender) {
			w->peers[w->nr_peers++] = *p;
			continue;
		}
		off = round_up(end, min_t(u64, p->size, FP_DMAWIN_RANGE_ALIGN));
		if (check_add_overflow(off, p->size, &top) || top > usable)
			continue;
		w->peers[w->nr_peers] = *p;
		w->peer_off[w->nr_peers++] = off;
		end = top;
	}
	return end;
}

/*
 * Probe the VFIO user's RAM and lay it out for @w's link: 0 (no layout slot when it has no RAM mapped),
 * or -errno. Sets the window size the layout was made for and the sub-window's alignment.
 */
static int fp_dmawin_lay_out(struct fp_dmawin *w)
{
	struct fp_ramscan scan = {
		.probe = fp_dmawin_probe,
		.ctx = w->vdev,
		.limit = FP_DMAWIN_SCAN_LIMIT,
	};
	struct fp_win_params params = { .range_align = FP_DMAWIN_RANGE_ALIGN };
	resource_size_t addr_align = 0, size_align = 0;
	int ret;

	ret = fp_ramscan(&scan);
	if (ret || !scan.nr_ranges)
		return ret;	/* no RAM mapped (a VFIO user that only looks at config space): an empty window */
	w->usable = fp_xwin_usable(w->link, FARPASS_MW_DMA);
	if (!w->usable)
		return -EOPNOTSUPP;
	ret = ntb_mw_get_align(w->link->ntb, NTB_DEF_PEER_IDX, FARPASS_MW_DMA, &addr_align, &size_align,
			       NULL);
	if (ret)
		return ret;
	params.xlat_align = roundup_pow_of_two(max3((u64)addr_align, (u64)size_align, (u64)PAGE_SIZE));
	params.size = w->usable;
	/* The sub-window's own start keeps both alignments, so offsets in it keep theirs. */
	w->align = max_t(u64, params.xlat_align, FP_DMAWIN_RANGE_ALIGN);
	return fp_win_build(scan.ranges, scan.nr_ranges, &params, &w->layout);
}

static int fp_dmawin_build(struct fp_dmawin *w, const struct fp_dmawin_peer *peers, u32 nr_peers)
{
	int ret;

	ret = fp_dmawin_lay_out(w);
	if (ret)
		return ret;
	if (!w->layout.nr) {
		mutex_lock(&fp_dmawin_lock);
		list_add(&w->node, &fp_dmawins);
		mutex_unlock(&fp_dmawin_lock);
		return 0;
	}
	w->span = round_up(fp_dmawin_place_peers(w, peers, nr_peers, w->usable), w->align);
	mutex_lock(&fp_dmawin_lock);
	ret = fp_dmawin_place(w, w->align, w->usable);
	mutex_unlock(&fp_dmawin_lock);
	return ret;
}

/*
 * @staged's pages for @w if it was laid out the same (RAM and window unchanged since it was staged);
 * @staged goes either way.
 */
static bool fp_dmawin_adopt(struct fp_dmawin *w, struct fp_dmawin *staged)
{
	bool same = staged->usable == w->usable && staged->align == w->align &&
		    staged->layout.nr == w->layout.nr && staged->layout.size == w->layout.size;
	int i;

	for (i = 0; same && i < w->layout.nr; i++)
		same = !memcmp(&staged->layout.slots[i], &w->layout.slots[i], sizeof(w->layout.slots[i]));

	if (!same) {
		fp_dmawin_discard(staged);
		return false;
	}
	for (i = 0; i < w->layout.nr; i++) {
		swap(w->pages[i], staged->pages[i]);
		swap(w->held[i], staged->held[i]);
	}
	swap(w->mm, staged->mm);	/* the held pages' charge goes with them */
	atomic64_set(&w->pinned, atomic64_read(&staged->pinned));
	w->staged_ns = staged->staged_ns ?: ktime_get_ns() - staged->staged_at;
	fp_dmawin_free(staged);
	return true;
}

/* In the VFIO user's context: its mm is charged for the pages held through huge pages. */
static struct fp_dmawin *fp_dmawin_alloc(struct fp_link *link, struct vfio_device *vdev, u32 device_id)
{
	struct fp_dmawin *w = kzalloc(sizeof(*w), GFP_KERNEL);

	if (!w)
		return NULL;
	w->mm = current->mm;
	if (w->mm)
		mmgrab(w->mm);
	w->link = link;
	w->vdev = vdev;
	w->device_id = device_id;
	INIT_LIST_HEAD(&w->node);
	return w;
}

int fp_dmawin_stage(struct fp_link *link, struct vfio_device *vdev, u32 device_id, struct fp_dmawin **out)
{
	struct fp_dmawin *w;
	int ret;

	w = fp_dmawin_alloc(link, vdev, device_id);
	if (!w)
		return -ENOMEM;
	w->staged_at = ktime_get_ns();
	ret = fp_dmawin_lay_out(w);
	if (!ret && !w->layout.nr)
		ret = -ENODATA;
	if (!ret)
		ret = fp_dmawin_memlock_check(w);
	if (!ret)
		ret = fp_dmawin_alloc_pages(w);
	if (ret) {
		fp_dmawin_discard(w);
		return ret;
	}
	*out = w;
	return 0;
}

void fp_dmawin_discard(struct fp_dmawin *w)
{
	fp_dmawin_unpin_all(w);
	fp_dmawin_free(w);
}

int fp_dmawin_create(struct fp_link *link, struct vfio_device *vdev, u32 device_id,
		     const struct fp_dmawin_peer *peers, u32 nr_peers, struct fp_dmawin **staged,
		     struct fp_dmawin **out, struct fp_borrow_stat *st)
{
	struct fp_dmawin *w;
	u64 t0 = ktime_get_ns(), t1, t2;
	bool adopted;
	int i, ret;

	w = fp_dmawin_alloc(link, vdev, device_id);
	if (!w) {
		ret = -ENOMEM;
		goto out_staged;
	}
	ret = fp_dmawin_build(w, peers, nr_peers);
	if (ret)
		goto out_free;
	t1 = ktime_get_ns();

	adopted = *staged && fp_dmawin_adopt(w, *staged);
	*staged = NULL;		/* taken or discarded */
	if (adopted) {
		st->staged_pages = atomic64_read(&w->pinned);
		st->stage_ns = w->staged_ns;
	} else {
		ret = fp_dmawin_memlock_check(w);
		if (!ret)
			ret = fp_dmawin_alloc_pages(w);
		if (ret)
			goto out_unpin;
	}
	for (i = 0; i < w->layout.nr; i++) {
		ret = fp_pin_missing(w, i);
		if (ret)
			goto out_unpin;
	}
	t2 = ktime_get_ns();
	ret = fp_dmawin_map_all(w, st);
	if (ret)
		goto out_unpin;
	w->mapped = true;
	fp_count(FP_C_DMA_WINDOWS, 1);
	st->scan_ns = t1 - t0;
	st->pin_ns = t2 - t1;
	st->map_ns = ktime_get_ns() - t2;
	st->pages = atomic64_read(&w->pinned);
	*out = w;
	return 0;

out_unpin:
	fp_dmawin_unpin_all(w);
	mutex_lock(&fp_dmawin_lock);
	list_del(&w->node);
	mutex_unlock(&fp_dmawin_lock);
out_free:
	fp_dmawin_free(w);
out_staged:
	if (*staged)
		fp_dmawin_discard(*staged);
	*staged = NULL;
	return ret;
}

/* Free the quarantined windows of @link (of its device @device_id only, unless @all). */
static void fp_dmawin_lift(struct fp_link *link, bool all, u32 device_id)
{
	struct fp_dmawin *w, *tmp;

	lockdep_assert_held(&fp_dmawin_lock);
	list_for_each_entry_safe(w, tmp, &fp_dmawins, node) {
		if (w->link != link || !w->quarantined || (!all && w->device_id != device_id))
			continue;
		list_del(&w->node);
		fp_count(FP_C_DMA_QUARANTINED, -1);
		fp_dmawin_free(w);
	}
}

/* Unmap (flushed) peer slot @i of @w if it is mapped; a lender peer is no longer listed. */
static void fp_peer_unmap(struct fp_dmawin *w, u32 i)
{
	lockdep_assert_held(&fp_dmawin_lock);
	if (!w->peer_mapped[i])
		return;
	w->peer_mapped[i] = false;
	if (w->peers[i].on_lender) {
		fp_count(FP_C_DMA_LENDER_PEERS, -1);
		return;
	}
	fp_xwin_unmap(w->link, FARPASS_MW_DMA, w->base + w->peer_off[i], w->peers[i].size);
	fp_count(FP_C_DMA_PEERS, -1);
}

void fp_dmawin_map_peers(struct fp_dmawin *w, bool (*open)(u64 owner))
{
	u32 i;
	int ret;

	mutex_lock(&fp_dmawin_lock);
	for (i = 0; i < w->nr_peers; i++) {
		if (w->peer_mapped[i] || !open(w->peers[i].owner))
			continue;
		if (w->peers[i].on_lender) {
			w->peer_mapped[i] = true;
			fp_count(FP_C_DMA_LENDER_PEERS, 1);
			continue;
		}
		ret = fp_xwin_map(w->link, FARPASS_MW_DMA, w->base + w->peer_off[i], w->peers[i].phys,
				  w->peers[i].size, FP_DMAWIN_PROT | IOMMU_MMIO);
		if (ret) {
			pr_warn_ratelimited(FP_NAME ": device %u: peer BAR at guest %#llx: %pe\n", w->device_id,
					    w->peers[i].gpa, ERR_PTR(ret));
			continue;
		}
		w->peer_mapped[i] = true;
		fp_count(FP_C_DMA_PEERS, 1);
	}
	mutex_unlock(&fp_dmawin_lock);
}

void fp_dmawin_unmap_peers_of(u64 owner)
{
	struct fp_dmawin *w;
	u32 i;

	mutex_lock(&fp_dmawin_lock);
	list_for_each_entry(w, &fp_dmawins, node)
		for (i = 0; i < w->nr_peers; i++)
			if (w->peers[i].owner == owner)
				fp_peer_unmap(w, i);
	mutex_unlock(&fp_dmawin_lock);
}

void fp_dmawin_destroy(struct fp_dmawin *w, bool returned)
{
	u32 i;

	/*
	 * Unmapped (IOTLB flushed) and unpinned while the range is still listed: a concurrent borrow
	 * cannot be placed on pages the NTB still reaches.
	 */
	mutex_lock(&fp_dmawin_lock);
	for (i = 0; i < w->nr_peers; i++)
		fp_peer_unmap(w, i);
	mutex_unlock(&fp_dmawin_lock);
	fp_dmawin_release_pages(w);
	fp_count(FP_C_DMA_WINDOWS, -1);
	mutex_lock(&fp_dmawin_lock);
	if (returned) {
		/* The lender ended this device's lease: none of its earlier ranges is mapped there either. */
		fp_dmawin_lift(w->link, false, w->device_id);
	} else if (w->span) {
		w->quarantined = true;
		fp_count(FP_C_DMA_QUARANTINED, 1);
		w = NULL;
	}
	if (w)
		list_del(&w->node);
	mutex_unlock(&fp_dmawin_lock);
	fp_dmawin_free(w);
}

/*
 * The peer's end is new (probed again) or ours goes away: no lease of the old one outlives it, so the
 * link's quarantined ranges are free. Not at link down: the same peer end may come back with its
 * mappings (a short outage), and a range must not be reused while a device may still reach it.
 */
static void fp_dmawin_peer_gone(struct fp_link *link)
{
	mutex_lock(&fp_dmawin_lock);
	fp_dmawin_lift(link, true, 0);
	mutex_unlock(&fp_dmawin_lock);
}

/* At remove no instance is left to hold a window (types.c detached before): only quarantines remain. */
const struct fp_link_role_ops fp_dmawin_role = {
	.peer_new = fp_dmawin_peer_gone,
	.detach = fp_dmawin_peer_gone,
};

/* Map pages [from, to) of slot @i again after a cut; if that fails, they go (unreachable anyway). */
static void fp_run_remap(struct fp_dmawin *w, int i, u64 from, u64 to)
{
	int ret;

	if (from >= to)
		return;
	ret = fp_run_map(w, i, from, to);
	if (!ret)
		return;
	fp_unpin(w, i, from, to);
	pr_err_ratelimited(FP_NAME ": device %u: mapping guest pages again: %pe\n", w->device_id, ERR_PTR(ret));
}

u64 fp_dmawin_dma_unmap(struct fp_dmawin *w, u64 iova, u64 length)
{
	u64 a, b, rs, re, next, before = atomic64_read(&w->pinned);
	int i;

	for (i = 0; i < w->layout.nr; i++) {
		const struct fp_win_slot *s = &w->layout.slots[i];

		if (iova >= s->gpa + s->size || iova + length <= s->gpa)
			continue;
		a = (max(iova, s->gpa) - s->gpa) >> PAGE_SHIFT;
		b = DIV_ROUND_UP(min(iova + length, s->gpa + s->size) - s->gpa, PAGE_SIZE);
		/* A block of held pages goes whole: the refill pins back what is still mapped. */
		fp_huge_widen(w, i, &a, &b);
		if (!w->mapped) {	/* staged: nothing reaches its pages; it is whole again after a refill */
			fp_unpin(w, i, a, b);
			w->staged_ns = 0;
			continue;
		}
		for (next = 0; fp_run_next(w, i, next, &rs, &re); next = re) {
			if (re <= a)
				continue;
			if (rs >= b)
				break;
			/* The whole run goes (a large IOMMU page cannot be cut), the pages outside come back. */
			fp_run_unmap(w, i, rs, re);
			fp_unpin(w, i, max(rs, a), min(re, b));
			fp_run_remap(w, i, rs, min(re, a));
			fp_run_remap(w, i, max(rs, b), re);
		}
	}
	return before - atomic64_read(&w->pinned);
}

/*
 * Pages [from, to) of slot @i, unpinned, are mapped by the VFIO user: pin them, and map each run unless
 * the window is staged.
 */
static int fp_refill_run(struct fp_dmawin *w, int i, u64 from, u64 to)
{
	struct page **p = w->pages[i];
	u64 k, e;
	int ret;

	ret = fp_pin(w, i, from, to);
	if (ret == -EINVAL || ret == -EPERM)
		return 0;	/* unmapped again since the probe: the next refill looks again */
	if (ret)
		return ret;
	if (!w->mapped) {
		fp_count(FP_C_DMA_STAGED, to - from);
		return 0;
	}
	fp_count(FP_C_DMA_REFILLED, to - from);
	for (k = from; k < to; k = e) {
		for (e = k + 1; e < to && page_to_phys(p[e]) == page_to_phys(p[e - 1]) + PAGE_SIZE; e++)
			;
		fp_run_remap(w, i, k, e);
	}
	return 0;
}

long fp_dmawin_refill(struct fp_dmawin *w, u64 budget, bool *more)
{
	struct fp_ramscan scan = { .probe = fp_dmawin_probe, .ctx = w->vdev };
	u64 a, b, gpa, rs, re, from, total = 0;
	int i, ret;

	*more = false;
	for (i = 0; i < w->layout.nr; i++)
		total += fp_slot_pages(&w->layout.slots[i]);
	for (i = 0; i < w->layout.nr && !*more; i++) {
		gpa = w->layout.slots[i].gpa;
		for (a = 0; !*more && fp_unpinned_next(w, i, a, &a, &b); a = b) {
			/* [a, b): not pinned. What of it is mapped again? */
			for (from = gpa + (a << PAGE_SHIFT);
			     (ret = fp_ramscan_next(&scan, from, gpa + (b << PAGE_SHIFT), &rs, &re)) > 0; from = re) {
				if ((re - rs) >> PAGE_SHIFT >= budget) {
					re = rs + (budget << PAGE_SHIFT);	/* the rest at the next call */
					*more = true;
				}
				ret = fp_refill_run(w, i, (rs - gpa) >> PAGE_SHIFT, (re - gpa) >> PAGE_SHIFT);
				if (ret)
					return ret;
				budget -= (re - rs) >> PAGE_SHIFT;
				if (*more)
					break;
			}
			if (ret < 0)
				return ret;
		}
	}
	if (!w->mapped && !w->staged_ns && total == atomic64_read(&w->pinned))
		w->staged_ns = ktime_get_ns() - w->staged_at;
	return total - atomic64_read(&w->pinned);
}

/* Insert @slot into @l, keeping slots[] ascending in gpa (at most FARPASS_DMA_SLOTS: see below). */
static void fp_layout_add(struct farpass_dma_layout *l, struct farpass_dma_slot slot)
{
	u32 i = l->nr_slots++;

	for (; i && l->slots[i - 1].gpa > slot.gpa; i--)
		l->slots[i] = l->slots[i - 1];
	l->slots[i] = slot;
}

/* @w's peer @i as a DMA_LAYOUT slot: a window slot, or a lender peer's BAR. */
static struct farpass_dma_slot fp_peer_slot(const struct fp_dmawin *w, u32 i)
{
	const struct fp_dmawin_peer *p = &w->peers[i];

	if (!p->on_lender)
		return (struct farpass_dma_slot){ .gpa = p->gpa, .size = p->size, .offset = w->base + w->peer_off[i] };
	return (struct farpass_dma_slot){ .gpa = p->gpa, .size = p->size, .flags = FARPASS_DMA_SLOT_F_LENDER_PEER,
					  .peer_id = p->device_id, .peer_bar = p->bar };
}

int fp_dmawin_layout(struct farpass_dma_layout *l)
{
	struct fp_rdev *rdev;
	struct fp_dmawin *w;
	bool known = false;
	int i, ret = -ENODATA;

	BUILD_BUG_ON(FARPASS_DMA_SLOTS < FP_WIN_MAX_SLOTS + FP_DMAWIN_MAX_PEERS);
	mutex_lock(&fp_dmawin_lock);
	list_for_each_entry(w, &fp_dmawins, node) {
		if (w->device_id != l->device_id || w->quarantined)
			continue;
		l->nr_slots = 0;
		for (i = 0; i < w->layout.nr; i++)
			fp_layout_add(l, (struct farpass_dma_slot){ .gpa = w->layout.slots[i].gpa,
								    .size = w->layout.slots[i].size,
								    .offset = w->base + w->layout.slots[i].offset });
		for (i = 0; i < w->nr_peers; i++)
			if (!w->peers[i].on_lender || w->peer_mapped[i])
				fp_layout_add(l, fp_peer_slot(w, i));
		l->pages_pinned = atomic64_read(&w->pinned);
		ret = 0;
		break;
	}
	mutex_unlock(&fp_dmawin_lock);
	if (!ret)
		return 0;

	/*
	 * Only the error needs the device list: the agent's common call (serving BORROW) never waits
	 * for fp_lock, which a link's removal holds while its VFIO users let go.
	 */
	mutex_lock(&fp_lock);
	list_for_each_entry(rdev, &fp_devices, node)
		known |= rdev->desc.device_id == l->device_id;
	mutex_unlock(&fp_lock);
	return known ? -ENODATA : -ENOENT;
}
