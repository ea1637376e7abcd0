/* SPDX-License-Identifier: GPL-2.0-only WITH Linux-syscall-note */
/*
 * farpass.h - the agent's interface to the farpass kernel module (/dev/farpass).
 *
 * This is the one wire contract between lender-agent and farpass.ko on the same host. It is versioned:
 * the first ioctl on every open file must be FARPASS_IOCTL_VERSION; every other ioctl fails with
 * -EPROTO until it succeeded. See docs/uapi.md for the rules, the errno table and the upcall model.
 *
 * Style (as libvfio-user's vfio-user.h and linux/vfio.h): fixed-width types, natural alignment with
 * explicit padding (the layout is the same for 32- and 64-bit userspace, no compat ioctls needed), and
 * every argument struct starts with
 *	__u32 argsz;	in: sizeof the struct as the caller knows it (>= the struct's minimum size)
 *	__u32 flags;	in: FARPASS_*_F_* request flags, unknown bits are rejected (-EINVAL);
 *			out: where documented, result flags
 * so that a struct can grow at its end in a later version without a new ioctl number.
 * Strings are fixed-size char arrays, NUL-terminated inside the array.
 * Errors are returned as -1/errno by ioctl(2); upcall replies carry a negative errno in `error`.
 */
#ifndef _UAPI_FARPASS_H
#define _UAPI_FARPASS_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define FARPASS_API_VERSION	1		/* bumped on any incompatible change */
#define FARPASS_DEV_PATH	"/dev/farpass"
#define FARPASS_IOCTL_TYPE	'F'

#define FARPASS_NAME_LEN	32		/* lender names and PCI names, NUL included */
#define FARPASS_NUM_BARS	6
#define FARPASS_MAX_DEVICES	64		/* announced devices per host */

/* ------------------------------------------------------------------------------------- commands */

/*
 * Command numbers (the `n` of _IOWR('F', n, ...)). Numbers are never reused; a kernel that does not
 * know a number answers -ENOTTY.
 */
enum farpass_cmd {
	FARPASS_CMD_VERSION		= 0,	/* negotiate; must come first on every open file */
	FARPASS_CMD_ANNOUNCE_DEVICE	= 1,	/* borrower: a remote device becomes an mdev type */
	FARPASS_CMD_WITHDRAW_DEVICE	= 2,	/* borrower: the type goes away */
	FARPASS_CMD_UPCALL_GET		= 3,	/* take the next upcall request (FUSE model) */
	FARPASS_CMD_UPCALL_REPLY	= 4,	/* answer an upcall request */
	FARPASS_CMD_OUTBOUND_WINDOW	= 5,	/* lender: describe an NTB outbound window for mmap */
};

/* ------------------------------------------------------------------------------------- VERSION */

/*
 * FARPASS_IOCTL_VERSION: the agent states the API version it speaks. The kernel accepts exactly
 * FARPASS_API_VERSION; on any other value it fails with -EPROTONOSUPPORT and still writes its own
 * version into `version` (so the agent can report both). Repeating VERSION with the accepted version
 * is a no-op; a failed VERSION after a successful one leaves the negotiated version in effect.
 */
struct farpass_version {
	__u32 argsz;
	__u32 flags;		/* in: 0 */
	__u32 version;		/* in: the agent's FARPASS_API_VERSION; out: the kernel's */
	__u32 max_devices;	/* out: FARPASS_MAX_DEVICES of this kernel */
	__u64 features;		/* out: FARPASS_FEAT_* the kernel serves */
};

#define FARPASS_FEAT_BORROWER	(1ULL << 0)	/* ANNOUNCE/WITHDRAW: mdev types */
#define FARPASS_FEAT_UPCALLS	(1ULL << 1)	/* UPCALL_GET/REPLY are served */
#define FARPASS_FEAT_OUTBOUND	(1ULL << 2)	/* OUTBOUND_WINDOW and mmap of /dev/farpass */

/* ----------------------------------------------------------------------------- ANNOUNCE_DEVICE */

struct farpass_bar {
	__u64 size;		/* bytes, 0 = BAR not implemented; a power of two otherwise */
	__u32 flags;		/* FARPASS_BAR_* */
	__u32 pad;		/* must be 0 */
};

#define FARPASS_BAR_IO		(1U << 0)	/* I/O space (cannot be passed through; shown, not mapped) */
#define FARPASS_BAR_MEM64	(1U << 1)	/* 64-bit memory BAR: the next BAR is its upper half (size 0) */
#define FARPASS_BAR_PREFETCH	(1U << 2)

