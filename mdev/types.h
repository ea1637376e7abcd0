/* SPDX-License-Identifier: GPL-2.0-only */
/* types.h - the borrower role (mdev.c): mdev parent per link, a type per slot of its lender, instances. */
#ifndef FARPASS_TYPES_H
#define FARPASS_TYPES_H

#include <linux/types.h>

struct fp_link;
struct farpass_announce;

int fp_mdev_init(void);
void fp_mdev_exit(void);

/* Validated by the caller (chardev.c). */
int fp_device_announce(const struct farpass_announce *desc);
int fp_device_withdraw(u32 device_id);
int fp_device_revoke(u32 device_id, u32 *flags);	/* instance.c */

#endif /* FARPASS_TYPES_H */
