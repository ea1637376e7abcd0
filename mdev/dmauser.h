/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * dmauser.h - a VFIO user of our instances (dmauser.c) and the unmaps they are being told about, so
 * that a refill of one instance does not pin pages of a range type1 is still unmapping.
 */
#ifndef FARPASS_DMAUSER_H
#define FARPASS_DMAUSER_H

struct fp_dmauser;

/* The calling process's (at open), shared by its instances: a reference, or ERR_PTR(-ENOMEM). */
struct fp_dmauser *fp_dmauser_get(void);
void fp_dmauser_put(struct fp_dmauser *u);
/* Around an instance's .dma_unmap; @quiet: how long after the last end a refill still waits (jiffies). */
void fp_dmauser_unmap_begin(struct fp_dmauser *u);
void fp_dmauser_unmap_end(struct fp_dmauser *u, unsigned long quiet);
/* 0: a refill of one of @u's instances may pin now; else how long to wait first (jiffies). */
unsigned long fp_dmauser_refill_wait(struct fp_dmauser *u, unsigned long quiet);

#endif /* FARPASS_DMAUSER_H */
