// SPDX-License-Identifier: GPL-2.0-only
/*
 * ntb.c - farpass.ko as a client of the Linux NTB framework (generic ntb_* API only, so any NTB with a
 * Linux hardware driver works). One struct fp_link per NTB device: link events, the doorbell, and the
 * link's control protocol over scratchpads (message layout and commands in proto.h).
 *
 * Handshake: when the link comes up each side sends HELLO (magic, protocol version, roles) and answers
 * the peer's HELLO with HELLO_ACK. The handshake is OK once our HELLO was acknowledged and we have seen
 * a valid message from the peer. HELLO is re-sent every FP_HELLO_RETRY_MS, at most FP_HELLO_TRIES
 * times, then the link's handshake fails with -EAGAIN; a link that goes down ends it with -ENOLINK;
 * a peer of another protocol version with -EPROTO. Nothing here ever waits unboundedly on the peer.
 *
 * Doorbells: FP_DB_CTRL (the control mailbox) is served in a work item; FP_DB_IRQ (the interrupt
 * bridge, irqbridge.c) in the doorbell's interrupt handler itself. Each clears only its own bit.
 *
 * debugfs: /sys/kernel/debug/farpass/<ntb pci name>/link
 *   "link up|down\nhandshake down|pending|ok|failed\nerror <errno>\npeer_version N\npeer_roles 0xN\n"
 */
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/module.h>
#include <linux/ntb.h>
#include <linux/pci.h>
#include <linux/random.h>
#include <linux/seq_file.h>
#include <linux/slab.h>

#include "counters.h"
#include "fp.h"
#include "link.h"
#include "proto.h"

#define FP_HELLO_RETRY_MS	200
#define FP_HELLO_TRIES		25	/* 5 s: TCG peers can be slow to load their side */
#define FP_SEND_POLLS		20	/* peer mailbox busy: poll this many times ... */
#define FP_SEND_POLL_US		500	/* ... this far apart, then -EAGAIN */

static const char *const fp_hs_names[] = {
	[FP_HS_DOWN] = "down", [FP_HS_PENDING] = "pending", [FP_HS_OK] = "ok", [FP_HS_FAILED] = "failed",
};

static u32 fp_link_ids;	/* fp_lock */

/*
 * The roles in the order they hook into a link as it comes; as it goes, the reverse. The windows are
 * set up first (the interrupt bridge lives in their tails); the mdev types, through which guests reach
 * everything else, are let go of first (detach), so no instance holds a DMA window when dmawin frees
 * what stayed quarantined.
 */
static const struct fp_link_role_ops *const fp_link_roles[] = {
	&fp_xwin_role, &fp_dmawin_role, &fp_irq_role, &fp_win_role, &fp_lend_role, &fp_types_role,
};

#define fp_for_each_role(i)		for ((i) = 0; (i) < ARRAY_SIZE(fp_link_roles); (i)++)
#define fp_for_each_role_reverse(i)	for ((i) = ARRAY_SIZE(fp_link_roles); (i)-- > 0;)

/* Every role's @hook that is set, with the arguments given, in the order of @for_each. */
#define fp_roles_call_in(for_each, hook, ...)					\
	do {									\
		unsigned int r_;						\
		for_each(r_)							\
			if (fp_link_roles[r_]->hook)				\
				fp_link_roles[r_]->hook(__VA_ARGS__);		\
	} while (0)
/* As a link comes, and as it goes. */
#define fp_roles_call(hook, ...)	 fp_roles_call_in(fp_for_each_role, hook, __VA_ARGS__)
#define fp_roles_call_reverse(hook, ...) fp_roles_call_in(fp_for_each_role_reverse, hook, __VA_ARGS__)

struct fp_link *fp_link_find(const char *name)
{
	struct fp_link *link;

	lockdep_assert_held(&fp_lock);
	list_for_each_entry(link, &fp_links, node)
		if (!strcmp(link->name, name))
			return link;
	return NULL;
}

/*
 * Put one message into the peer's mailbox and ring its doorbell. -ENOLINK if the link is down or dies
 * (all-ones reads), -EAGAIN if the peer did not empty its mailbox in time.
 */
