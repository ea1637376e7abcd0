// SPDX-License-Identifier: GPL-2.0
/*
 * ntb_fidelity - rig test client: does the emulated NTB behave like hardware?
 *
 * A generic NTB client (ntb_* API only, any hardware driver) for check-rig. It proves that
 *  (a) an inbound translation set to an IOVA that exists only in the receiving host's NTB DMA domain
 *      (intel-iommu in translation mode) delivers the peer's window writes to the right page, and
 *  (b) a translation to an unmapped IOVA makes the receiver's IOMMU fault (DMAR in dmesg) and writes
 *      nothing anywhere.
 * ntb_mw_set_trans() deliberately accepts any IOVA here: that is the point of the test.
 *
 * debugfs, one directory per NTB device: /sys/kernel/debug/ntb_fidelity/<ntb dev name>/
 *   alloc    w "SIZE": dma_alloc_coherent() on the NTB's PCI device ("0" frees)
 *            r "iova 0x... size N phys 0x..." or "none" (phys: the CPU-physical address of the
 *            first page, so a test can aim a translation at it as if it were an IOVA)
 *   buf      r raw bytes of that buffer;  w "BYTE": fill it with BYTE (e.g. "0", "0xa5")
 *   trans    w "IDX IOVA SIZE": inbound translation of window IDX (peer 0) to IOVA;  w "IDX clear"
 *            r alignment limits of the inbound windows and the outbound (peer) windows
 *   peer_mw  w "IDX OFFSET HEXBYTES": write HEXBYTES at OFFSET of outbound window IDX (ioremap_wc)
 *            w "read IDX OFFSET LEN": arm a read;  r: hex of LEN bytes read there (at read time)
 *   link     r "up speed S width W" or "down";  w "1": ntb_link_enable(), "0": ntb_link_disable()
 * Numbers accept 0x prefixes. Errors are returned as -errno by write(2).
 */
#include <linux/debugfs.h>
#include <linux/dma-mapping.h>
#include <linux/io.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/ntb.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>

#define FID_MAX_INPUT	8192	/* a peer_mw write carries at most 4 KiB of data as hex */
#define FID_MAX_READ	4096

struct fid_peer_mw {
	phys_addr_t base;
	resource_size_t size;
	void __iomem *virt;		/* mapped on first use */
};

struct fid_ctx {
	struct ntb_dev *ntb;
	struct dentry *dir;
	struct mutex lock;		/* everything below */
	void *buf;
	dma_addr_t iova;
	size_t size;
	int peer_mw_count;
	struct fid_peer_mw *peer_mw;
	int rd_idx;			/* armed peer_mw read */
	u64 rd_off;
	size_t rd_len;
	bool rd_armed;
	char *rd_text;			/* its result, kept while userspace reads it in pieces */
	size_t rd_text_len;
};

static struct dentry *fid_root;

static struct device *fid_dma_dev(struct fid_ctx *ctx)
{
	return &ctx->ntb->pdev->dev;
}

/* Copy a user write into a NUL-terminated, whitespace-trimmed kernel string. */
static char *fid_get_input(const char __user *ubuf, size_t count)
{
	char *s;

	if (count > FID_MAX_INPUT)
		return ERR_PTR(-E2BIG);
	s = memdup_user_nul(ubuf, count);
	if (IS_ERR(s))
		return s;
	strim(s);
	return s;
}

/* Split @s into at most @max whitespace-separated tokens; returns how many. */
static int fid_tokens(char *s, char **tok, int max)
{
	int n = 0;
	char *t;

	while (n < max && (t = strsep(&s, " \t\n")) != NULL) {
		if (*t)
			tok[n++] = t;
	}
	return n;
}

static void fid_free_buf(struct fid_ctx *ctx)
{
	if (!ctx->buf)
		return;
	dma_free_coherent(fid_dma_dev(ctx), ctx->size, ctx->buf, ctx->iova);
	ctx->buf = NULL;
	ctx->size = 0;
	ctx->iova = 0;
}

/* ---- alloc ---- */

