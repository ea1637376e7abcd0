// SPDX-License-Identifier: GPL-2.0-only
/*
 * vfio_cfg.c - the config region: one dispatcher of accesses (fp_cfg_access()) over cfg.c's pieces,
 * the forwarded registers, and the command register, whose bus-master bit borrows and returns the
 * device (borrow.c).
 */
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/string.h>

#include "cfg.h"
#include "counters.h"
#include "fp.h"
#include "instance.h"

/*
 * A forwarded piece. Before the borrow the lender's agent refuses writes (the device may be another
 * borrower's): they are kept in pend and replayed at the borrow (fp_cfg_replay()), and reads show the
 * kept bytes over the lender's value, so the VFIO user reads back what it wrote. bm_lock orders a
 * write against the borrow: none is kept after the replay, none forwarded before it.
 */
static int fp_cfg_forward(struct fp_mdev *fm, const struct fp_cfg_piece *p, u8 *buf, bool write)
{
	int ret = 0;

	if (!write) {
		ret = fp_cfg_upcall(fm, p, buf, false);
		if (!ret && !READ_ONCE(fm->borrowed)) {	/* nothing is pending while borrowed */
			mutex_lock(&fm->bm_lock);
			fp_cfg_pend_read(&fm->pend, p->off, p->size, buf);
			mutex_unlock(&fm->bm_lock);
		}
		return ret;
	}
	mutex_lock(&fm->bm_lock);
	if (fm->borrowed) {
		ret = fp_cfg_upcall(fm, p, buf, true);
	} else {
		fp_cfg_pend_write(&fm->pend, p->off, p->size, buf);
		fp_count(FP_C_CFG_DEFERRED, 1);
	}
	mutex_unlock(&fm->bm_lock);
	return ret;
}

/*
 * A write to the command register. Bus-master enable 0 -> 1 borrows the device (if that fails, the
 * bit stays 0), 1 -> 0 returns it. bm_lock serialises borrow state changes (command writes, reset,
 * close, SET_IRQS) and is held across their upcalls, so a dead agent holds another vCPU here for at
 * most one timeout.
 */
static int fp_cfg_command(struct fp_mdev *fm, const struct fp_cfg_piece *p, const u8 *buf)
{
	u16 old, new;
	bool bme;
	int ret = 0;

	mutex_lock(&fm->bm_lock);
	spin_lock(&fm->state_lock);
	old = fp_vcfg_command(&fm->vcfg);
	fp_vcfg_write(&fm->vcfg, p->off, p->size, buf);
	new = fp_vcfg_command(&fm->vcfg);
	bme = new & FP_PCI_CMD_BME;
	if ((old ^ new) & FP_PCI_CMD_BME)	/* the BME change waits for the agent */
		fp_vcfg_set_command(&fm->vcfg, (new & ~FP_PCI_CMD_BME) | (old & FP_PCI_CMD_BME));
	spin_unlock(&fm->state_lock);

	if ((old ^ new) & FP_PCI_CMD_BME) {
		if (bme)
			ret = fp_borrow(fm);
		else
			fp_return(fm);
		if (!ret) {
			spin_lock(&fm->state_lock);
			fp_vcfg_set_command(&fm->vcfg, (fp_vcfg_command(&fm->vcfg) & ~FP_PCI_CMD_BME) |
					    (bme ? FP_PCI_CMD_BME : 0));
			spin_unlock(&fm->state_lock);
		}
	}
	mutex_unlock(&fm->bm_lock);
	return ret;
}

/*
 * The one dispatcher of config-space accesses: fp_vcfg_piece() splits [off, off + count) into pieces
 * of one kind each (cfg.c decides which bytes are virtual, forwarded or hidden), served here.
 * A dead device reads all-ones and fails writes with -ENODEV.
 */
ssize_t fp_cfg_access(struct fp_mdev *fm, u8 *buf, u32 count, u32 off, bool write)
{
	struct fp_cfg_piece p;
	u32 done = 0;
	int ret;

	fp_count(write ? FP_C_CFG_WRITES : FP_C_CFG_READS, 1);
	fp_cfg_ready(fm);
	while (done < count) {
		if (fp_dead(fm)) {
			if (write)
				return done ? (ssize_t)done : -ENODEV;
			memset(buf + done, 0xff, count - done);
			return count;
		}
		spin_lock(&fm->state_lock);
		fp_vcfg_piece(&fm->vcfg, off + done, count - done, &p);
		if (p.kind != FP_CFG_FWD && !(p.kind == FP_CFG_CMD && write)) {
			if (write)
				fp_vcfg_write(&fm->vcfg, p.off, p.size, buf + done);
			else
				fp_vcfg_read(&fm->vcfg, p.off, p.size, buf + done);
			spin_unlock(&fm->state_lock);
			done += p.size;
			continue;
		}
		spin_unlock(&fm->state_lock);
		if (p.kind == FP_CFG_CMD)
			ret = fp_cfg_command(fm, &p, buf + done);
		else
			ret = fp_cfg_forward(fm, &p, buf + done, write);
		if (ret && !fp_dead(fm))
			return done ? (ssize_t)done : ret;	/* the agent's own error for this access */
		if (!ret)
			done += p.size;
	}
	return count;
}
