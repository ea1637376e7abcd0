/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * upcall.h - the upcall queue (upcall.c): the kernel asks the local agent, FUSE style, and waits a
 * bounded time for the answer. The uapi side (UPCALL_GET/REPLY, poll) is in chardev.c.
 */
#ifndef FARPASS_UPCALL_H
#define FARPASS_UPCALL_H

#include <linux/poll.h>
#include <linux/types.h>
#include <linux/wait.h>

#include "uapi/farpass.h"

struct file;

#define FP_UPCALL_NARGS	6

/*
 * One instance's share of the queue. The agent answers in order, so an instance with many requests
 * queued (a VFIO user's threads each reading config space) would delay every other instance's, up to
 * their timeout. At most FP_UPCALL_SHARE requests of one share are outstanding at once: another
 * instance's request then waits behind at most that many of each. QEMU has one or two (its config
 * accesses are serialised by its big lock, borrow-state changes by bm_lock).
 */
#define FP_UPCALL_SHARE	4

struct fp_upcall_share {
	unsigned int outstanding;	/* requests queued, taken or being collected; fp_uq_lock */
	wait_queue_head_t slot_free;	/* woken when one of them ends */
};

void fp_upcall_share_init(struct fp_upcall_share *share);

/*
 * Queue one request of @share for the agent and wait for its reply, at most upcall_timeout_ms (a
 * caller beyond its share first waits for a slot, as long at most). Returns the agent's error (0 or
 * -errno; data[] filled on 0), or the kernel's own:
 *   -EBUSY     @share's slots stayed taken for upcall_timeout_ms (nothing was queued)
 *   -ENOTCONN  no /dev/farpass file open, or the file that took the request was closed
 *   -ETIMEDOUT no reply in time (the request is withdrawn: a late reply gets -ENOENT)
 *   -EINTR     the caller got a fatal signal (the request is withdrawn)
 * Sleeps; the caller must hold no lock another path of the same device needs while it waits.
 */
int fp_upcall(struct fp_upcall_share *share, u32 op, u32 device_id, const u64 args[FP_UPCALL_NARGS],
	      u64 data[FP_UPCALL_NARGS]);

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