static ssize_t fid_alloc_write(struct file *file, const char __user *ubuf,
			       size_t count, loff_t *ppos)
{
	struct fid_ctx *ctx = file->private_data;
	dma_addr_t iova;
	u64 size;
	char *s;
	void *buf;
	int ret;

	s = fid_get_input(ubuf, count);
	if (IS_ERR(s))
		return PTR_ERR(s);
	ret = kstrtou64(s, 0, &size);
	kfree(s);
	if (ret)
		return ret;
	if (size > SZ_1G)
		return -EINVAL;

	mutex_lock(&ctx->lock);
	fid_free_buf(ctx);
	if (size) {
		buf = dma_alloc_coherent(fid_dma_dev(ctx), size, &iova, GFP_KERNEL);
		if (!buf) {
			ret = -ENOMEM;
			goto unlock;
		}
		ctx->buf = buf;
		ctx->iova = iova;
		ctx->size = size;
		dev_info(&ctx->ntb->dev, "allocated %llu bytes at iova %pad\n", size, &iova);
	}
	ret = count;
unlock:
	mutex_unlock(&ctx->lock);
	return ret;
}

/* The IOMMU DMA API may hand out a vmap()ed coherent buffer: look through it. */
static phys_addr_t fid_buf_phys(struct fid_ctx *ctx)
{
	if (is_vmalloc_addr(ctx->buf))
		return page_to_phys(vmalloc_to_page(ctx->buf));
	return virt_to_phys(ctx->buf);
}

static ssize_t fid_alloc_read(struct file *file, char __user *ubuf,
			      size_t count, loff_t *ppos)
{
	struct fid_ctx *ctx = file->private_data;
	char s[96];
	int len;

	mutex_lock(&ctx->lock);
	if (ctx->buf)
		len = scnprintf(s, sizeof(s), "iova 0x%llx size %zu phys 0x%llx\n", (u64)ctx->iova,
				ctx->size, (u64)fid_buf_phys(ctx));
	else
		len = scnprintf(s, sizeof(s), "none\n");
	mutex_unlock(&ctx->lock);
	return simple_read_from_buffer(ubuf, count, ppos, s, len);
}

/* ---- buf ---- */

static ssize_t fid_buf_read(struct file *file, char __user *ubuf,
			    size_t count, loff_t *ppos)
{
	struct fid_ctx *ctx = file->private_data;
	ssize_t ret;

	mutex_lock(&ctx->lock);
	if (ctx->buf)
		ret = simple_read_from_buffer(ubuf, count, ppos, ctx->buf, ctx->size);
	else
		ret = -ENOMEM;
	mutex_unlock(&ctx->lock);
	return ret;
}

static ssize_t fid_buf_write(struct file *file, const char __user *ubuf,
			     size_t count, loff_t *ppos)
{
	struct fid_ctx *ctx = file->private_data;
	char *s;
	u8 val;
	int ret;

	s = fid_get_input(ubuf, count);
	if (IS_ERR(s))
		return PTR_ERR(s);
	ret = kstrtou8(s, 0, &val);
	kfree(s);
	if (ret)
		return ret;

	mutex_lock(&ctx->lock);
	if (ctx->buf) {
		memset(ctx->buf, val, ctx->size);
		ret = count;
	} else {
		ret = -ENOMEM;
	}
	mutex_unlock(&ctx->lock);
	return ret;
}

/* ---- trans ---- */