static int fp_ctrl_send(struct fp_link *link, enum fp_cmd cmd, u32 arg0, u32 arg1)
{
	struct ntb_dev *ntb = link->ntb;
	u32 seq, busy;
	int i, ret;

	lockdep_assert_held(&link->ctrl_lock);
	if (!link->up)
		return -ENOLINK;
	for (i = 0; ; i++) {
		busy = ntb_peer_spad_read(ntb, 0, FP_SPAD_CMD);
		if (busy == ~0u)
			return -ENOLINK;
		if (fp_cmd_of(busy) == FP_CMD_NONE)
			break;
		if (i == FP_SEND_POLLS) {
			fp_count(FP_C_CTRL_RETRIES, 1);
			return -EAGAIN;
		}
		usleep_range(FP_SEND_POLL_US, 2 * FP_SEND_POLL_US);
	}
	seq = ++link->tx_seq & FP_SEQ_MASK;
	ret = ntb_peer_spad_write(ntb, 0, FP_SPAD_HELLO, fp_hello_word(FP_ROLE_BORROWER | FP_ROLE_LENDER));
	if (!ret)
		ret = ntb_peer_spad_write(ntb, 0, FP_SPAD_ARG0, arg0);
	if (!ret)
		ret = ntb_peer_spad_write(ntb, 0, FP_SPAD_ARG1, arg1);
	if (!ret)
		ret = ntb_peer_spad_write(ntb, 0, FP_SPAD_CMD, fp_cmd_word(cmd, seq));
	if (!ret)
		ret = ntb_peer_db_set(ntb, BIT_ULL(FP_DB_CTRL));
	if (ret) {
		fp_count(FP_C_CTRL_ERRORS, 1);
		return ret;
	}
	fp_count(FP_C_CTRL_TX, 1);
	return seq;
}

static void fp_hs_update(struct fp_link *link)
{
	lockdep_assert_held(&link->ctrl_lock);
	if (link->hs_state == FP_HS_PENDING && link->acked && link->peer_seen) {
		link->hs_state = FP_HS_OK;
		link->hs_err = 0;
		cancel_delayed_work(&link->hello_work);
		dev_info(&link->ntb->dev, "link handshake done: peer protocol %u roles %#x\n",
			 link->peer_version, link->peer_roles);
	}
}

static void fp_hello_work(struct work_struct *work)
{
	struct fp_link *link = container_of(to_delayed_work(work), struct fp_link, hello_work);
	int ret;

	mutex_lock(&link->ctrl_lock);
	if (link->hs_state != FP_HS_PENDING)
		goto out_unlock;
	if (link->hello_tries++ >= FP_HELLO_TRIES) {
		link->hs_state = FP_HS_FAILED;
		link->hs_err = -EAGAIN;
		dev_warn(&link->ntb->dev, "link handshake: no answer from the peer: %pe\n",
			 ERR_PTR(link->hs_err));
		goto out_unlock;
	}
	if (!link->acked) {
		if (link->hello_tries > 1)
			fp_count(FP_C_CTRL_RETRIES, 1);
		ret = fp_ctrl_send(link, FP_CMD_HELLO, 0, link->epoch);
		if (ret == -ENOLINK) {
			link->hs_state = FP_HS_FAILED;
			link->hs_err = ret;
			goto out_unlock;
		}
		if (ret >= 0)
			link->hello_seq = ret;
	}
	schedule_delayed_work(&link->hello_work, msecs_to_jiffies(FP_HELLO_RETRY_MS));
out_unlock:
	mutex_unlock(&link->ctrl_lock);
}

