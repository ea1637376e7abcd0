// SPDX-License-Identifier: GPL-2.0-only
/*
 * bar.c - an instance's BAR regions: region info (sparse mmap areas), mmap of the lender's BAR slot
 * through our outbound window FARPASS_MW_BAR, and the trapped accesses (the MSI-X table/PBA pages, or
 * anything the VFIO user did not mmap) through an ioremap of the same window.
 *
 * The mmaps follow the lease: a page is mapped at its first access (fault), to the slot while the
 * device is borrowed and to the instance's idle page otherwise; the lease's start and end revoke
 * every page (unmap_mapping_range), so a mapping made under one lease never outlives it. Trapped
 * accesses while not borrowed are answered here too (all-ones, writes dropped): no access crosses
 * the link unless this instance holds the lease.
 */
#include <linux/fs.h>
#include <linux/io.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/overflow.h>
#include <linux/pseudo_fs.h>
#include <linux/pci.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vfio.h>

#include "compat.h"
#include "counters.h"
#include "instance.h"
#include "link.h"
#include "xwin.h"

/* Bytes of one trapped access call: a page, as QEMU's own accesses are at most 8. */
#define FP_BAR_RW_MAX	PAGE_SIZE

/* A memory BAR the lender placed in the link's BAR window (not the upper half of a 64-bit one). */
const struct farpass_bar *fp_bar_mapped(struct fp_mdev *fm, u32 index)
{
	const struct farpass_bar *bars = fm->rdev->desc.bars;

	if (index > VFIO_PCI_BAR5_REGION_INDEX || (index && bars[index - 1].flags & FARPASS_BAR_MEM64))
		return NULL;
	if (!bars[index].size || !(bars[index].flags & FARPASS_BAR_MAPPED))
		return NULL;
	return &bars[index];
}

struct fp_span {
	u64 start, end;
};

/*
 * The bytes of BAR @index that are the MSI-X table and the PBA, from the virtual MSI-X capability
 * (QEMU emulates them for the guest; the device's own are the lender's vfio-pci's): how many spans,
 * clipped to the BAR, or -EIO if the capability scan failed before finding MSI-X (where they are is
 * then unknown, so no part of the BAR is mmapped or written).
 */
static int fp_bar_msix(struct fp_mdev *fm, u32 index, u64 bar_size, struct fp_span sp[2])
{
	const struct fp_vcfg *c = &fm->vcfg;
	__le32 reg[2];
	__le16 ctrl;
	u32 entries, i, n = 0;
	u64 start, len;

	fp_cfg_ready(fm);
	if (!c->msix)		/* fixed by the scan */
		return fm->scan_err ? -EIO : 0;
	spin_lock(&fm->state_lock);
	fp_vcfg_read(c, c->msix + PCI_MSIX_FLAGS, 2, (u8 *)&ctrl);
	fp_vcfg_read(c, c->msix + PCI_MSIX_TABLE, 8, (u8 *)reg);
	spin_unlock(&fm->state_lock);
	entries = (le16_to_cpu(ctrl) & PCI_MSIX_FLAGS_QSIZE) + 1;
	for (i = 0; i < 2; i++) {
		u32 v = le32_to_cpu(reg[i]);

		start = v & PCI_MSIX_TABLE_OFFSET;
		if ((v & PCI_MSIX_TABLE_BIR) != index || start >= bar_size)
			continue;	/* elsewhere, or outside the BAR (QEMU traps nothing there) */
		len = i ? DIV_ROUND_UP(entries, 64) * 8 : entries * PCI_MSIX_ENTRY_SIZE;
		sp[n].start = start;
		sp[n].end = min(start + len, bar_size);
		n++;
	}
	return n;
}

/*
 * The pages of BAR @index that are trapped, not mmapped: those of the MSI-X table and PBA.
 * Ascending, merged; returns how many, or fp_bar_msix()'s error.
 */
