// SPDX-License-Identifier: GPL-2.0-only
/*
 * cfg.c - config-space virtualisation tables and decoding; see cfg.h. No kernel headers beyond types
 * and string functions, so the same file compiles in userspace for the unit tests.
 */
#ifdef __KERNEL__
#include <linux/kernel.h>
#include <linux/string.h>
#else
#include <string.h>
#endif

#include "cfg.h"

/* Capability IDs (linux/pci_regs.h PCI_CAP_ID_*). */
#define CAP_PM		0x01
#define CAP_VPD		0x03
#define CAP_MSI		0x05
#define CAP_PCIX	0x07
#define CAP_VNDR	0x09
#define CAP_SSVID	0x0d
#define CAP_EXP		0x10
#define CAP_MSIX	0x11
#define CAP_SATA	0x12
#define CAP_AF		0x13

/*
 * The policy table. Kept: power management (the lender's vfio-pci filters power-state writes),
 * vendor-specific (opaque to us), PCI Express (link/device control; the lender's vfio-pci virtualises
 * what it must), MSI and MSI-X (virtual, as QEMU expects: it emulates them for the guest and programs
 * vectors with VFIO_DEVICE_SET_IRQS, never through config writes reaching the device). Everything else
 * is hidden: VPD (a slow address/flag protocol, and vfio-pci virtualises it anyway), PCI-X, AF (reset
 * goes through VFIO_DEVICE_RESET), SATA, bridge subsystem ids, and any id we do not know.
 */
enum fp_cap_policy fp_cap_policy(u8 id)
{
	switch (id) {
	case CAP_PM:
	case CAP_VNDR:
	case CAP_EXP:
		return FP_CAP_FORWARD;
	case CAP_MSI:
	case CAP_MSIX:
		return FP_CAP_VIRT;
	default:
		return FP_CAP_HIDE;
	}
}

/* Length of a capability from its first dword (id, next, 16 bits of control/length), 2 if unknown. */
static u32 fp_cap_len(u8 id, u32 dw0)
{
	u32 ctrl = dw0 >> 16;

	switch (id) {
	case CAP_MSI:
		/* 64-bit address (bit 7) adds 4, per-vector masking (bit 8) adds mask and pending. */
		return 10 + (ctrl & 0x80 ? 4 : 0) + (ctrl & 0x100 ? 10 : 0);
	case CAP_MSIX:
		return 12;
	case CAP_PM:
	case CAP_VPD:
	case CAP_PCIX:
	case CAP_SSVID:
	case CAP_SATA:
		return 8;
	case CAP_AF:
		return 6;
	case CAP_VNDR:
		return ctrl & 0xff;	/* its length byte */
	default:
		return 2;
	}
}

/* Every write to the tables goes through fp_set() or fp_set_wmask(): both stop at the space's end. */
static void fp_set(struct fp_vcfg *c, u32 off, u32 len, enum fp_cfg_kind kind, u32 val, u32 wmask)
{
	u32 i;

	for (i = 0; i < len && off + i < FP_CFG_SPACE; i++) {
		c->kind[off + i] = (u8)kind;
		c->vconf[off + i] = (u8)(val >> (8 * (i % 4)));
		c->wmask[off + i] = (u8)(wmask >> (8 * (i % 4)));
	}
}

void fp_bar_bits(const struct farpass_bar bars[FARPASS_NUM_BARS], int i, u32 *mask, u32 *low)
{
	const struct farpass_bar *b = &bars[i];

	*mask = 0;
	*low = 0;
	if (i > 0 && bars[i - 1].flags & FARPASS_BAR_MEM64 && bars[i - 1].size) {
		/* Upper half of a 64-bit BAR: the address bits above 4 GiB. */
		*mask = (u32)(~(bars[i - 1].size - 1) >> 32);
		return;
	}
	if (!b->size)
		return;
	if (b->flags & FARPASS_BAR_IO) {
		*low = 0x1;
		*mask = (u32)~(b->size - 1) & ~0x3u;
		return;
	}
	*low = (b->flags & FARPASS_BAR_MEM64 ? 0x4 : 0) | (b->flags & FARPASS_BAR_PREFETCH ? 0x8 : 0);
	*mask = (u32)~(b->size - 1) & ~0xfu;
}

bool fp_vcfg_bar_addr(const struct fp_vcfg *c, const struct farpass_bar bars[FARPASS_NUM_BARS], int i,
		      u64 *addr)
{
	const struct farpass_bar *b;
	u64 a = 0, sizing;
	u8 reg[8] = { 0 };
	int k;

	if (i < 0 || i >= FARPASS_NUM_BARS)
		return false;
	b = &bars[i];
	/* An I/O BAR, none, or the upper half of a 64-bit one (size 0). */
	if (!b->size || b->flags & FARPASS_BAR_IO)
		return false;
	if (b->flags & FARPASS_BAR_MEM64 && i + 1 >= FARPASS_NUM_BARS)
		return false;
	fp_vcfg_read(c, FP_PCI_BAR0 + 4 * i, b->flags & FARPASS_BAR_MEM64 ? 8 : 4, reg);
	for (k = 7; k >= 0; k--)
		a = a << 8 | reg[k];
	a &= ~(u64)0xf;
	sizing = ~(b->size - 1) & (b->flags & FARPASS_BAR_MEM64 ? ~(u64)0 : 0xffffffffULL) & ~(u64)0xf;
	if (!a || a == sizing)
		return false;
	*addr = a;
	return true;
}