static ssize_t fid_trans_write(struct file *file, const char __user *ubuf,
			       size_t count, loff_t *ppos)
{
	struct fid_ctx *ctx = file->private_data;
	struct ntb_dev *ntb = ctx->ntb;
	u64 iova, size;
	char *s, *tok[3];
	int idx, n, ret;

	s = fid_get_input(ubuf, count);
	if (IS_ERR(s))
		return PTR_ERR(s);
	n = fid_tokens(s, tok, 3);
	ret = -EINVAL;
	if (n < 2 || kstrtoint(tok[0], 0, &idx))
		goto free_input;

	if (n == 2 && !strcmp(tok[1], "clear")) {
		ret = ntb_mw_clear_trans(ntb, 0, idx);
		if (ret)
			dev_err(&ntb->dev, "clear trans mw %d: %pe\n", idx, ERR_PTR(ret));
		else
			dev_info(&ntb->dev, "cleared trans mw %d\n", idx);
		goto free_input;
	}
	if (n != 3 || kstrtou64(tok[1], 0, &iova) || kstrtou64(tok[2], 0, &size))
		goto free_input;

	ret = ntb_mw_set_trans(ntb, 0, idx, iova, size);
	if (ret)
		dev_err(&ntb->dev, "set trans mw %d -> 0x%llx+0x%llx: %pe\n", idx, iova, size, ERR_PTR(ret));
	else
		dev_info(&ntb->dev, "trans mw %d -> iova 0x%llx size 0x%llx\n", idx, iova, size);
free_input:
	kfree(s);
	return ret ? ret : count;
}

static ssize_t fid_trans_read(struct file *file, char __user *ubuf,
			      size_t count, loff_t *ppos)
{
	struct fid_ctx *ctx = file->private_data;
	struct ntb_dev *ntb = ctx->ntb;
	resource_size_t addr_align, size_align, size_max;
	size_t size = PAGE_SIZE, len = 0;
	ssize_t ret;
	char *s;
	int i, n;

	s = kzalloc(size, GFP_KERNEL);
	if (!s)
		return -ENOMEM;
	n = ntb_mw_count(ntb, 0);
	for (i = 0; i < n; i++) {
		ret = ntb_mw_get_align(ntb, 0, i, &addr_align, &size_align, &size_max);
		if (ret)
			len += scnprintf(s + len, size - len, "mw %d: error %zd\n", i, ret);
		else
			len += scnprintf(s + len, size - len,
					 "mw %d: addr_align 0x%llx size_align 0x%llx size_max 0x%llx\n",
					 i, (u64)addr_align, (u64)size_align, (u64)size_max);
	}
	for (i = 0; i < ctx->peer_mw_count; i++)
		len += scnprintf(s + len, size - len, "peer_mw %d: base 0x%llx size 0x%llx\n",
				 i, (u64)ctx->peer_mw[i].base, (u64)ctx->peer_mw[i].size);
	ret = simple_read_from_buffer(ubuf, count, ppos, s, len);
	kfree(s);
	return ret;
}

/* ---- peer_mw ---- */

/* Map outbound window @idx (write-combined, as a real client would for bulk writes). */
static int fid_peer_mw_check(struct fid_ctx *ctx, int idx, u64 off, size_t len)
{
	struct fid_peer_mw *mw;

	if (idx < 0 || idx >= ctx->peer_mw_count)
		return -EINVAL;
	mw = &ctx->peer_mw[idx];
	if (!len || off >= mw->size || len > mw->size - off)
		return -ERANGE;
	if (!mw->virt) {
		mw->virt = ioremap_wc(mw->base, mw->size);
		if (!mw->virt)
			return -ENOMEM;
	}
	return 0;
}

static int fid_peer_mw_arm_read(struct fid_ctx *ctx, char **tok, int n)
{
	u64 off, len;
	int idx, ret;

	if (n != 4 || kstrtoint(tok[1], 0, &idx) || kstrtou64(tok[2], 0, &off) ||
	    kstrtou64(tok[3], 0, &len) || len > FID_MAX_READ)
		return -EINVAL;
	ret = fid_peer_mw_check(ctx, idx, off, len);
	if (ret)
		return ret;
	ctx->rd_idx = idx;
	ctx->rd_off = off;
	ctx->rd_len = len;
	ctx->rd_armed = true;
	kfree(ctx->rd_text);
	ctx->rd_text = NULL;
	return 0;
}