static int fp_bar_traps(struct fp_mdev *fm, u32 index, u64 bar_size, struct fp_span sp[2])
{
	int i, n = fp_bar_msix(fm, index, bar_size, sp);

	for (i = 0; i < n; i++) {
		sp[i].start = round_down(sp[i].start, PAGE_SIZE);
		sp[i].end = min(round_up(sp[i].end, PAGE_SIZE), bar_size);
	}
	if (n == 2 && sp[1].start < sp[0].start)
		swap(sp[0], sp[1]);
	if (n == 2 && sp[1].start <= sp[0].end) {
		sp[0].end = max(sp[0].end, sp[1].end);
		n = 1;
	}
	return n;
}

static bool fp_spans_hit(const struct fp_span *sp, int n, u64 start, u64 end)
{
	int i;

	for (i = 0; i < n; i++)
		if (start < sp[i].end && sp[i].start < end)
			return true;
	return false;
}

/* Region info capability: the mmappable areas of a BAR, i.e. all but the trapped pages. */
int fp_bar_sparse_cap(struct fp_mdev *fm, u32 index, u64 size, struct vfio_info_cap *caps)
{
	struct vfio_region_info_cap_sparse_mmap *sparse;
	struct fp_span sp[2];
	u64 pos = 0;
	int n, i, nr = 0, ret;
	size_t len;

	n = fp_bar_traps(fm, index, size, sp);
	if (n <= 0)
		return 0;	/* no sparse cap: all mmappable, or (n < 0) nothing, refused at mmap */
	len = struct_size(sparse, areas, n + 1);
	sparse = kzalloc(len, GFP_KERNEL);
	if (!sparse)
		return -ENOMEM;
	sparse->header.id = VFIO_REGION_INFO_CAP_SPARSE_MMAP;
	sparse->header.version = 1;
	for (i = 0; i <= n; i++) {
		u64 end = i < n ? sp[i].start : size;

		if (end > pos) {
			sparse->areas[nr].offset = pos;
			sparse->areas[nr].size = end - pos;
			nr++;
		}
		if (i < n)
			pos = sp[i].end;
	}
	sparse->nr_areas = nr;
	ret = vfio_info_add_capability(caps, &sparse->header, struct_size(sparse, areas, nr));
	kfree(sparse);
	return ret;
}

/*
 * Slot [win_offset, *end) of an announced BAR: inside the first @usable bytes of the link's BAR window
 * (the rest is the interrupt mailbox's ack page). The offset comes from the peer: checked arithmetic.
 */
static bool fp_bar_slot_fits(const struct farpass_bar *b, u64 usable, u64 *end)
{
	return !check_add_overflow(b->win_offset, b->size, end) && *end <= usable;
}

static bool fp_bar_slots_overlap(const struct farpass_bar *a, const struct farpass_bar *b)
{
	return a->flags & FARPASS_BAR_MAPPED && b->flags & FARPASS_BAR_MAPPED &&
	       a->win_offset < b->win_offset + b->size && b->win_offset < a->win_offset + a->size;
}

/*
 * ANNOUNCE: every mapped BAR of @desc lies in @link's BAR window, clear of the ack page, of its other
 * BARs and of every BAR of the link's other devices (so no mmap reaches another device or the
 * mailbox). Slots already accepted passed this check, so the overlap sums cannot wrap.
 */
int fp_bar_slots_check(struct fp_link *link, const struct farpass_announce *desc)
{
	u64 usable = fp_xwin_usable(link, FARPASS_MW_BAR);
	const struct fp_rdev *rdev;
	int i, j;
	u64 end;

	lockdep_assert_held(&fp_lock);
	for (i = 0; i < FARPASS_NUM_BARS; i++) {
		const struct farpass_bar *b = &desc->bars[i];

		if (!(b->flags & FARPASS_BAR_MAPPED))
			continue;
		if (!usable)
			return -EOPNOTSUPP;
		if (!fp_bar_slot_fits(b, usable, &end))
			return -ERANGE;
		for (j = 0; j < i; j++)
			if (fp_bar_slots_overlap(b, &desc->bars[j]))
				return -EADDRINUSE;
		list_for_each_entry(rdev, &fp_devices, node)
			for (j = 0; rdev->link == link && j < FARPASS_NUM_BARS; j++)
				if (fp_bar_slots_overlap(b, &rdev->desc.bars[j]))
					return -EADDRINUSE;
	}
	return 0;
}

