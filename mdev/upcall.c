// SPDX-License-Identifier: GPL-2.0-only
/*
 * upcall.c - the upcall queue: requests from the kernel to the local agent (FUSE model).
 *
 * A caller (a VFIO user's config access, a command-register write, a reset) builds a request on its
 * stack, queues it and sleeps on its completion for at most upcall_timeout_ms. The agent takes it with
 * UPCALL_GET (it moves from `queued` to `taken`, owned by the agent's file) and answers it with
 * UPCALL_REPLY (found by seq in `taken`, completed, unlinked). Whoever unlinks a request under
 * fp_uq_lock completes it; the waiter always takes fp_uq_lock after waking, so once it returns nobody
 * touches the request any more.
 *
 * Ending without a reply: the waiter's timeout (-ETIMEDOUT) or fatal signal (-EINTR) unlinks it; the
 * release of the file that took it fails it with -ENOTCONN; the release of the last file fails the
 * queued ones too; with no file open a request fails at once. Nothing here waits unboundedly: a
 * caller sleeps at most upcall_timeout_ms for a slot of its instance's share, then as long for the
 * reply, and fp_uq_lock is a spinlock held for list and share operations only.
 */
#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/module.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/wait.h>

#include "counters.h"
#include "fp.h"
#include "upcall.h"

static unsigned int upcall_timeout_ms = 2000;
module_param(upcall_timeout_ms, uint, 0644);
MODULE_PARM_DESC(upcall_timeout_ms,
		 "how long the kernel waits for the agent's reply to an upcall (ms, 10..600000; default 2000)");

struct fp_upcall_rq {
	struct list_head node;		/* in fp_uq_queued or fp_uq_taken while linked; fp_uq_lock */
	u64 seq;
	u32 op;
	u32 device_id;
	u64 args[FP_UPCALL_NARGS];
	unsigned long deadline;		/* jiffies */
	void *owner;			/* the file that took it (taken only) */
	bool linked;
	int error;
	u64 data[FP_UPCALL_NARGS];
	struct completion done;
};

static DEFINE_SPINLOCK(fp_uq_lock);
static LIST_HEAD(fp_uq_queued);
static LIST_HEAD(fp_uq_taken);
static DECLARE_WAIT_QUEUE_HEAD(fp_uq_waitq);
static u64 fp_uq_seq;
static unsigned int fp_uq_files;	/* open /dev/farpass files */

int fp_upcall_timeout_ms(void)
{
	return clamp_t(unsigned int, READ_ONCE(upcall_timeout_ms), 10, 600000);
}

static const enum fp_counter fp_op_counter[] = {
	[FARPASS_UPCALL_BORROW]		= FP_C_UPCALL_BORROW,
	[FARPASS_UPCALL_RETURN]		= FP_C_UPCALL_RETURN,
	[FARPASS_UPCALL_CFG_READ]	= FP_C_UPCALL_CFG_READ,
	[FARPASS_UPCALL_CFG_WRITE]	= FP_C_UPCALL_CFG_WRITE,
	[FARPASS_UPCALL_RESET]		= FP_C_UPCALL_RESET,
	[FARPASS_UPCALL_SET_IRQS]	= FP_C_UPCALL_SET_IRQS,
};

/* Unlink and complete @rq with @error. Caller holds fp_uq_lock; @rq is linked. */
static void fp_uq_finish(struct fp_upcall_rq *rq, int error)
{
	list_del(&rq->node);
	rq->linked = false;
	rq->error = error;
	fp_count(FP_C_UPCALLS_PENDING, -1);
	complete(&rq->done);
}

void fp_upcall_share_init(struct fp_upcall_share *share)
{
	share->outstanding = 0;
	init_waitqueue_head(&share->slot_free);
}

/* Take a slot of @share if one is free (the wait condition of fp_upcall()). */
static bool fp_uq_slot_take(struct fp_upcall_share *share)
{
	bool taken;

	spin_lock(&fp_uq_lock);
	taken = share->outstanding < FP_UPCALL_SHARE;
	if (taken)
		share->outstanding++;
	spin_unlock(&fp_uq_lock);
	return taken;
}

/* The caller's request is over: give its slot back. Caller holds fp_uq_lock; wakes after unlocking. */
static void fp_uq_slot_put(struct fp_upcall_share *share)
{
	lockdep_assert_held(&fp_uq_lock);
	share->outstanding--;
}