static int fid_peer_mw_do_write(struct fid_ctx *ctx, char **tok, int n)
{
	size_t hexlen, len;
	u8 *data;
	u64 off;
	int idx, ret;

	if (n != 3 || kstrtoint(tok[0], 0, &idx) || kstrtou64(tok[1], 0, &off))
		return -EINVAL;
	hexlen = strlen(tok[2]);
	if (hexlen % 2)
		return -EINVAL;
	len = hexlen / 2;
	ret = fid_peer_mw_check(ctx, idx, off, len);
	if (ret)
		return ret;
	data = kmalloc(len, GFP_KERNEL);
	if (!data)
		return -ENOMEM;
	ret = hex2bin(data, tok[2], len);
	if (ret)
		goto free_data;
	memcpy_toio(ctx->peer_mw[idx].virt + off, data, len);
	wmb();	/* push the write-combined data out before we report success */
free_data:
	kfree(data);
	return ret;
}

static ssize_t fid_peer_mw_write(struct file *file, const char __user *ubuf,
				 size_t count, loff_t *ppos)
{
	struct fid_ctx *ctx = file->private_data;
	char *s, *tok[4];
	int n, ret;

	s = fid_get_input(ubuf, count);
	if (IS_ERR(s))
		return PTR_ERR(s);
	n = fid_tokens(s, tok, 4);
	mutex_lock(&ctx->lock);
	if (n && !strcmp(tok[0], "read"))
		ret = fid_peer_mw_arm_read(ctx, tok, n);
	else
		ret = fid_peer_mw_do_write(ctx, tok, n);
	mutex_unlock(&ctx->lock);
	kfree(s);
	return ret ? ret : count;
}

static ssize_t fid_peer_mw_read(struct file *file, char __user *ubuf,
				size_t count, loff_t *ppos)
{
	struct fid_ctx *ctx = file->private_data;
	u8 *data = NULL;
	ssize_t ret;

	mutex_lock(&ctx->lock);
	if (!ctx->rd_armed) {
		ret = -ENODATA;
		goto unlock;
	}
	/* Read the peer once per open-read sequence; later chunks come from the saved text. */
	if (*ppos == 0 || !ctx->rd_text) {
		kfree(ctx->rd_text);
		ctx->rd_text = kzalloc(2 * ctx->rd_len + 2, GFP_KERNEL);
		data = kmalloc(ctx->rd_len, GFP_KERNEL);
		if (!ctx->rd_text || !data) {
			ret = -ENOMEM;
			goto free_data;
		}
		memcpy_fromio(data, ctx->peer_mw[ctx->rd_idx].virt + ctx->rd_off, ctx->rd_len);
		bin2hex(ctx->rd_text, data, ctx->rd_len);
		ctx->rd_text[2 * ctx->rd_len] = '\n';
		ctx->rd_text_len = 2 * ctx->rd_len + 1;
	}
	ret = simple_read_from_buffer(ubuf, count, ppos, ctx->rd_text, ctx->rd_text_len);
free_data:
	kfree(data);
unlock:
	mutex_unlock(&ctx->lock);
	return ret;
}

/* ---- link ---- */

static ssize_t fid_link_read(struct file *file, char __user *ubuf,
			     size_t count, loff_t *ppos)
{
	struct fid_ctx *ctx = file->private_data;
	enum ntb_speed speed;
	enum ntb_width width;
	char s[64];
	int len;

	if (ntb_link_is_up(ctx->ntb, &speed, &width))
		len = scnprintf(s, sizeof(s), "up speed %d width %d\n", speed, width);
	else
		len = scnprintf(s, sizeof(s), "down\n");
	return simple_read_from_buffer(ubuf, count, ppos, s, len);
}

static ssize_t fid_link_write(struct file *file, const char __user *ubuf,
			      size_t count, loff_t *ppos)
{
	struct fid_ctx *ctx = file->private_data;
	bool enable;
	int ret;

	ret = kstrtobool_from_user(ubuf, count, &enable);
	if (ret)
		return ret;
	if (enable)
		ret = ntb_link_enable(ctx->ntb, NTB_SPEED_AUTO, NTB_WIDTH_AUTO);
	else
		ret = ntb_link_disable(ctx->ntb);
	if (ret)
		dev_err(&ctx->ntb->dev, "link %s: %pe\n", enable ? "enable" : "disable", ERR_PTR(ret));
	return ret ? ret : count;
}