/*
 * Checked again against the window itself (our outbound window's size, as the peer's inbound one:
 * xwin.h), never trusting the sum.
 */
int fp_bar_slot_phys(struct fp_link *link, const struct farpass_bar *b, phys_addr_t *phys)
{
	phys_addr_t base;
	u64 size, end;
	int ret;

	ret = fp_xwin_peer(link, FARPASS_MW_BAR, &base, &size);
	if (ret)
		return ret;
	size &= PAGE_MASK;
	if (size <= FP_XWIN_BAR_TAIL || !fp_bar_slot_fits(b, size - FP_XWIN_BAR_TAIL, &end))
		return -ERANGE;
	*phys = base + b->win_offset;
	return 0;
}

/* The outbound window's view of BAR @index, for trapped accesses: ioremapped once per open (bar_lock). */
static void __iomem *fp_bar_io(struct fp_mdev *fm, u32 index, const struct farpass_bar *b)
{
	phys_addr_t phys;
	int ret;

	lockdep_assert_held(&fm->bar_lock);
	if (!fm->bar_io[index]) {
		ret = fp_bar_slot_phys(fm->rdev->link, b, &phys);
		if (!ret)
			fm->bar_io[index] = ioremap(phys, b->size);
		if (ret)
			dev_warn_ratelimited(fm->vdev.dev, "farpass: BAR%u of device %u: %pe\n", index,
					     fm->rdev->desc.device_id, ERR_PTR(ret));
	}
	return fm->bar_io[index];
}

/* One naturally aligned MMIO access of 1, 2, 4 or 8 bytes, little-endian as the VFIO region. */
static void fp_mmio(void __iomem *p, u64 *val, u32 size, bool write)
{
	switch (size) {
	case 8:
		if (write)
			writeq(*val, p);
		else
			*val = readq(p);
		break;
	case 4:
		if (write)
			writel(*val, p);
		else
			*val = readl(p);
		break;
	case 2:
		if (write)
			writew(*val, p);
		else
			*val = readw(p);
		break;
	default:
		if (write)
			writeb(*val, p);
		else
			*val = readb(p);
	}
}

/*
 * One piece of a trapped access, under bar_lock (never held across a user copy: the user's buffer may
 * be this BAR's own mmap, whose fault takes it). While not borrowed nothing crosses the link: reads
 * are all-ones and writes dropped, as an unreachable device answers.
 */
static int fp_bar_piece(struct fp_mdev *fm, u32 index, const struct farpass_bar *b, u64 off, u64 *val,
			u32 size, bool write)
{
	void __iomem *io;
	int ret = 0;

	mutex_lock(&fm->bar_lock);
	if (!fm->bar_leased) {
		*val = ~0ULL;
		goto out_unlock;
	}
	io = fp_bar_io(fm, index, b);
	if (!io) {
		ret = -EIO;
		goto out_unlock;
	}
	fp_mmio(io + off, val, size, write);
out_unlock:
	mutex_unlock(&fm->bar_lock);
	return ret;
}

/*
 * A trapped access to a BAR region (QEMU's to the MSI-X table/PBA pages, or anything it did not
 * mmap): split into the largest naturally aligned pieces, each one MMIO access through the window.
 * Writes to the MSI-X table and PBA themselves are dropped: QEMU emulates them, and the device's
 * vectors are the lender's to program. At most FP_BAR_RW_MAX bytes per call (a short count, as
 * read(2) allows): each piece may wait for a completion across the link.
 */