/*
 * FARPASS_IOCTL_ANNOUNCE_DEVICE: a device that a lender reached through the NTB `ntb` offers. The kernel
 * adds an mdev type "<ntb driver>-farpass-<lender>-<device_id>" to the parent on that NTB's PCI device
 * (/sys/class/mdev_bus/<ntb>/mdev_supported_types/). The device id is chosen by the agent, unique on
 * this host (the same id on every borrower keeps type names, hence libvirt XML, valid across hosts).
 * Devices are per host, not per open file: they survive the agent closing /dev/farpass.
 * If an mdev instance exists on that NTB, the type cannot be added at once (Linux 6.1 registers an
 * mdev parent's types in one go); the call succeeds with FARPASS_ANNOUNCE_F_PENDING set in `flags`
 * and the type appears when the link's last instance is removed.
 */
struct farpass_announce {
	__u32 argsz;
	__u32 flags;		/* in: 0; out: FARPASS_ANNOUNCE_F_* */
	__u32 device_id;	/* < 2^31, unique on this host */
	__u16 vendor;		/* PCI IDs of the remote device */
	__u16 device;
	__u16 subsystem_vendor;
	__u16 subsystem_device;
	__u32 class_code;	/* base << 16 | sub << 8 | prog-if */
	__u8  revision;
	__u8  pad0[7];		/* must be 0 */
	char  lender[FARPASS_NAME_LEN];	/* the lender's host name: [A-Za-z0-9._]{1,31}, no '-' */
	char  lender_addr[FARPASS_NAME_LEN];	/* the device's PCI name on the lender (informative) */
	char  ntb[FARPASS_NAME_LEN];	/* PCI name of this host's NTB to that lender, "0000:00:0a.0" */
	struct farpass_bar bars[FARPASS_NUM_BARS];
};

#define FARPASS_ANNOUNCE_F_PENDING	(1U << 0)	/* out: type deferred until the link has no instance */

/* ----------------------------------------------------------------------------- WITHDRAW_DEVICE */

/*
 * FARPASS_IOCTL_WITHDRAW_DEVICE: the announced device goes away and so does its mdev type. Fails with
 * -EBUSY while an mdev instance of the type exists (remove it first: mdevctl stop / echo 1 > remove),
 * -ENOENT for an unknown id. If instances of OTHER devices exist on the same NTB the type stays
 * (with no available instance) until they are gone: FARPASS_WITHDRAW_F_PENDING is set in `flags`.
 */
struct farpass_withdraw {
	__u32 argsz;
	__u32 flags;		/* in: 0 */
	__u32 device_id;
	__u32 pad;		/* must be 0 */
};

#define FARPASS_WITHDRAW_F_PENDING	(1U << 0)	/* out: type removed when the link has no instance */

/* --------------------------------------------------------------------------------- upcall queue */

/*
 * Upcalls (FARPASS_FEAT_UPCALLS). The kernel queues requests (e.g. "borrow device N now", a config-space
 * access to forward to the lender); the agent takes them with UPCALL_GET and answers each with
 * UPCALL_REPLY carrying the same `seq`. Requests are per host: any open /dev/farpass file may take
 * them and any may reply (by seq).
 *
 * UPCALL_GET waits for a request: forever (wait_ms 0), at most wait_ms (then -ETIMEDOUT), or not at all
 * (FARPASS_UPCALL_GET_F_NONBLOCK or an O_NONBLOCK file: -EAGAIN when none is queued). A signal ends the
 * wait with -EINTR. poll(2) reports POLLIN while a request is queued.
 *
 * Every request has a deadline (module parameter upcall_timeout_ms, default 2000): when it passes
 * without a reply, the kernel completes the request itself with -ETIMEDOUT and treats the device as
 * surprise-removed (config reads return all-ones, other accesses fail at once, the VFIO error eventfd
 * is signalled); a late reply fails with -ENOENT. Requests taken by a file that is closed fail with
 * -ENOTCONN (so do all queued ones when the last file is closed, and new ones while no file is open):
 * the device is surprise-removed too. A reply with error != 0 fails only that access.
 */
enum farpass_upcall_op {
	FARPASS_UPCALL_NONE		= 0,
	FARPASS_UPCALL_BORROW		= 1,	/* args[0] = instance number: the guest enabled bus mastering;
						 * borrow device_id now (reply error: the enable is dropped) */
	FARPASS_UPCALL_RETURN		= 2,	/* args[0] = instance number: give device_id back to its lender
						 * (it resets it); bus master cleared, reset, or closed */
	FARPASS_UPCALL_CFG_READ		= 3,	/* args[0] = offset, args[1] = size (1, 2, 4, naturally
						 * aligned); reply data[0] = the value (little-endian as read) */
	FARPASS_UPCALL_CFG_WRITE	= 4,	/* args[0] = offset, args[1] = size, args[2] = value */
	FARPASS_UPCALL_RESET		= 5,	/* args[0] = instance number: function-level reset of device_id
						 * on the lender (VFIO_DEVICE_RESET) */
};