#define FID_FOPS(name)							\
static const struct file_operations fid_##name##_fops = {		\
	.owner = THIS_MODULE,						\
	.open = simple_open,						\
	.read = fid_##name##_read,					\
	.write = fid_##name##_write,					\
	.llseek = default_llseek,					\
}

FID_FOPS(alloc);
FID_FOPS(buf);
FID_FOPS(trans);
FID_FOPS(peer_mw);
FID_FOPS(link);

/* ---- client ---- */

static int fid_init_peer_mws(struct fid_ctx *ctx)
{
	struct ntb_dev *ntb = ctx->ntb;
	int i, n, ret;

	n = ntb_peer_mw_count(ntb);
	if (n < 0)
		return n;
	ctx->peer_mw = kcalloc(n, sizeof(*ctx->peer_mw), GFP_KERNEL);
	if (n && !ctx->peer_mw)
		return -ENOMEM;
	ctx->peer_mw_count = n;
	for (i = 0; i < n; i++) {
		ret = ntb_peer_mw_get_addr(ntb, i, &ctx->peer_mw[i].base, &ctx->peer_mw[i].size);
		if (ret)
			return ret;
	}
	return 0;
}

static void fid_release_peer_mws(struct fid_ctx *ctx)
{
	int i;

	for (i = 0; i < ctx->peer_mw_count; i++) {
		if (ctx->peer_mw[i].virt)
			iounmap(ctx->peer_mw[i].virt);
	}
	kfree(ctx->peer_mw);
}

static int fid_probe(struct ntb_client *client, struct ntb_dev *ntb)
{
	struct fid_ctx *ctx;
	int ret;

	ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);
	if (!ctx)
		return -ENOMEM;
	ctx->ntb = ntb;
	mutex_init(&ctx->lock);

	ret = fid_init_peer_mws(ctx);
	if (ret) {
		dev_err(&ntb->dev, "peer windows: %pe\n", ERR_PTR(ret));
		goto release_peer_mws;
	}

	ctx->dir = debugfs_create_dir(dev_name(&ntb->dev), fid_root);
	debugfs_create_file("alloc", 0600, ctx->dir, ctx, &fid_alloc_fops);
	debugfs_create_file("buf", 0600, ctx->dir, ctx, &fid_buf_fops);
	debugfs_create_file("trans", 0600, ctx->dir, ctx, &fid_trans_fops);
	debugfs_create_file("peer_mw", 0600, ctx->dir, ctx, &fid_peer_mw_fops);
	debugfs_create_file("link", 0600, ctx->dir, ctx, &fid_link_fops);
	dev_set_drvdata(&ntb->dev, ctx);
	dev_info(&ntb->dev, "ntb_fidelity on %s: %d inbound, %d outbound windows\n",
		 pci_name(ntb->pdev), ntb_mw_count(ntb, 0), ctx->peer_mw_count);
	return 0;

release_peer_mws:
	fid_release_peer_mws(ctx);
	kfree(ctx);
	return ret;
}

static void fid_remove(struct ntb_client *client, struct ntb_dev *ntb)
{
	struct fid_ctx *ctx = dev_get_drvdata(&ntb->dev);
	int i;

	debugfs_remove_recursive(ctx->dir);
	/* No translation may outlive the buffer it points to. */
	for (i = 0; i < ntb_mw_count(ntb, 0); i++)
		ntb_mw_clear_trans(ntb, 0, i);
	fid_free_buf(ctx);
	fid_release_peer_mws(ctx);
	kfree(ctx->rd_text);
	kfree(ctx);
}

static struct ntb_client fid_client = {
	.ops = {
		.probe = fid_probe,
		.remove = fid_remove,
	},
};

static int __init fid_init(void)
{
	int ret;

	fid_root = debugfs_create_dir(KBUILD_MODNAME, NULL);
	ret = ntb_register_client(&fid_client);
	if (ret)
		goto remove_root;
	return 0;

remove_root:
	debugfs_remove_recursive(fid_root);
	return ret;
}
module_init(fid_init);

static void __exit fid_exit(void)
{
	ntb_unregister_client(&fid_client);
	debugfs_remove_recursive(fid_root);
}
module_exit(fid_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("farpass rig: NTB translation fidelity test client");