void fp_vcfg_init(struct fp_vcfg *c, const struct farpass_bar bars[FARPASS_NUM_BARS])
{
	u32 mask, low;
	int i;

	memset(c, 0, sizeof(*c));	/* everything FWD, no shadow */
	fp_set(c, FP_PCI_COMMAND, 2, FP_CFG_CMD, 0, FP_PCI_CMD_WMASK);
	fp_set(c, 0x0f, 1, FP_CFG_ZERO, 0, 0);			/* BIST */
	for (i = 0; i < FARPASS_NUM_BARS; i++) {
		fp_bar_bits(bars, i, &mask, &low);
		fp_set(c, FP_PCI_BAR0 + 4 * i, 4, FP_CFG_VIRT, low, mask);
	}
	fp_set(c, 0x28, 4, FP_CFG_ZERO, 0, 0);			/* CardBus CIS */
	fp_set(c, 0x30, 4, FP_CFG_ZERO, 0, 0);			/* expansion ROM: none */
	fp_set(c, FP_PCI_CAP_PTR, 1, FP_CFG_VIRT, 0, 0);	/* empty chain until the scan */
	fp_set(c, 0x35, 7, FP_CFG_ZERO, 0, 0);			/* reserved */
	fp_set(c, 0x3c, 1, FP_CFG_VIRT, 0, 0xff);		/* interrupt line: the guest's scratch */
	fp_set(c, FP_PCI_INTERRUPT_PIN, 1, FP_CFG_VIRT, 0, 0);	/* the lender's, from the scan */
}

static void fp_set_wmask(struct fp_vcfg *c, u32 off, u32 len, u8 wmask)
{
	u32 i;

	for (i = 0; i < len && off + i < FP_CFG_SPACE; i++)
		c->wmask[off + i] = wmask;
}

/*
 * The writable bits of an MSI capability at @pos with control @ctrl (enable, multiple message enable,
 * address, data, mask bits); the rest of it read-only.
 */
static void fp_msi_masks(struct fp_vcfg *c, u32 pos, u32 ctrl)
{
	u32 data = ctrl & 0x80 ? 0xc : 0x8;

	fp_set_wmask(c, pos + 2, 1, 0x71);
	fp_set_wmask(c, pos + 4, 1, 0xfc);
	fp_set_wmask(c, pos + 5, 3, 0xff);
	if (ctrl & 0x80)
		fp_set_wmask(c, pos + 8, 4, 0xff);
	fp_set_wmask(c, pos + data, 2, 0xff);
	if (ctrl & 0x100)
		fp_set_wmask(c, pos + data + 4, 4, 0xff);	/* mask bits; pending stays read-only */
}

int fp_vcfg_scan_caps(struct fp_vcfg *c, fp_cfg_read_fn read, void *ctx)
{
	u8 seen[FP_CFG_SPACE / 4] = { 0 };
	u32 prev_next = FP_PCI_CAP_PTR;	/* the byte that points at the next kept capability */
	u32 val, pos, n, len, i;
	int ret;

	c->nr_kept = c->nr_hidden = 0;
	c->msi = c->msix = 0;
	c->vconf[FP_PCI_CAP_PTR] = 0;
	/*
	 * The pin the lender's vfio-pci shows (0 when it offers no INTx): read-only, and what the INTx
	 * index's count follows. A value outside INTA..INTD is the peer's mistake: no INTx.
	 */
	ret = read(ctx, FP_PCI_INTERRUPT_PIN, 1, &val);
	if (ret)
		return ret;
	c->vconf[FP_PCI_INTERRUPT_PIN] = val <= 4 ? (u8)val : 0;
	ret = read(ctx, FP_PCI_STATUS, 2, &val);
	if (ret)
		return ret;
	if (!(val & FP_PCI_STATUS_CAPS))
		return 0;
	ret = read(ctx, FP_PCI_CAP_PTR, 1, &val);
	if (ret)
		return ret;
	pos = val & 0xfc;
	for (n = 0; pos; n++) {
		u8 id;
		enum fp_cap_policy policy;

		if (pos < 0x40 || pos > FP_CFG_SPACE - 4 || seen[pos / 4] || n >= FP_CFG_MAX_CAPS)
			return -1;
		seen[pos / 4] = 1;
		ret = read(ctx, pos, 4, &val);
		if (ret)
			return ret;
		id = (u8)val;
		len = fp_cap_len(id, val);
		if (len < 2)
			len = 2;
		policy = fp_cap_policy(id);
		/* One that runs past the space is malformed: hidden (its bytes up to the end read 0). */
		if (pos + len > FP_CFG_SPACE) {
			len = FP_CFG_SPACE - pos;
			policy = FP_CAP_HIDE;
		}
		if (policy == FP_CAP_HIDE) {
			c->hidden[c->nr_hidden++] = id;
			fp_set(c, pos, len, FP_CFG_ZERO, 0, 0);
		} else {
			c->kept[c->nr_kept++] = id;
			c->vconf[prev_next] = (u8)pos;
			fp_set(c, pos, 2, FP_CFG_VIRT, id, 0);	/* id, next (0 until a later one links) */
			prev_next = pos + 1;
			if (policy == FP_CAP_VIRT) {
				/* Seed the body from the lender, dword by dword, then set the masks. */
				fp_set(c, pos + 2, 2, FP_CFG_VIRT, val >> 16, 0);
				for (i = 4; i < len; i += 4) {
					u32 body;

					ret = read(ctx, pos + i, 4, &body);
					if (ret)
						return ret;
					fp_set(c, pos + i, len - i < 4 ? len - i : 4, FP_CFG_VIRT, body, 0);
				}
				if (id == CAP_MSI) {
					c->msi = (u8)pos;
					fp_msi_masks(c, pos, val >> 16);
				} else {
					c->msix = (u8)pos;
					fp_set_wmask(c, pos + 3, 1, 0xc0);	/* enable, function mask */
				}
			}
		}
		pos = (val >> 8) & 0xfc;
	}
	return 0;
}

