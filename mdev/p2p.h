/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * p2p.h - peer-to-peer DMA between the farpass devices of one VFIO user (p2p.c), docs/mdev.md
 * "Peer-to-peer between remote devices".
 */
#ifndef FARPASS_P2P_H
#define FARPASS_P2P_H

#include <linux/types.h>

struct fp_mdev;
struct fp_borrow_stat;

/* Open: @fm becomes a peer of its VFIO user's other instances, under an identity never reused. */
void fp_p2p_open(struct fp_mdev *fm);
/* Close: no DMA window leads to @fm's BARs any more (unmapped, flushed) when this returns. */
void fp_p2p_close(struct fp_mdev *fm);
/*
 * Borrow (@fm's dma_lock held): build its DMA window (fp_dmawin_create, from its staged window if
 * that still fits) with a slot for each memory
 * BAR the guest placed of its VFIO user's instances on other links, and a lender peer for each on
 * @fm's link, and map (list) those still open.
 */
int fp_p2p_window_create(struct fp_mdev *fm, struct fp_borrow_stat *st);

#endif /* FARPASS_P2P_H */
