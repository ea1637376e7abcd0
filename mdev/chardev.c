// SPDX-License-Identifier: GPL-2.0-only
/*
 * chardev.c - /dev/farpass: a misc device for the local agent only (mode 0600, and CAP_SYS_ADMIN at
 * open). Each open file negotiates the API version first; ioctls return -errno as docs/uapi.md lists.
 *
 * Ioctls are dispatched on their number (_IOC_NR), not on the full command: the size encoded in the
 * command changes when a struct grows at its end, and `argsz` (copy_struct_from_user) is what makes
 * older and newer agents work with this kernel.
 */
#include <linux/capability.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "chardev.h"
#include "counters.h"
#include "dmawin.h"
#include "fp.h"
#include "irqbridge.h"
#include "link.h"
#include "proto.h"
#include "types.h"
#include "upcall.h"
#include "xwin.h"

/* One open /dev/farpass. */
struct fp_file {
	struct mutex lock;	/* version */
	u32 version;		/* 0 until VERSION succeeded */
};

/*
 * Copy an argsz-headed struct in: -EINVAL if argsz < @minsz, -E2BIG if the caller's larger struct has
 * non-zero bytes this kernel does not know. Returns argsz (for the copy out) or -errno.
 */
static long fp_copy_in(void *karg, size_t ksize, size_t minsz, void __user *uarg)
{
	u32 argsz;
	int ret;

	if (get_user(argsz, (u32 __user *)uarg))
		return -EFAULT;
	if (argsz < minsz)
		return -EINVAL;
	ret = copy_struct_from_user(karg, ksize, uarg, argsz);
	if (ret)
		return ret;	/* not "ret ? ret : argsz": that would convert -errno to u32 */
	return argsz;
}

static long fp_copy_out(void __user *uarg, const void *karg, size_t ksize, u32 argsz)
{
	return copy_to_user(uarg, karg, min_t(size_t, ksize, argsz)) ? -EFAULT : 0;
}