void fp_vcfg_piece(const struct fp_vcfg *c, u32 off, u32 count, struct fp_cfg_piece *p)
{
	u32 n;

	p->off = off;
	if (off >= FP_CFG_SPACE) {
		p->kind = FP_CFG_ZERO;
		p->size = count < FP_CFG_REGION_SIZE - off ? count : FP_CFG_REGION_SIZE - off;
		return;
	}
	p->kind = (enum fp_cfg_kind)c->kind[off];
	if (p->kind == FP_CFG_FWD) {
		/* The largest naturally aligned access of forwarded bytes only. */
		for (n = 4; n > 1; n /= 2)
			if (!(off % n) && count >= n && off + n <= FP_CFG_SPACE &&
			    !memchr(&c->kind[off], FP_CFG_VIRT, n) && !memchr(&c->kind[off], FP_CFG_ZERO, n) &&
			    !memchr(&c->kind[off], FP_CFG_CMD, n))
				break;
		p->size = n;
		return;
	}
	for (n = 1; n < count && off + n < FP_CFG_SPACE && c->kind[off + n] == p->kind; n++)
		;
	p->size = n;
}

void fp_vcfg_read(const struct fp_vcfg *c, u32 off, u32 size, u8 *buf)
{
	u32 i;

	for (i = 0; i < size; i++)
		buf[i] = off + i < FP_CFG_SPACE && c->kind[off + i] != FP_CFG_ZERO ? c->vconf[off + i] : 0;
}

void fp_vcfg_write(struct fp_vcfg *c, u32 off, u32 size, const u8 *buf)
{
	u32 i, b;

	for (i = 0; i < size && off + i < FP_CFG_SPACE; i++) {
		b = off + i;
		c->vconf[b] = (u8)((c->vconf[b] & ~c->wmask[b]) | (buf[i] & c->wmask[b]));
	}
}

void fp_cfg_pend_write(struct fp_cfg_pend *d, u32 off, u32 size, const u8 *buf)
{
	u32 i;

	for (i = 0; i < size && off + i < FP_CFG_SPACE; i++) {
		d->val[off + i] = buf[i];
		d->mask[off + i] = 1;
	}
}

void fp_cfg_pend_read(const struct fp_cfg_pend *d, u32 off, u32 size, u8 *buf)
{
	u32 i;

	for (i = 0; i < size && off + i < FP_CFG_SPACE; i++)
		if (d->mask[off + i])
			buf[i] = d->val[off + i];
}

bool fp_cfg_pend_next(const struct fp_cfg_pend *d, const struct fp_vcfg *c, u32 from,
		      struct fp_cfg_piece *p)
{
	u32 n;

	while (from < FP_CFG_SPACE && !d->mask[from])
		from++;
	if (from >= FP_CFG_SPACE)
		return false;
	for (n = 1; from + n < FP_CFG_SPACE && d->mask[from + n]; n++)
		;
	fp_vcfg_piece(c, from, n, p);
	return true;
}

void fp_vcfg_reset(struct fp_vcfg *c)
{
	fp_vcfg_set_command(c, 0);
	if (c->msi)
		c->vconf[c->msi + 2] &= (u8)~0x71;
	if (c->msix)
		c->vconf[c->msix + 3] &= (u8)~0xc0;
}
