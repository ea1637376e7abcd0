/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * cfg.h - config-space virtualisation of a farpass mdev, pure logic with no kernel dependency
 * (compiled into farpass.ko and, from the same source, into tests/unit/test_farpass_cfg).
 *
 * The VFIO config region is FP_CFG_REGION_SIZE bytes. Each byte of the conventional 256 has a kind:
 *   FP_CFG_FWD   forwarded to the lender (CFG_READ/CFG_WRITE upcalls), in naturally aligned 1/2/4-byte
 *                pieces: the register semantics (RW1C status bits, read side effects) stay the device's
 *   FP_CFG_VIRT  virtual: reads return the shadow, writes change only the bits set in the write mask
 *                (BARs: guest addresses kept, all-ones writes read back as the size mask; capability
 *                pointers; interrupt line/pin; MSI and MSI-X capability bodies)
 *   FP_CFG_ZERO  hidden: reads 0, writes dropped (BIST, CardBus CIS, ROM BAR, reserved bytes, the
 *                headers of hidden capabilities, the whole extended space 0x100-0xfff)
 *   FP_CFG_CMD   the command register: virtual, and the caller acts on bus-master changes
 * The capability chain is rebuilt from the lender's (fp_vcfg_scan_caps): capabilities are kept
 * (forwarded or virtual) or hidden (left out of the chain) by fp_cap_policy().
 */
#ifndef FARPASS_CFG_H
#define FARPASS_CFG_H

#include "portable.h"

#include "uapi/farpass.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP_CFG_SPACE		256	/* conventional config space: shadowed and classified */
#define FP_CFG_REGION_SIZE	4096	/* the VFIO config region (the extended space reads as 0) */
#define FP_CFG_MAX_CAPS		48	/* (256 - 64) / 4: more means a loop or garbage */

/* Config registers used here (the same values as linux/pci_regs.h, which userspace may not have). */
#define FP_PCI_COMMAND		0x04
#define FP_PCI_CMD_BME		0x0004	/* bus master enable */
#define FP_PCI_CMD_WMASK	0x0547	/* IO, MEM, BME, parity, SERR, INTx disable */
#define FP_PCI_STATUS		0x06
#define FP_PCI_STATUS_CAPS	0x0010
#define FP_PCI_BAR0		0x10
#define FP_PCI_CAP_PTR		0x34
#define FP_PCI_INTERRUPT_PIN	0x3d

enum fp_cfg_kind {
	FP_CFG_FWD = 0,
	FP_CFG_VIRT,
	FP_CFG_ZERO,
	FP_CFG_CMD,
};

/* What happens to a capability of the lender's device (see docs/mdev.md for the reasons). */
enum fp_cap_policy {
	FP_CAP_HIDE = 0,	/* left out of the chain; its known bytes read as 0 */
	FP_CAP_FORWARD,		/* in the chain, body forwarded to the lender */
	FP_CAP_VIRT,		/* in the chain, body virtual (seeded from the lender at scan) */
};

struct fp_vcfg {
	u8 kind[FP_CFG_SPACE];
	u8 vconf[FP_CFG_SPACE];		/* shadow of the virtual bytes, little-endian */
	u8 wmask[FP_CFG_SPACE];		/* guest-writable bits of the virtual bytes */
	unsigned int nr_kept, nr_hidden;
	u8 kept[FP_CFG_MAX_CAPS];	/* ids of the kept capabilities, in chain order */
	u8 hidden[FP_CFG_MAX_CAPS];	/* ids of the hidden ones */
	u8 msi, msix;			/* offsets of the MSI and MSI-X capabilities, 0 = none */
};

/* A piece of an access: bytes [off, off + size) of one kind (FWD: size 1, 2 or 4, aligned). */
struct fp_cfg_piece {
	u32 off;
	u32 size;
	enum fp_cfg_kind kind;
};