static bool fp_string_ok(const char *s, size_t size, bool may_be_empty)
{
	size_t n = strnlen(s, size);
	size_t i;

	if (n == size || (!n && !may_be_empty))
		return false;
	for (i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return false;
	return true;
}

static bool fp_announce_valid(const struct farpass_announce *a)
{
	int i;

	if (a->flags || memchr_inv(a->pad0, 0, sizeof(a->pad0)) || a->device_id > INT_MAX ||
	    !fp_lender_name_valid(a->lender, sizeof(a->lender)) ||
	    !fp_string_ok(a->lender_addr, sizeof(a->lender_addr), true) ||
	    !fp_string_ok(a->ntb, sizeof(a->ntb), false) || a->class_code > 0xffffff ||
	    a->irq_slot >= FARPASS_IRQ_SLOTS)
		return false;
	for (i = 0; i < FARPASS_NUM_BARS; i++) {
		const struct farpass_bar *b = &a->bars[i];

		if (b->pad || b->flags & ~(FARPASS_BAR_IO | FARPASS_BAR_MEM64 | FARPASS_BAR_PREFETCH |
					   FARPASS_BAR_MAPPED) ||
		    (b->size && !is_power_of_2(b->size)))
			return false;
		/* A slot in the BAR window: a memory BAR, aligned so that large pages can map it. */
		if (b->flags & FARPASS_BAR_MAPPED &&
		    (!b->size || b->flags & FARPASS_BAR_IO ||
		     !IS_ALIGNED(b->win_offset, max_t(u64, min_t(u64, b->size, SZ_2M), PAGE_SIZE))))
			return false;
		if (b->flags & FARPASS_BAR_MEM64 && (i == FARPASS_NUM_BARS - 1 || b->flags & FARPASS_BAR_IO))
			return false;
		/* A 32-bit BAR (or I/O) cannot decode more than 4 GiB. */
		if (!(b->flags & FARPASS_BAR_MEM64) && b->size > 0x100000000ULL)
			return false;
	}
	return true;
}

static long fp_ioctl_version(struct fp_file *f, void __user *uarg)
{
	struct farpass_version v;
	long argsz;
	u32 asked;

	argsz = fp_copy_in(&v, sizeof(v), offsetofend(struct farpass_version, version), uarg);
	if (argsz < 0)
		return argsz;
	if (v.flags)
		return -EINVAL;
	asked = v.version;
	v.version = FARPASS_API_VERSION;
	v.max_devices = FARPASS_MAX_DEVICES;
	v.features = FARPASS_FEAT_BORROWER | FARPASS_FEAT_UPCALLS | FARPASS_FEAT_OUTBOUND |
		     FARPASS_FEAT_LINK_STATUS;
	if (fp_xwin_any_ready())
		v.features |= FARPASS_FEAT_DATA_PATH;
	if (asked != FARPASS_API_VERSION) {
		/* Tell the agent which version we speak, then refuse. */
		if (fp_copy_out(uarg, &v, sizeof(v), argsz))
			return -EFAULT;
		return -EPROTONOSUPPORT;
	}
	mutex_lock(&f->lock);
	f->version = asked;
	mutex_unlock(&f->lock);
	return fp_copy_out(uarg, &v, sizeof(v), argsz);
}

static long fp_ioctl_announce(void __user *uarg)
{
	struct farpass_announce a;
	long argsz;

	argsz = fp_copy_in(&a, sizeof(a), sizeof(a), uarg);
	if (argsz < 0)
		return argsz;
	if (!fp_announce_valid(&a)) {
		pr_warn_ratelimited(FP_NAME ": ANNOUNCE_DEVICE %u: invalid arguments\n", a.device_id);
		return -EINVAL;
	}
	return fp_device_announce(&a);
}

static long fp_ioctl_withdraw(void __user *uarg)
{
	struct farpass_withdraw w;
	long argsz;

	argsz = fp_copy_in(&w, sizeof(w), sizeof(w), uarg);
	if (argsz < 0)
		return argsz;
	if (w.flags || w.pad)
		return -EINVAL;
	return fp_device_withdraw(w.device_id);
}

static long fp_ioctl_upcall_get(struct fp_file *f, struct file *file, void __user *uarg)
{
	struct farpass_upcall_req r;
	long argsz, ret;

	argsz = fp_copy_in(&r, sizeof(r), sizeof(r), uarg);
	if (argsz < 0)
		return argsz;
	if (r.flags & ~FARPASS_UPCALL_GET_F_NONBLOCK)
		return -EINVAL;
	ret = fp_upcall_get(f, &r, file->f_flags & O_NONBLOCK);
	if (ret)
		return ret;
	if (fp_copy_out(uarg, &r, sizeof(r), argsz)) {
		fp_upcall_unget(r.seq);
		return -EFAULT;
	}
	return 0;
}

static long fp_ioctl_upcall_reply(void __user *uarg)
{
	struct farpass_upcall_reply r;
	long argsz;

	argsz = fp_copy_in(&r, sizeof(r), sizeof(r), uarg);
	if (argsz < 0)
		return argsz;
	return fp_upcall_reply(&r);
}

static long fp_ioctl_outbound_window(void __user *uarg)
{
	struct farpass_outbound_window w;
	long argsz, ret;

	argsz = fp_copy_in(&w, sizeof(w), sizeof(w), uarg);
	if (argsz < 0)
		return argsz;
	if (w.flags)
		return -EINVAL;
	if (!fp_string_ok(w.ntb, sizeof(w.ntb), false))
		return -ENODEV;
	w.count = 0;
	w.size = 0;
	w.offset = 0;
	ret = fp_win_describe(&w);
	if (ret && ret != -ENOENT)
		return ret;
	if (fp_copy_out(uarg, &w, sizeof(w), argsz))
		return -EFAULT;
	return ret;	/* -ENOENT still tells the window count */
}

static long fp_ioctl_bar_map(void __user *uarg)
{
	struct farpass_bar_map m;
	long argsz;

	argsz = fp_copy_in(&m, sizeof(m), sizeof(m), uarg);
	if (argsz < 0)
		return argsz;
	if (m.flags & ~FARPASS_BAR_MAP_F_UNMAP || m.pad || m.bar >= PCI_STD_NUM_BARS)
		return -EINVAL;
	if (!fp_string_ok(m.ntb, sizeof(m.ntb), false) || !fp_string_ok(m.pci, sizeof(m.pci), false))
		return -ENODEV;
	return fp_lend_bar_map(&m);
}

/* The header is argsz-checked like the others; the fds follow it: argsz counts them exactly. */
static long fp_ioctl_irq_bridge(void __user *uarg)
{
	struct farpass_irq_bridge b;
	s32 *fds;
	long ret;

	if (copy_from_user(&b, uarg, sizeof(b)))
		return -EFAULT;
	if (b.flags & ~(FARPASS_IRQ_BRIDGE_F_CLEAR | FARPASS_IRQ_BRIDGE_F_UNMASK) || b.pad ||
	    b.irq_slot >= FARPASS_IRQ_SLOTS ||
	    b.start > FARPASS_IRQ_VECTORS || b.count > FARPASS_IRQ_VECTORS - b.start ||
	    b.argsz != sizeof(b) + b.count * sizeof(*fds) ||
	    (b.flags & FARPASS_IRQ_BRIDGE_F_CLEAR && b.count) ||
	    (b.flags & FARPASS_IRQ_BRIDGE_F_UNMASK && (b.start || b.count != 1)))
		return -EINVAL;
	if (!fp_string_ok(b.ntb, sizeof(b.ntb), false))
		return -ENODEV;
	fds = memdup_user((u8 __user *)uarg + sizeof(b), b.count * sizeof(*fds));
	if (IS_ERR(fds))
		return PTR_ERR(fds);
	ret = fp_irq_bridge(&b, fds);
	kfree(fds);
	return ret;
}

static long fp_ioctl_dma_layout(void __user *uarg)
{
	struct farpass_dma_layout l;
	long argsz, ret;

	argsz = fp_copy_in(&l, sizeof(l), sizeof(l), uarg);
	if (argsz < 0)
		return argsz;
	if (l.flags)
		return -EINVAL;
	l.nr_slots = 0;
	l.pages_pinned = 0;
	memset(l.slots, 0, sizeof(l.slots));
	ret = fp_dmawin_layout(&l);
	if (ret)
		return ret;
	return fp_copy_out(uarg, &l, sizeof(l), argsz);
}

static long fp_ioctl_link_status(void __user *uarg)
{
	struct farpass_link_status st;
	long argsz, ret;

	argsz = fp_copy_in(&st, sizeof(st), sizeof(st), uarg);
	if (argsz < 0)
		return argsz;
	if (st.flags || st.pad)
		return -EINVAL;
	if (!fp_string_ok(st.ntb, sizeof(st.ntb), false))
		return -ENODEV;
	ret = fp_link_status(&st);
	if (ret)
		return ret;
	return fp_copy_out(uarg, &st, sizeof(st), argsz);
}

static long fp_ioctl_revoke(void __user *uarg)
{
	struct farpass_revoke r;
	long argsz, ret;
	u32 flags = 0;

	argsz = fp_copy_in(&r, sizeof(r), sizeof(r), uarg);
	if (argsz < 0)
		return argsz;
	if (r.flags || r.pad)
		return -EINVAL;
	ret = fp_device_revoke(r.device_id, &flags);
	if (ret)
		return ret;
	r.flags = flags;
	return fp_copy_out(uarg, &r, sizeof(r), argsz);
}

static long fp_ioctl_dispatch(struct fp_file *f, struct file *file, unsigned int cmd,
			      void __user *uarg)
{
	u32 version;

	if (_IOC_TYPE(cmd) != FARPASS_IOCTL_TYPE || _IOC_DIR(cmd) != (_IOC_READ | _IOC_WRITE))
		return -ENOTTY;
	if (_IOC_NR(cmd) == FARPASS_CMD_VERSION)
		return fp_ioctl_version(f, uarg);

	mutex_lock(&f->lock);
	version = f->version;
	mutex_unlock(&f->lock);
	switch (_IOC_NR(cmd)) {
	case FARPASS_CMD_ANNOUNCE_DEVICE:
	case FARPASS_CMD_WITHDRAW_DEVICE:
	case FARPASS_CMD_UPCALL_GET:
	case FARPASS_CMD_UPCALL_REPLY:
	case FARPASS_CMD_OUTBOUND_WINDOW:
	case FARPASS_CMD_BAR_MAP:
	case FARPASS_CMD_IRQ_BRIDGE:
	case FARPASS_CMD_DMA_LAYOUT:
	case FARPASS_CMD_LINK_STATUS:
	case FARPASS_CMD_REVOKE_DEVICE:
		if (!version)
			return -EPROTO;		/* VERSION must come first */
		break;
	default:
		return -ENOTTY;
	}
	switch (_IOC_NR(cmd)) {
	case FARPASS_CMD_ANNOUNCE_DEVICE:
		return fp_ioctl_announce(uarg);
	case FARPASS_CMD_WITHDRAW_DEVICE:
		return fp_ioctl_withdraw(uarg);
	case FARPASS_CMD_UPCALL_GET:
		return fp_ioctl_upcall_get(f, file, uarg);
	case FARPASS_CMD_OUTBOUND_WINDOW:
		return fp_ioctl_outbound_window(uarg);
	case FARPASS_CMD_BAR_MAP:
		return fp_ioctl_bar_map(uarg);
	case FARPASS_CMD_IRQ_BRIDGE:
		return fp_ioctl_irq_bridge(uarg);
	case FARPASS_CMD_DMA_LAYOUT:
		return fp_ioctl_dma_layout(uarg);
	case FARPASS_CMD_LINK_STATUS:
		return fp_ioctl_link_status(uarg);
	case FARPASS_CMD_REVOKE_DEVICE:
		return fp_ioctl_revoke(uarg);
	default:
		return fp_ioctl_upcall_reply(uarg);
	}
}

static long fp_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	long ret = fp_ioctl_dispatch(file->private_data, file, cmd, (void __user *)arg);

	/* An empty queue or an expired wait is the agent's normal life, not an error. */
	if (ret < 0 && ret != -EAGAIN && ret != -ETIMEDOUT && ret != -EINTR)
		fp_count(FP_C_IOCTL_ERRORS, 1);
	return ret;
}

