/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * proto.h - pure logic of farpass.ko with no kernel dependency: the NTB control protocol's scratchpad
 * encoding and the naming of mdev types. Compiled into the module (proto.c) and, from the same source,
 * into the doctest unit tests (tests/unit/test_proto.cpp).
 */
#ifndef FARPASS_PROTO_H
#define FARPASS_PROTO_H

#include "portable.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The link control protocol runs over scratchpads and one doorbell, so it works on any NTB whose
 * Linux driver offers >= FP_SPAD_COUNT scratchpads and one doorbell bit (ntb_hw_epf has 64 and 31).
 *
 * Each side has one inbound mailbox: its own scratchpads FP_SPAD_*, which the PEER writes with
 * ntb_peer_spad_write(). A send is: check the peer's CMD scratchpad is FP_CMD_NONE (the peer consumed
 * the previous message; bounded polling, else -EAGAIN), write HELLO and ARG0/ARG1, write CMD last,
 * ring doorbell bit FP_DB_CTRL. The receiver, in a work item, reads CMD, then the others, then writes
 * its own CMD back to FP_CMD_NONE (consumed) and acts. A read of all-ones means a dead link.
 */
#define FP_SPAD_HELLO	0	/* FP_MAGIC << 16 | protocol version << 8 | sender's FP_ROLE_* */
#define FP_SPAD_CMD	1	/* enum fp_cmd << 24 | sequence number (24 bits) */
#define FP_SPAD_ARG0	2
#define FP_SPAD_ARG1	3
#define FP_SPAD_COUNT	4	/* scratchpads the protocol needs */

#define FP_DB_CTRL	0	/* doorbell bit: "a message is in your mailbox" */
#define FP_DB_IRQ	1	/* doorbell bit: "interrupts in your interrupt mailbox" (irqbridge.c) */

#define FP_MAGIC		0xfa55u
/* 2: the interrupt mailbox carries INTx unmasks above the device slots (its geometry doubled). */
#define FP_PROTO_VERSION	2u

#define FP_ROLE_BORROWER	(1u << 0)
#define FP_ROLE_LENDER		(1u << 1)

/* Control commands. Numbers are part of the protocol: never reuse one. */
enum fp_cmd {
	FP_CMD_NONE		= 0,	/* mailbox empty (the receiver writes it back after reading) */
	/*
	 * ARG0 = sender's API features, ARG1 = sender's link epoch (random, nonzero, new at each probe
	 * of its end; 0 from a sender without one); answer with HELLO_ACK.
	 */
	FP_CMD_HELLO		= 1,
	FP_CMD_HELLO_ACK	= 2,	/* ARG0 = sequence number of the HELLO being acknowledged */
	/* Later slices: window layout, borrow/return, interrupt mailbox set-up. */
	FP_CMD_MAX
};

#define FP_SEQ_MASK	0x00ffffffu

static inline u32 fp_hello_word(u32 roles)
{
	return FP_MAGIC << 16 | (FP_PROTO_VERSION & 0xff) << 8 | (roles & 0xff);
}

static inline u32 fp_cmd_word(enum fp_cmd cmd, u32 seq)
{
	return (u32)cmd << 24 | (seq & FP_SEQ_MASK);
}

static inline u32 fp_cmd_of(u32 word) { return word >> 24; }
static inline u32 fp_seq_of(u32 word) { return word & FP_SEQ_MASK; }

/*
 * Decode a received HELLO word: 0 if it is ours and of our version (then *roles is the peer's roles),
 * -1 if the magic is wrong (garbage, or a dead link's all-ones), -2 if the version differs.
 */
int fp_hello_check(u32 word, u32 *version, u32 *roles);

/* A lender name: 1..31 characters of [A-Za-z0-9._] (no '-': it separates the type name's parts). */
bool fp_lender_name_valid(const char *name, size_t bufsize);

/*
 * The sysfs part of the name of the mdev type of slot @slot of @lender's link ("farpass-<lender>-<slot>";
 * the mdev core prefixes the parent driver's name, e.g. "ntb_hw_epf-farpass-lender-3"). The lender agent
 * keeps a device's slot for as long as it lends it, the same towards every borrower. Returns the
 * length, or -1 if it does not fit.
 */
int fp_type_sysfs_name(char *buf, size_t size, const char *lender, unsigned int slot);

/* That type's human-readable name (mdevctl's "Name"), constant: "<lender> slot <slot>". */
int fp_type_pretty_name(char *buf, size_t size, const char *lender, unsigned int slot);

/*
 * The device in a slot, as its type's description starts (mdevctl's "Description"):
 * "<lender> <vendor>:<device> (<lender_addr>)".
 */
int fp_device_label(char *buf, size_t size, const char *lender, unsigned int vendor, unsigned int device,
		    const char *lender_addr);

#ifdef __cplusplus
}
#endif

#endif /* FARPASS_PROTO_H */