struct farpass_upcall_req {
	__u32 argsz;
	__u32 flags;		/* in: FARPASS_UPCALL_GET_F_* */
	__u64 seq;		/* out: request number (never 0), echoed in the reply */
	__u32 op;		/* out: enum farpass_upcall_op */
	__u32 device_id;	/* out */
	__u32 timeout_ms;	/* out: time left to reply when the request was taken */
	__u32 wait_ms;		/* in: how long to wait for a request, 0 = until one comes (was `pad`,
				 * which had to be 0: the same meaning for older agents) */
	__u64 args[6];		/* out: per op */
};

#define FARPASS_UPCALL_GET_F_NONBLOCK	(1U << 0)	/* in: -EAGAIN at once if no request is queued */

struct farpass_upcall_reply {
	__u32 argsz;
	__u32 flags;		/* in: 0 */
	__u64 seq;		/* in: the request's seq */
	__s32 error;		/* in: 0 or a negative errno >= -4095 (the request failed on the agent's side) */
	__u32 pad;		/* must be 0 */
	__u64 data[6];		/* in: per op, e.g. data[0] = value read */
};

/* ----------------------------------------------------------------------------- OUTBOUND_WINDOW */

/*
 * FARPASS_IOCTL_OUTBOUND_WINDOW (FARPASS_FEAT_OUTBOUND, lender role): describe outbound memory window
 * `mw` of this host's NTB `ntb` (accesses to it reach the peer, which executes them as DMA at its
 * inbound translation). The agent then maps it with
 *	mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset + start)
 * (start and len page-aligned, start + len <= size) and hands that range to VFIO_IOMMU_MAP_DMA.
 * `offset` is a cookie (needs a 64-bit off_t), stable while the NTB stays bound to farpass. The window
 * is write-combining if it is a prefetchable BAR of the NTB, uncached otherwise. Only the NTB link
 * (ntb_link_is_up) must be up, both here and at mmap time: the peer need not run farpass.ko.
 * Errors: ENODEV no such NTB (or it is going away), ENOENT mw >= the NTB's window count (still writes
 * `count`), ENOLINK the link is down, EINVAL flags/pad. mmap: EINVAL unknown cookie, range outside the
 * window or not MAP_SHARED, ENOLINK link down, ENODEV NTB gone. When the NTB leaves farpass (driver
 * unbound, device removed) every mapping of its windows is torn down: later accesses get SIGBUS.
 */
struct farpass_outbound_window {
	__u32 argsz;
	__u32 flags;		/* in: 0 */
	char  ntb[FARPASS_NAME_LEN];	/* in: PCI name of this host's NTB, "0000:00:0a.0" */
	__u32 mw;		/* in: window index, 0 .. count - 1 */
	__u32 count;		/* out: the NTB's number of outbound windows towards its peer */
	__u64 size;		/* out: bytes of window `mw` that can be mapped (a multiple of the page size) */
	__u64 offset;		/* out: mmap offset cookie of window `mw` */
};

/* ----------------------------------------------------------------------------------------- ioctls */

#define FARPASS_IOCTL_VERSION \
	_IOWR(FARPASS_IOCTL_TYPE, FARPASS_CMD_VERSION, struct farpass_version)
#define FARPASS_IOCTL_ANNOUNCE_DEVICE \
	_IOWR(FARPASS_IOCTL_TYPE, FARPASS_CMD_ANNOUNCE_DEVICE, struct farpass_announce)
#define FARPASS_IOCTL_WITHDRAW_DEVICE \
	_IOWR(FARPASS_IOCTL_TYPE, FARPASS_CMD_WITHDRAW_DEVICE, struct farpass_withdraw)
#define FARPASS_IOCTL_UPCALL_GET \
	_IOWR(FARPASS_IOCTL_TYPE, FARPASS_CMD_UPCALL_GET, struct farpass_upcall_req)
#define FARPASS_IOCTL_UPCALL_REPLY \
	_IOWR(FARPASS_IOCTL_TYPE, FARPASS_CMD_UPCALL_REPLY, struct farpass_upcall_reply)
#define FARPASS_IOCTL_OUTBOUND_WINDOW \
	_IOWR(FARPASS_IOCTL_TYPE, FARPASS_CMD_OUTBOUND_WINDOW, struct farpass_outbound_window)

#endif /* _UAPI_FARPASS_H */
