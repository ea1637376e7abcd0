/* SPDX-License-Identifier: GPL-2.0-only */
/* types.h - the borrower role (mdev.c): mdev parent per link, types per announced device, instances. */
#ifndef FARPASS_TYPES_H
#define FARPASS_TYPES_H

#include <linux/types.h>

struct fp_link;
struct farpass_announce;

int fp_mdev_init(void);
void fp_mdev_exit(void);

/*
 * Re-register @link's mdev parent with its current devices; -EBUSY (and pending) while instances
 * exist. Caller holds fp_lock.
 */
int fp_link_sync_types(struct fp_link *link);

/* Validated by the caller; *flags gets FARPASS_ANNOUNCE_F_*. */
int fp_device_announce(const struct farpass_announce *desc, u32 *flags);
int fp_device_withdraw(u32 device_id, u32 *flags);
int fp_device_revoke(u32 device_id, u32 *flags);	/* mdev.c */

#endif /* FARPASS_TYPES_H */