static void fp_link_work(struct work_struct *work)
{
	struct fp_link *link = container_of(work, struct fp_link, link_work);
	bool up = ntb_link_is_up(link->ntb, NULL, NULL) == 1;

	mutex_lock(&link->ctrl_lock);
	if (up == link->up)
		goto out_unlock;
	link->up = up;
	if (up) {
		fp_count(FP_C_LINK_UP_EVENTS, 1);
		fp_count(FP_C_LINKS_UP, 1);
		dev_info(&link->ntb->dev, "link up\n");
		link->hs_state = FP_HS_PENDING;
		link->hs_err = 0;
		link->acked = false;
		link->peer_seen = false;
		link->hello_tries = 0;
		/* The peer reaches our windows from its first HELLO on. */
		fp_roles_call(link_up, link);
		schedule_delayed_work(&link->hello_work, 0);
	} else {
		fp_count(FP_C_LINK_DOWN_EVENTS, 1);
		fp_count(FP_C_LINKS_UP, -1);
		dev_info(&link->ntb->dev, "link down\n");
		link->hs_state = FP_HS_DOWN;
		link->hs_err = -ENOLINK;
		link->down_since = jiffies;
		cancel_delayed_work(&link->hello_work);
		fp_roles_call_reverse(link_down, link);
	}
out_unlock:
	mutex_unlock(&link->ctrl_lock);
}

static void fp_ctrl_recv(struct fp_link *link)
{
	struct ntb_dev *ntb = link->ntb;
	u32 cmdw, hello, arg0, arg1, version, roles;
	int ret;

	lockdep_assert_held(&link->ctrl_lock);
	cmdw = ntb_spad_read(ntb, FP_SPAD_CMD);
	if (fp_cmd_of(cmdw) == FP_CMD_NONE)
		return;
	hello = ntb_spad_read(ntb, FP_SPAD_HELLO);
	arg0 = ntb_spad_read(ntb, FP_SPAD_ARG0);
	arg1 = ntb_spad_read(ntb, FP_SPAD_ARG1);
	ntb_spad_write(ntb, FP_SPAD_CMD, fp_cmd_word(FP_CMD_NONE, 0));	/* consumed */
	fp_count(FP_C_CTRL_RX, 1);

	ret = fp_hello_check(hello, &version, &roles);
	if (ret) {
		fp_count(FP_C_CTRL_ERRORS, 1);
		dev_warn_ratelimited(&ntb->dev, "control message %#x with bad hello %#x\n", cmdw, hello);
		if (ret == -2 && link->hs_state == FP_HS_PENDING) {
			link->hs_state = FP_HS_FAILED;
			link->hs_err = -EPROTO;
		}
		return;
	}
	if (!link->up)
		return;
	link->peer_version = version;
	link->peer_roles = roles;
	link->peer_seen = true;
	switch (fp_cmd_of(cmdw)) {
	case FP_CMD_HELLO:
		/* A link that comes back to the same peer end keeps what that end may still reach. */
		if (!arg1 || arg1 != link->peer_epoch) {
			link->peer_epoch = arg1;
			fp_roles_call(peer_new, link);
		}
		fp_roles_call(peer_hello, link);
		ret = fp_ctrl_send(link, FP_CMD_HELLO_ACK, fp_seq_of(cmdw), 0);
		if (ret < 0)
			dev_dbg(&ntb->dev, "HELLO_ACK not sent: %pe (the peer retries)\n", ERR_PTR(ret));
		break;
	case FP_CMD_HELLO_ACK:
		if (arg0 == link->hello_seq)
			link->acked = true;
		break;
	default:
		fp_count(FP_C_CTRL_ERRORS, 1);
		dev_warn_ratelimited(&ntb->dev, "unknown control command %#x\n", cmdw);
		return;
	}
	fp_hs_update(link);
}

static void fp_db_work(struct work_struct *work)
{
	struct fp_link *link = container_of(work, struct fp_link, db_work);

	/* Only our bit: FP_DB_IRQ belongs to the interrupt handler. */
	ntb_db_clear(link->ntb, BIT_ULL(FP_DB_CTRL));
	mutex_lock(&link->ctrl_lock);
	/* Also poll on a spurious doorbell: a message may have raced the previous clear. */
	fp_ctrl_recv(link);
	mutex_unlock(&link->ctrl_lock);
}

/* Both callbacks run in the NTB driver's interrupt handler: the control path defers to a work item. */
static void fp_link_event(void *ctx)
{
	struct fp_link *link = ctx;

	schedule_work(&link->link_work);
}

