/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * upcall.h - the upcall queue (upcall.c): the kernel asks the local agent, FUSE style, and waits a
 * bounded time for the answer. The uapi side (UPCALL_GET/REPLY, poll) is in chardev.c.
 */
#ifndef FARPASS_UPCALL_H
#define FARPASS_UPCALL_H

#include <linux/poll.h>
#include <linux/types.h>

#include "uapi/farpass.h"

struct file;

#define FP_UPCALL_NARGS	6

/*
 * Queue one request for the agent and wait for its reply, at most upcall_timeout_ms. Returns the
 * agent's error (0 or -errno; data[] filled on 0), or the kernel's own:
 *   -ENOTCONN  no /dev/farpass file open, or the file that took the request was closed
 *   -ETIMEDOUT no reply in time (the request is withdrawn: a late reply gets -ENOENT)
 *   -EINTR     the caller got a fatal signal (the request is withdrawn)
 *   -ENOMEM
 * Sleeps; the caller must hold no lock another path of the same device needs while it waits.
 */
int fp_upcall(u32 op, u32 device_id, const u64 args[FP_UPCALL_NARGS], u64 data[FP_UPCALL_NARGS]);

/* The chardev's side. @owner identifies the open file (its private data). */
void fp_upcall_file_open(void);
void fp_upcall_file_release(void *owner);
long fp_upcall_get(void *owner, struct farpass_upcall_req *req, bool nonblock);
/* Copying the taken request out failed: put it back at the head of the queue. */
void fp_upcall_unget(u64 seq);
long fp_upcall_reply(const struct farpass_upcall_reply *rep);
__poll_t fp_upcall_poll(struct file *file, poll_table *wait);

int fp_upcall_timeout_ms(void);

#endif /* FARPASS_UPCALL_H */