ssize_t fp_bar_rw(struct fp_mdev *fm, u32 index, char __user *ubuf, size_t count, u64 off,
		  bool write)
{
	const struct farpass_bar *b = fp_bar_mapped(fm, index);
	struct fp_span msix[2], pages[2];
	int nmsix, npages, ret;
	size_t done, size;
	u64 val;

	if (!b || off >= b->size)
		return -EINVAL;
	nmsix = fp_bar_msix(fm, index, b->size, msix);
	npages = fp_bar_traps(fm, index, b->size, pages);
	if (nmsix < 0 || npages < 0)
		return -EIO;
	count = min_t(u64, min_t(u64, count, b->size - off), FP_BAR_RW_MAX);
	fp_count(fp_spans_hit(pages, npages, off, off + count) ? FP_C_BAR_TRAPPED_MSIX : FP_C_BAR_TRAPPED, 1);
	for (done = 0; done < count; done += size) {
		for (size = 8; size > 1 && ((off + done) % size || count - done < size); size /= 2)
			;
		if (fatal_signal_pending(current))
			return done ? done : -EINTR;
		cond_resched();
		if (write && fp_spans_hit(msix, nmsix, off + done, off + done + size))
			continue;
		val = 0;
		if (write && copy_from_user(&val, ubuf + done, size))
			return done ? done : -EFAULT;
		ret = fp_bar_piece(fm, index, b, off + done, &val, size, write);
		if (ret)
			return done ? done : ret;
		if (!write && copy_to_user(ubuf + done, &val, size))
			return done ? done : -EFAULT;
	}
	return count;
}

/*
 * Linux 6.1's VFIO device files all share one anonymous inode, so unmap_mapping_range() on their
 * mapping would zap every VFIO device's mmaps. Each open instance gets an inode of its own on this
 * pseudo filesystem (as later kernels give each vfio_device), and its device files' mmaps are put in
 * that inode's address space.
 */
#define FP_FS_MAGIC	0x66707373	/* "fpss" */

static int fp_fs_init_fs_context(struct fs_context *fc)
{
	return init_pseudo(fc, FP_FS_MAGIC) ? 0 : -ENOMEM;
}

static struct file_system_type fp_fs_type = {
	.name = "farpass",
	.owner = THIS_MODULE,
	.init_fs_context = fp_fs_init_fs_context,
	.kill_sb = kill_anon_super,
};

static struct vfsmount *fp_fs_mnt;
static int fp_fs_count;

int fp_bar_open(struct fp_mdev *fm)
{
	struct inode *inode;
	int ret;

	ret = simple_pin_fs(&fp_fs_type, &fp_fs_mnt, &fp_fs_count);
	if (ret)
		return ret;
	inode = alloc_anon_inode(fp_fs_mnt->mnt_sb);
	if (IS_ERR(inode)) {
		ret = PTR_ERR(inode);
		goto err_release_fs;
	}
	fm->bar_idle = alloc_page(GFP_KERNEL_ACCOUNT);
	if (!fm->bar_idle) {
		ret = -ENOMEM;
		goto err_put_inode;
	}
	/* An unreachable device's registers read all-ones. */
	memset(page_address(fm->bar_idle), 0xff, PAGE_SIZE);
	fm->bar_inode = inode;
	fm->bar_leased = false;
	return 0;

err_put_inode:
	iput(inode);
err_release_fs:
	simple_release_fs(&fp_fs_mnt, &fp_fs_count);
	return ret;
}

/* Close: no mmap is left (each holds the device file), the trapped accesses' ioremaps go. */
void fp_bar_close(struct fp_mdev *fm)
{
	int i;

	mutex_lock(&fm->bar_lock);
	for (i = 0; i < FARPASS_NUM_BARS; i++) {
		if (fm->bar_io[i])
			iounmap(fm->bar_io[i]);
		fm->bar_io[i] = NULL;
	}
	mutex_unlock(&fm->bar_lock);
	__free_page(fm->bar_idle);
	fm->bar_idle = NULL;
	iput(fm->bar_inode);
	fm->bar_inode = NULL;
	simple_release_fs(&fp_fs_mnt, &fp_fs_count);
}