/*
 * Forwarded bytes written before the borrow: the lender's agent refuses CFG_WRITE for a device this
 * borrower does not hold, so the write is kept here and replayed at the borrow. One byte of shadow
 * and one pending flag per conventional byte: bounded, a later write of a byte replaces the earlier.
 */
struct fp_cfg_pend {
	u8 val[FP_CFG_SPACE];
	u8 mask[FP_CFG_SPACE];		/* 1: val[] holds a byte not yet written to the lender */
};

/* The header with BARs from the announced sizes and flags; capability area forwarded, chain empty. */
void fp_vcfg_init(struct fp_vcfg *c, const struct farpass_bar bars[FARPASS_NUM_BARS]);

/* The BAR register's writable address bits and its read-only low bits (type, prefetch). */
void fp_bar_bits(const struct farpass_bar bars[FARPASS_NUM_BARS], int i, u32 *mask, u32 *low);

/*
 * The guest address of memory BAR @i (its upper half too if 64-bit): true and *addr if the guest
 * placed it (not 0, not the all-ones of sizing), false otherwise. The address bits below the size are
 * not writable, so the BAR never wraps past 2^64.
 */
bool fp_vcfg_bar_addr(const struct fp_vcfg *c, const struct farpass_bar bars[FARPASS_NUM_BARS], int i,
		      u64 *addr);

enum fp_cap_policy fp_cap_policy(u8 id);

/*
 * Read the lender's capability chain through @read (offset, size 1/2/4 -> *val; 0 or -errno) and
 * rebuild the virtual one. Returns 0, a read's error, or -1 (-EINVAL in the kernel's terms) for a
 * malformed chain (out of range, loop: the chain is cut there, what was read so far is kept).
 */
typedef int (*fp_cfg_read_fn)(void *ctx, u32 off, u32 size, u32 *val);
int fp_vcfg_scan_caps(struct fp_vcfg *c, fp_cfg_read_fn read, void *ctx);

/* The first piece of an access to [off, off + count) (count >= 1, off < FP_CFG_REGION_SIZE). */
void fp_vcfg_piece(const struct fp_vcfg *c, u32 off, u32 count, struct fp_cfg_piece *p);

/* Virtual bytes (VIRT, CMD, ZERO pieces): read from the shadow, write through the mask. */
void fp_vcfg_read(const struct fp_vcfg *c, u32 off, u32 size, u8 *buf);
void fp_vcfg_write(struct fp_vcfg *c, u32 off, u32 size, const u8 *buf);

static inline u16 fp_vcfg_command(const struct fp_vcfg *c)
{
	return (u16)(c->vconf[FP_PCI_COMMAND] | c->vconf[FP_PCI_COMMAND + 1] << 8);
}

static inline void fp_vcfg_set_command(struct fp_vcfg *c, u16 cmd)
{
	c->vconf[FP_PCI_COMMAND] = (u8)cmd;
	c->vconf[FP_PCI_COMMAND + 1] = (u8)(cmd >> 8);
}

/* Keep a forwarded piece written before the borrow; overlay the kept bytes on a forwarded read. */
void fp_cfg_pend_write(struct fp_cfg_pend *d, u32 off, u32 size, const u8 *buf);
void fp_cfg_pend_read(const struct fp_cfg_pend *d, u32 off, u32 size, u8 *buf);

/*
 * The next piece to replay at or after @from, in offset order: the first piece fp_vcfg_piece() cuts
 * from the run of pending bytes there, so naturally aligned 1/2/4 bytes, all pending. False if none.
 */
bool fp_cfg_pend_next(const struct fp_cfg_pend *d, const struct fp_vcfg *c, u32 from,
		      struct fp_cfg_piece *p);

/* Device reset: command 0, MSI/MSI-X enables off; BARs keep the guest's addresses. */
void fp_vcfg_reset(struct fp_vcfg *c);

#ifdef __cplusplus
}
#endif

#endif /* FARPASS_CFG_H */