int fp_upcall(struct fp_upcall_share *share, u32 op, u32 device_id, const u64 args[FP_UPCALL_NARGS],
	      u64 data[FP_UPCALL_NARGS])
{
	struct fp_upcall_rq rq = { .op = op, .device_id = device_id };
	unsigned long timeout = msecs_to_jiffies(fp_upcall_timeout_ms());
	long left;
	int ret;

	if (op < ARRAY_SIZE(fp_op_counter) && fp_op_counter[op])
		fp_count(fp_op_counter[op], 1);
	memcpy(rq.args, args, sizeof(rq.args));
	init_completion(&rq.done);

	/* Beyond its share, an instance waits for one of its own requests to end, not the others. */
	left = wait_event_killable_timeout(share->slot_free, fp_uq_slot_take(share), timeout);
	if (left < 0)
		return -EINTR;
	if (!left) {
		fp_count(FP_C_UPCALL_BUSY, 1);
		return -EBUSY;
	}

	spin_lock(&fp_uq_lock);
	if (!fp_uq_files) {
		fp_uq_slot_put(share);
		spin_unlock(&fp_uq_lock);
		wake_up(&share->slot_free);
		fp_count(FP_C_UPCALL_NOTCONN, 1);
		return -ENOTCONN;
	}
	/* The agent has the whole timeout for each request it is given, however long the slot took. */
	rq.deadline = jiffies + timeout;
	rq.seq = ++fp_uq_seq;
	rq.linked = true;
	list_add_tail(&rq.node, &fp_uq_queued);
	fp_count(FP_C_UPCALLS_PENDING, 1);
	spin_unlock(&fp_uq_lock);
	wake_up_interruptible(&fp_uq_waitq);

	/* Killable, not interruptible: QEMU threads get harmless signals all the time. */
	left = wait_for_completion_killable_timeout(&rq.done, timeout);

	spin_lock(&fp_uq_lock);
	if (rq.linked)	/* no reply, no release: withdraw it */
		fp_uq_finish(&rq, left < 0 ? -EINTR : -ETIMEDOUT);
	fp_uq_slot_put(share);
	spin_unlock(&fp_uq_lock);
	wake_up(&share->slot_free);
	/*
	 * Unlinked by us or by a reply/release that ran complete() under fp_uq_lock, which we took after
	 * it: nobody touches rq any more.
	 */

	ret = rq.error;
	if (ret == -ETIMEDOUT)
		fp_count(FP_C_UPCALL_TIMEOUTS, 1);
	else if (ret == -ENOTCONN)
		fp_count(FP_C_UPCALL_NOTCONN, 1);
	else if (!ret)
		memcpy(data, rq.data, sizeof(rq.data));
	return ret;
}

void fp_upcall_file_open(void)
{
	spin_lock(&fp_uq_lock);
	fp_uq_files++;
	spin_unlock(&fp_uq_lock);
}

void fp_upcall_file_release(void *owner)
{
	struct fp_upcall_rq *rq, *tmp;

	spin_lock(&fp_uq_lock);
	list_for_each_entry_safe(rq, tmp, &fp_uq_taken, node)
		if (rq->owner == owner)
			fp_uq_finish(rq, -ENOTCONN);
	if (!--fp_uq_files)
		list_for_each_entry_safe(rq, tmp, &fp_uq_queued, node)
			fp_uq_finish(rq, -ENOTCONN);
	spin_unlock(&fp_uq_lock);
}

/* Take the oldest queued request into @req (fields out). Caller holds fp_uq_lock. */
static bool fp_uq_take(void *owner, struct farpass_upcall_req *req)
{
	struct fp_upcall_rq *rq;
	long left;

	rq = list_first_entry_or_null(&fp_uq_queued, struct fp_upcall_rq, node);
	if (!rq)
		return false;
	list_move_tail(&rq->node, &fp_uq_taken);
	rq->owner = owner;
	req->seq = rq->seq;
	req->op = rq->op;
	req->device_id = rq->device_id;
	left = (long)(rq->deadline - jiffies);
	req->timeout_ms = left > 0 ? jiffies_to_msecs(left) : 0;
	memcpy(req->args, rq->args, sizeof(req->args));
	return true;
}

long fp_upcall_get(void *owner, struct farpass_upcall_req *req, bool nonblock)
{
	long ret;

	if (req->flags & FARPASS_UPCALL_GET_F_NONBLOCK)
		nonblock = true;
	for (;;) {
		spin_lock(&fp_uq_lock);
		if (fp_uq_take(owner, req)) {
			spin_unlock(&fp_uq_lock);
			return 0;
		}
		spin_unlock(&fp_uq_lock);
		if (nonblock)
			return -EAGAIN;
		if (req->wait_ms) {
			ret = wait_event_interruptible_timeout(fp_uq_waitq, !list_empty(&fp_uq_queued),
							       msecs_to_jiffies(req->wait_ms));
			if (!ret)
				return -ETIMEDOUT;
		} else {
			ret = wait_event_interruptible(fp_uq_waitq, !list_empty(&fp_uq_queued));
		}
		if (ret < 0)
			return -EINTR;
		/* Another agent file may have taken it first: look again (with the time left, roughly). */
		if (req->wait_ms && ret > 0)
			req->wait_ms = max(1U, jiffies_to_msecs(ret));
	}
}

/*
 * The request could not be handed to the agent (copy to its buffer failed): put it back at the head of
 * the queue if it is still waiting.
 */
void fp_upcall_unget(u64 seq)
{
	struct fp_upcall_rq *rq;

	spin_lock(&fp_uq_lock);
	list_for_each_entry(rq, &fp_uq_taken, node) {
		if (rq->seq == seq) {
			list_move(&rq->node, &fp_uq_queued);
			rq->owner = NULL;
			break;
		}
	}
	spin_unlock(&fp_uq_lock);
}

long fp_upcall_reply(const struct farpass_upcall_reply *rep)
{
	struct fp_upcall_rq *rq;

	if (rep->flags || rep->pad || rep->error > 0 || rep->error < -MAX_ERRNO)
		return -EINVAL;
	spin_lock(&fp_uq_lock);
	list_for_each_entry(rq, &fp_uq_taken, node) {
		if (rq->seq == rep->seq) {
			memcpy(rq->data, rep->data, sizeof(rq->data));
			fp_uq_finish(rq, rep->error);
			spin_unlock(&fp_uq_lock);
			return 0;
		}
	}
	spin_unlock(&fp_uq_lock);
	fp_count(FP_C_UPCALL_LATE_REPLIES, 1);
	return -ENOENT;
}

__poll_t fp_upcall_poll(struct file *file, poll_table *wait)
{
	__poll_t mask = 0;

	poll_wait(file, &fp_uq_waitq, wait);
	spin_lock(&fp_uq_lock);
	if (!list_empty(&fp_uq_queued))
		mask |= EPOLLIN | EPOLLRDNORM;
	spin_unlock(&fp_uq_lock);
	return mask;
}