/*
 * The lease starts or ends (under bm_lock): every mmapped BAR page is unmapped, so the next access
 * faults and finds the new state. At RETURN this comes before the RETURN upcall: the lender takes
 * the slot back only once no mapping of this lease can reach it.
 */
void fp_bar_lease(struct fp_mdev *fm, bool leased)
{
	lockdep_assert_held(&fm->bm_lock);
	mutex_lock(&fm->bar_lock);
	fm->bar_leased = leased;
	mutex_unlock(&fm->bar_lock);
	unmap_mapping_range(fm->bar_inode->i_mapping, FP_OFFSET(VFIO_PCI_BAR0_REGION_INDEX),
			    FP_OFFSET(VFIO_PCI_BAR5_REGION_INDEX + 1) - FP_OFFSET(VFIO_PCI_BAR0_REGION_INDEX),
			    1);
}

/* A page of a BAR mmap: the slot while leased, else the idle page (reads all-ones, no link crossed). */
static vm_fault_t fp_bar_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct fp_mdev *fm = vma->vm_private_data;
	u32 index = vmf->pgoff >> (FP_OFFSET_SHIFT - PAGE_SHIFT);
	u64 off = ((u64)vmf->pgoff << PAGE_SHIFT) & FP_OFFSET_MASK;
	const struct farpass_bar *b = fp_bar_mapped(fm, index);
	vm_fault_t ret = VM_FAULT_SIGBUS;
	phys_addr_t phys;

	mutex_lock(&fm->bar_lock);
	if (!fm->bar_leased)
		ret = vmf_insert_pfn(vma, vmf->address, page_to_pfn(fm->bar_idle));
	else if (b && !fp_bar_slot_phys(fm->rdev->link, b, &phys))
		ret = vmf_insert_pfn(vma, vmf->address, (phys + off) >> PAGE_SHIFT);
	mutex_unlock(&fm->bar_lock);
	return ret;
}

static const struct vm_operations_struct fp_bar_vm_ops = {
	.fault = fp_bar_fault,
};

/*
 * mmap of a BAR region: our outbound window FARPASS_MW_BAR at the BAR's slot, so the guest's accesses
 * reach the device with no trap, while the device is borrowed (fp_bar_fault). Refused outside the
 * BAR, on the MSI-X table/PBA pages (trapped) and where the slot is not in the window.
 */
int fp_bar_mmap(struct vfio_device *vdev, struct vm_area_struct *vma)
{
	struct fp_mdev *fm = fp_mdev_of(vdev);
	u64 index = vma->vm_pgoff >> (FP_OFFSET_SHIFT - PAGE_SHIFT);
	u64 off = (vma->vm_pgoff << PAGE_SHIFT) & FP_OFFSET_MASK;
	u64 len = vma->vm_end - vma->vm_start;
	const struct farpass_bar *b;
	struct fp_span sp[2];
	phys_addr_t phys;
	int n, ret;

	b = index <= VFIO_PCI_BAR5_REGION_INDEX ? fp_bar_mapped(fm, index) : NULL;
	if (!b || !(vma->vm_flags & VM_SHARED) || off >= b->size || len > b->size - off)
		return -EINVAL;
	n = fp_bar_traps(fm, index, b->size, sp);
	if (n < 0)
		return n;
	if (fp_spans_hit(sp, n, off, off + len))
		return -EINVAL;
	ret = fp_bar_slot_phys(fm->rdev->link, b, &phys);
	if (ret)
		return ret;
	/* The vma joins this instance's address space (fp_bar_open), before mmap links it. */
	vma->vm_file->f_mapping = fm->bar_inode->i_mapping;
	vma->vm_page_prot = b->flags & FARPASS_BAR_PREFETCH ? pgprot_writecombine(vma->vm_page_prot) :
			    pgprot_noncached(vma->vm_page_prot);
	fp_vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_private_data = fm;
	vma->vm_ops = &fp_bar_vm_ops;
	return 0;
}
