/* SPDX-License-Identifier: GPL-2.0-only */
/* chardev.h - /dev/farpass, the agent's interface (chardev.c; uapi in include/uapi/farpass.h). */
#ifndef FARPASS_CHARDEV_H
#define FARPASS_CHARDEV_H

int fp_chardev_init(void);
void fp_chardev_exit(void);

#endif /* FARPASS_CHARDEV_H */