/* Outbound windows (window.c), only on a file that negotiated the version. */
static int fp_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct fp_file *f = file->private_data;
	u32 version;

	mutex_lock(&f->lock);
	version = f->version;
	mutex_unlock(&f->lock);
	if (!version)
		return -EPROTO;
	return fp_win_mmap(file, vma);
}

static int fp_open(struct inode *inode, struct file *file)
{
	struct fp_file *f;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	f = kzalloc(sizeof(*f), GFP_KERNEL);
	if (!f)
		return -ENOMEM;
	mutex_init(&f->lock);
	file->private_data = f;
	fp_upcall_file_open();
	fp_count(FP_C_AGENT_FILES, 1);
	return nonseekable_open(inode, file);
}

static int fp_release(struct inode *inode, struct file *file)
{
	/* Requests this file took fail with -ENOTCONN (all queued ones if it was the last file). */
	fp_upcall_file_release(file->private_data);
	kfree(file->private_data);
	fp_count(FP_C_AGENT_FILES, -1);
	return 0;
}

static const struct file_operations fp_fops = {
	.owner = THIS_MODULE,
	.open = fp_open,
	.release = fp_release,
	.unlocked_ioctl = fp_ioctl,
	.poll = fp_upcall_poll,
	.mmap = fp_mmap,
	.compat_ioctl = compat_ptr_ioctl,	/* the uapi has the same layout in 32- and 64-bit */
};

static struct miscdevice fp_miscdev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = FP_NAME,
	.fops = &fp_fops,
	.mode = 0600,
};

int fp_chardev_init(void)
{
	return misc_register(&fp_miscdev);
}

void fp_chardev_exit(void)
{
	misc_deregister(&fp_miscdev);
}