static void fp_db_event(void *ctx, int vector)
{
	struct fp_link *link = ctx;
	u64 bits = ntb_db_read(link->ntb);

	fp_count(FP_C_DB_EVENTS, 1);
	fp_roles_call(doorbell, link, bits);
	/* A spurious doorbell also polls the control mailbox: a message may have raced a clear. */
	if (bits & BIT_ULL(FP_DB_CTRL) || !(bits & BIT_ULL(FP_DB_IRQ)))
		schedule_work(&link->db_work);
}

static const struct ntb_ctx_ops fp_ctx_ops = {
	.link_event = fp_link_event,
	.db_event = fp_db_event,
};

int fp_link_status(struct farpass_link_status *st)
{
	struct fp_link *link;
	int ret = -ENODEV;

	mutex_lock(&fp_lock);
	link = fp_link_find(st->ntb);
	if (!link || link->dying)
		goto out_unlock;
	mutex_lock(&link->ctrl_lock);
	st->state = 0;
	st->down_ms = 0;
	if (link->up)
		st->state |= FARPASS_LINK_UP;
	else
		st->down_ms = jiffies_to_msecs(jiffies - link->down_since);
	if (link->hs_state == FP_HS_OK)
		st->state |= FARPASS_LINK_PEER_OK;
	mutex_unlock(&link->ctrl_lock);
	ret = 0;
out_unlock:
	mutex_unlock(&fp_lock);
	return ret;
}

static int fp_link_show(struct seq_file *s, void *unused)
{
	struct fp_link *link = s->private;

	mutex_lock(&link->ctrl_lock);
	seq_printf(s, "link %s\nhandshake %s\nerror %d\npeer_version %u\npeer_roles %#x\nepoch %#x\npeer_epoch %#x\n",
		   link->up ? "up" : "down", fp_hs_names[link->hs_state], link->hs_err,
		   link->peer_version, link->peer_roles, link->epoch, link->peer_epoch);
	mutex_unlock(&link->ctrl_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(fp_link);

/*
 * Once the context is set, link and doorbell events queue work: stop them, then wait for what they
 * queued (link_work may re-arm hello_work, so that goes last).
 */
static void fp_link_quiesce(struct fp_link *link)
{
	ntb_db_set_mask(link->ntb, ntb_db_valid_mask(link->ntb));
	ntb_clear_ctx(link->ntb);
	cancel_work_sync(&link->link_work);
	cancel_work_sync(&link->db_work);
	cancel_delayed_work_sync(&link->hello_work);
}

/*
 * Off fp_links and dying, then every role lets go of the link: the borrower side first (instances,
 * types and announced devices; the wait for the instances' VFIO users without fp_lock), then the
 * lender side (the agent's mappings of our windows, then the lent BARs the peer reaches).
 */
static void fp_link_detach(struct fp_link *link)
{
	mutex_lock(&fp_lock);
	list_del(&link->node);
	link->dying = true;
	mutex_unlock(&fp_lock);
	fp_roles_call_reverse(detach, link);
}

/*
 * The end of a quiesced link, or of a probe that failed before its role @nr_probed: no doorbell or link
 * event runs, so the eventfds and windows can go.
 */
static void fp_link_free(struct fp_link *link, unsigned int nr_probed)
{
	while (nr_probed--)
		if (fp_link_roles[nr_probed]->free)
			fp_link_roles[nr_probed]->free(link);
	debugfs_remove_recursive(link->dbg_dir);
	if (link->up)
		fp_count(FP_C_LINKS_UP, -1);
	kfree(link);
}

static int fp_ntb_probe(struct ntb_client *client, struct ntb_dev *ntb)
{
	struct fp_link *link;
	unsigned int i;
	u64 db_mask;
	int ret;

	if (ntb_spad_count(ntb) < FP_SPAD_COUNT || !(ntb_db_valid_mask(ntb) & BIT_ULL(FP_DB_CTRL))) {
		dev_info(&ntb->dev, "not enough scratchpads (%d) or doorbells: not used\n",
			 ntb_spad_count(ntb));
		return -ENODEV;
	}
	if (ntb_peer_port_count(ntb) != 1) {
		dev_info(&ntb->dev, "multi-port NTBs are not supported yet: not used\n");
		return -ENODEV;
	}

	link = kzalloc(sizeof(*link), GFP_KERNEL);
	if (!link)
		return -ENOMEM;
	link->ntb = ntb;
	link->pdev = ntb->pdev;
	link->name = pci_name(ntb->pdev);
	INIT_LIST_HEAD(&link->win_maps);
	mutex_init(&link->xwin_lock);
	INIT_LIST_HEAD(&link->bar_maps);
	mutex_init(&link->ctrl_lock);
	spin_lock_init(&link->inst_lock);
	link->hs_state = FP_HS_DOWN;
	link->hs_err = -ENOLINK;
	INIT_WORK(&link->link_work, fp_link_work);
	INIT_WORK(&link->db_work, fp_db_work);
	INIT_DELAYED_WORK(&link->hello_work, fp_hello_work);
	link->epoch = get_random_u32() ?: 1;
	link->down_since = jiffies;

	/* Our mailbox starts empty; only our doorbell bit interrupts. */
	ntb_spad_write(ntb, FP_SPAD_CMD, fp_cmd_word(FP_CMD_NONE, 0));
	db_mask = ntb_db_valid_mask(ntb);
	ntb_db_set_mask(ntb, db_mask);
	ntb_db_clear(ntb, db_mask);
	link->dbg_dir = debugfs_create_dir(link->name, fp_debugfs_root);
	/* The inbound windows and the mailbox memory exist before the peer can see the link. */
	fp_for_each_role(i) {
		ret = fp_link_roles[i]->probe ? fp_link_roles[i]->probe(link) : 0;
		if (ret)
			goto err_free;
	}
	ret = ntb_set_ctx(ntb, link, &fp_ctx_ops);
	if (ret)
		goto err_free;
	ntb_db_clear_mask(ntb, db_mask & (BIT_ULL(FP_DB_CTRL) | BIT_ULL(FP_DB_IRQ)));

	mutex_lock(&fp_lock);
	link->id = ++fp_link_ids;
	list_add_tail(&link->node, &fp_links);
	fp_for_each_role(i) {
		ret = fp_link_roles[i]->listed ? fp_link_roles[i]->listed(link) : 0;
		if (ret)
			break;
	}
	mutex_unlock(&fp_lock);
	if (ret)
		goto err_detach;

	debugfs_create_file("link", 0400, link->dbg_dir, link, &fp_link_fops);
	fp_count(FP_C_LINKS, 1);

	ntb_link_enable(ntb, NTB_SPEED_AUTO, NTB_WIDTH_AUTO);
	schedule_work(&link->link_work);
	return 0;

err_detach:
	/* As at a remove: every role lets go (one that listed nothing has nothing to undo). */
	fp_link_detach(link);
	/* The link may have come up, or the peer rung, meanwhile: their work is queued or running. */
	fp_link_quiesce(link);
	i = ARRAY_SIZE(fp_link_roles);
err_free:
	/* The roles before @i were probed. */
	fp_link_free(link, i);
	return ret;
}

static void fp_ntb_remove(struct ntb_client *client, struct ntb_dev *ntb)
{
	struct fp_link *link = ntb->ctx;

	/* The agent's mappings of our windows and the lent BARs go before the NTB driver unmaps them. */
	fp_link_detach(link);
	ntb_link_disable(ntb);
	fp_link_quiesce(link);
	fp_count(FP_C_LINKS, -1);
	fp_link_free(link, ARRAY_SIZE(fp_link_roles));
}

static struct ntb_client fp_ntb_client = {
	.ops = {
		.probe = fp_ntb_probe,
		.remove = fp_ntb_remove,
	},
};

int fp_ntb_init(void)
{
	return ntb_register_client(&fp_ntb_client);
}

void fp_ntb_exit(void)
{
	ntb_unregister_client(&fp_ntb_client);
}
