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

#define FARPASS_API_VERSION	4		/* bumped on any incompatible change (2: BAR window
						 * offsets and irq_slot in ANNOUNCE; 3: one mdev type
						 * per slot, no deferred ANNOUNCE/WITHDRAW; 4: peer BAR
						 * slots in DMA_LAYOUT, 16 slots) */
#define FARPASS_DEV_PATH	"/dev/farpass"
#define FARPASS_IOCTL_TYPE	'F'

#define FARPASS_NAME_LEN	32		/* lender names and PCI names, NUL included */
#define FARPASS_NUM_BARS	6
#define FARPASS_IRQ_SLOTS	16		/* lent devices per link: interrupt slots, mdev types */
#define FARPASS_IRQ_VECTORS	2048		/* vectors per device (MSI-X's maximum) */
#define FARPASS_DMA_SLOTS	16		/* guest RAM ranges and peer BARs per DMA window layout */
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
	FARPASS_CMD_DMA_LAYOUT		= 6,	/* borrower: the DMA window layout of a borrowed device */
	FARPASS_CMD_BAR_MAP		= 7,	/* lender: expose (or hide) a device BAR in a link's BAR window */
	FARPASS_CMD_IRQ_BRIDGE		= 8,	/* lender: relay a device's interrupt eventfds over a link */
	FARPASS_CMD_LINK_STATUS		= 9,	/* is a link up, and since when is it down */
	FARPASS_CMD_REVOKE_DEVICE	= 10,	/* borrower: the lender ended the lease; unplug the instance */
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
#define FARPASS_FEAT_DATA_PATH	(1ULL << 3)	/* DMA_LAYOUT, BAR_MAP, IRQ_BRIDGE: BAR and DMA windows and
						 * the interrupt bridge (the NTB has an IOMMU domain) */
#define FARPASS_FEAT_LINK_STATUS (1ULL << 4)	/* LINK_STATUS and REVOKE_DEVICE */

/* ----------------------------------------------------------------------------- ANNOUNCE_DEVICE */

/*
 * The link's BAR window: the lender exposes each lent device's memory BARs at fixed offsets of the
 * inbound window FARPASS_MW_BAR of its NTB (BAR_MAP, while a lease is held). The borrower maps its
 * outbound window FARPASS_MW_BAR + win_offset into the VFIO user (region mmap): accesses reach the
 * device with no software in between. The last page of the window is the interrupt bridge's.
 * The DMA window is the other one: the borrower maps a borrowing guest's RAM into its inbound window
 * FARPASS_MW_DMA (DMA_LAYOUT says where), the lender's VFIO container maps IOVA = guest-physical
 * address onto its outbound window FARPASS_MW_DMA (OUTBOUND_WINDOW) + that offset.
 */
#define FARPASS_MW_BAR		0
#define FARPASS_MW_DMA		1

struct farpass_bar {
	__u64 size;		/* bytes, 0 = BAR not implemented; a power of two otherwise */
	__u32 flags;		/* FARPASS_BAR_* */
	__u32 pad;		/* must be 0 */
	__u64 win_offset;	/* FARPASS_BAR_MAPPED: offset in the link's BAR window, aligned to
				 * min(size, 2 MiB) and at least to the page */
};

#define FARPASS_BAR_IO		(1U << 0)	/* I/O space (cannot be passed through; shown, not mapped) */
#define FARPASS_BAR_MEM64	(1U << 1)	/* 64-bit memory BAR: the next BAR is its upper half (size 0) */
#define FARPASS_BAR_PREFETCH	(1U << 2)
#define FARPASS_BAR_MAPPED	(1U << 3)	/* the lender places it at win_offset of the BAR window */

/*
 * FARPASS_IOCTL_ANNOUNCE_DEVICE: a device that a lender reached through the NTB `ntb` offers, at the
 * lender's slot `irq_slot`. The mdev parent on that NTB's PCI device has one mdev type per slot of the
 * lender at the link's other end, "<ntb driver>-farpass-<lender>-<slot>"
 * (/sys/class/mdev_bus/<ntb>/mdev_supported_types/), registered at the link's first ANNOUNCE and
 * constant while the NTB stays bound to farpass; the device fills its slot's type, usable at once,
 * whatever instances exist on the link. The lender keeps a device's slot while it lends it, the same
 * towards every borrower, so a type names the same device on every borrower (libvirt XML, cold
 * migration). The device id is chosen by the agent, unique on this host (upcalls name it).
 * Devices are per host, not per open file: they survive the agent closing /dev/farpass.
 * Errors (beyond the common ones): ENODEV no such NTB, EINVAL another lender than the link's first
 * ANNOUNCE named, EEXIST device_id already announced, EADDRINUSE the slot holds another device (or a
 * BAR window slot overlaps another device's), ENOSPC FARPASS_MAX_DEVICES announced.
 */
struct farpass_announce {
	__u32 argsz;
	__u32 flags;		/* in: 0 */
	__u32 device_id;	/* < 2^31, unique on this host */
	__u16 vendor;		/* PCI IDs of the remote device */
	__u16 device;
	__u16 subsystem_vendor;
	__u16 subsystem_device;
	__u32 class_code;	/* base << 16 | sub << 8 | prog-if */
	__u8  revision;
	__u8  pad0[3];		/* must be 0 */
	__u32 irq_slot;		/* the device's slot, < FARPASS_IRQ_SLOTS, unique per lender: its mdev
				 * type, and its slot in the link's interrupt mailbox (the lender's
				 * IRQ_BRIDGE uses the same) */
	char  lender[FARPASS_NAME_LEN];	/* the lender's host name: [A-Za-z0-9._]{1,31}, no '-' */
	char  lender_addr[FARPASS_NAME_LEN];	/* the device's PCI name on the lender (informative) */
	char  ntb[FARPASS_NAME_LEN];	/* PCI name of this host's NTB to that lender, "0000:00:0a.0" */
	struct farpass_bar bars[FARPASS_NUM_BARS];
};

/* ----------------------------------------------------------------------------- WITHDRAW_DEVICE */

/*
 * FARPASS_IOCTL_WITHDRAW_DEVICE: the announced device leaves its slot: the slot's type stays, empty (no
 * available instance, creating one fails with ENODEV), until the lender's next device at that slot is
 * announced. Instances of the link's other devices are not touched. Fails with -EBUSY while an mdev
 * instance of the device exists (remove it first: mdevctl stop / echo 1 > remove), -ENOENT for an
 * unknown id.
 */
struct farpass_withdraw {
	__u32 argsz;
	__u32 flags;		/* in: 0 */
	__u32 device_id;
	__u32 pad;		/* must be 0 */
};

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
	FARPASS_UPCALL_SET_IRQS		= 6,	/* args[0] = instance number, args[1] = VFIO IRQ index
						 * (VFIO_PCI_INTX/MSI/MSIX_IRQ_INDEX), args[2] = vectors to
						 * enable, 0 = disable: the lender arms that many vectors of the
						 * device and relays them (IRQ_BRIDGE) to irq_slot on this link.
						 * Only while borrowed; re-sent after each BORROW */
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

/* --------------------------------------------------------------------------------- DMA_LAYOUT */

/*
 * FARPASS_IOCTL_DMA_LAYOUT (FARPASS_FEAT_DATA_PATH, borrower role): where the guest RAM of the VFIO
 * user borrowing `device_id` sits in the link's DMA window. The kernel builds it at bus-master enable,
 * before the BORROW upcall (so the agent serving BORROW reads it here): it discovered the guest's RAM
 * ranges, pinned their pages and mapped them at window offsets in its NTB's IOMMU domain. A slot may
 * instead be a memory BAR of another farpass device of the same VFIO user reached over another link
 * (peer-to-peer: mapped onto that link's BAR window). The lender maps these slots with
 * VFIO_IOMMU_MAP_DMA: iova = gpa, vaddr = its outbound window FARPASS_MW_DMA mmap + offset, size
 * bytes. A slot with FARPASS_DMA_SLOT_F_LENDER_PEER is a memory BAR of a farpass device of the same
 * VFIO user on the same link (lent by the same lender), listed while that device's instance is open:
 * the lender maps iova = gpa onto BAR `peer_bar` of its device `peer_id` itself (no window, `offset` 0).
 * Errors: ENOENT unknown device, ENODATA no instance of it is borrowing (or being borrowed) now.
 */
#define FARPASS_DMA_SLOT_F_LENDER_PEER	(1U << 0)

struct farpass_dma_slot {
	__u64 gpa;		/* guest-physical address = the lender's IOVA */
	__u64 size;		/* bytes, page multiple */
	__u64 offset;		/* in the link's DMA window (the lender's outbound window FARPASS_MW_DMA) */
	__u32 flags;		/* FARPASS_DMA_SLOT_F_* */
	__u32 peer_id;		/* FARPASS_DMA_SLOT_F_LENDER_PEER: the peer device's farpass id */
	__u32 peer_bar;		/* FARPASS_DMA_SLOT_F_LENDER_PEER: its BAR, 0..5 */
	__u32 pad;		/* 0 */
};

struct farpass_dma_layout {
	__u32 argsz;
	__u32 flags;		/* in: 0 */
	__u32 device_id;	/* in */
	__u32 nr_slots;		/* out: valid entries of slots[] */
	__u64 pages_pinned;	/* out: guest pages pinned and mapped for this borrow */
	struct farpass_dma_slot slots[FARPASS_DMA_SLOTS];	/* out, ascending in gpa */
};

/* ------------------------------------------------------------------------------------- BAR_MAP */

/*
 * FARPASS_IOCTL_BAR_MAP (FARPASS_FEAT_DATA_PATH, lender role): make memory BAR `bar` of this host's PCI
 * device `pci` (bound to vfio-pci, i.e. lent) reachable from the peer of NTB `ntb` at `win_offset` of
 * that link's BAR window — an IOMMU mapping in the NTB's domain, so it exists only between BAR_MAP and
 * BAR_MAP with FARPASS_BAR_MAP_F_UNMAP (the lease). `size` bytes from the BAR's start (<= the BAR's
 * size, page multiple). Unmapping flushes the IOTLB before it returns: once it did, the borrower can
 * no longer reach the device. Mappings of a link are dropped when the NTB goes away.
 * Errors: ENODEV no such NTB or PCI device, EPERM the device is not bound to vfio-pci, EINVAL bad bar,
 * size, alignment, flags or pad, ERANGE outside the window (or on its last page), EEXIST overlaps a
 * mapping, ENOENT unmapping what is not mapped, EOPNOTSUPP no data path (FARPASS_FEAT_DATA_PATH unset).
 */
struct farpass_bar_map {
	__u32 argsz;
	__u32 flags;		/* in: FARPASS_BAR_MAP_F_* */
	char  ntb[FARPASS_NAME_LEN];	/* in: this host's NTB towards the borrower */
	char  pci[FARPASS_NAME_LEN];	/* in: the lent device, "0000:00:08.0" */
	__u32 bar;		/* in: 0..5, a memory BAR */
	__u32 pad;		/* must be 0 */
	__u64 win_offset;	/* in: as announced (struct farpass_bar) */
	__u64 size;		/* in */
};

#define FARPASS_BAR_MAP_F_UNMAP	(1U << 0)

/* ---------------------------------------------------------------------------------- IRQ_BRIDGE */

/*
 * FARPASS_IOCTL_IRQ_BRIDGE (FARPASS_FEAT_DATA_PATH, lender role): relay eventfds to the borrower on
 * NTB `ntb`: from now on, each time fds[i] is signalled (the agent gave the same fd to the device's
 * VFIO_DEVICE_SET_IRQS), the kernel posts (irq_slot, start + i) into the link's interrupt mailbox and
 * rings the peer's doorbell, from the eventfd's wake-up, with no userspace in the path. fds[i] = -1
 * stops relaying that vector. FARPASS_IRQ_BRIDGE_F_CLEAR (count 0) stops every vector of the slot
 * and drops its unmask eventfd.
 * FARPASS_IRQ_BRIDGE_F_UNMASK (start 0, count 1, not with F_CLEAR): fds[0] becomes the
 * slot's INTx unmask eventfd (-1: none), the one the agent gave the device's VFIO_DEVICE_SET_IRQS
 * (VFIO_IRQ_SET_ACTION_UNMASK): the kernel signals it at each unmask the borrower on `ntb` sends for
 * this slot (its guest handled the level-triggered interrupt that vfio-pci automasked).
 * The kernel holds its own references: the agent may close its fds afterwards.
 * argsz = sizeof(struct farpass_irq_bridge) + count * sizeof(__s32).
 * Errors: ENODEV no such NTB, EINVAL slot >= FARPASS_IRQ_SLOTS, start + count > FARPASS_IRQ_VECTORS,
 * argsz, flags or pad, F_UNMASK with start or count not 0 and 1, EBADF an fd that is not an eventfd,
 * EOPNOTSUPP no data path.
 */
struct farpass_irq_bridge {
	__u32 argsz;
	__u32 flags;		/* in: FARPASS_IRQ_BRIDGE_F_* */
	char  ntb[FARPASS_NAME_LEN];	/* in: this host's NTB towards the borrower */
	__u32 irq_slot;		/* in: as announced to the borrower */
	__u32 start;		/* in: first vector */
	__u32 count;		/* in: entries in fds[] */
	__u32 pad;		/* must be 0 */
	__s32 fds[];		/* in */
};

#define FARPASS_IRQ_BRIDGE_F_CLEAR	(1U << 0)
#define FARPASS_IRQ_BRIDGE_F_UNMASK	(1U << 1)

/* ---------------------------------------------------------------------------------- LINK_STATUS */

/*
 * FARPASS_IOCTL_LINK_STATUS (FARPASS_FEAT_LINK_STATUS): the state of the link of this host's NTB `ntb`.
 * `down_ms` is how long the link has been down (since the NTB was probed, if it never came up), 0 while
 * it is up: a lender ends the leases of a link down for longer than a lease, whatever the management
 * network says (docs/agent-protocol.md). Errors: ENODEV no such NTB (or it is going away), EINVAL
 * flags or pad.
 */
struct farpass_link_status {
	__u32 argsz;
	__u32 flags;		/* in: 0 */
	char  ntb[FARPASS_NAME_LEN];	/* in: PCI name of this host's NTB */
	__u32 state;		/* out: FARPASS_LINK_* */
	__u32 pad;		/* must be 0 */
	__u64 down_ms;		/* out */
};

#define FARPASS_LINK_UP		(1U << 0)	/* the NTB link is up */
#define FARPASS_LINK_PEER_OK	(1U << 1)	/* and the peer's farpass answered the handshake */

/* -------------------------------------------------------------------------------- REVOKE_DEVICE */

/*
 * FARPASS_IOCTL_REVOKE_DEVICE (FARPASS_FEAT_LINK_STATUS, borrower role): the lender ended the lease on
 * `device_id` behind the borrower's back (its link was down for a lease time: the device was reset there).
 * The device's instance is surprise-removed until its next open (config reads all-ones, other accesses
 * fail, no upcall but RETURN), without the error eventfd (which makes QEMU stop the VM): instead its VFIO
 * user is asked to release it through the request eventfd (QEMU unplugs it from the guest, which keeps
 * running). FARPASS_REVOKE_F_NO_REQUEST is set when the user registered none. Errors: ENOENT unknown
 * device, ENODATA it has no instance, EINVAL flags or pad.
 */
struct farpass_revoke {
	__u32 argsz;
	__u32 flags;		/* in: 0; out: FARPASS_REVOKE_F_* */
	__u32 device_id;
	__u32 pad;		/* must be 0 */
};

#define FARPASS_REVOKE_F_NO_REQUEST	(1U << 0)	/* out: no request eventfd to signal */

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
#define FARPASS_IOCTL_DMA_LAYOUT \
	_IOWR(FARPASS_IOCTL_TYPE, FARPASS_CMD_DMA_LAYOUT, struct farpass_dma_layout)
#define FARPASS_IOCTL_BAR_MAP \
	_IOWR(FARPASS_IOCTL_TYPE, FARPASS_CMD_BAR_MAP, struct farpass_bar_map)
#define FARPASS_IOCTL_IRQ_BRIDGE \
	_IOWR(FARPASS_IOCTL_TYPE, FARPASS_CMD_IRQ_BRIDGE, struct farpass_irq_bridge)
#define FARPASS_IOCTL_LINK_STATUS \
	_IOWR(FARPASS_IOCTL_TYPE, FARPASS_CMD_LINK_STATUS, struct farpass_link_status)
#define FARPASS_IOCTL_REVOKE_DEVICE \
	_IOWR(FARPASS_IOCTL_TYPE, FARPASS_CMD_REVOKE_DEVICE, struct farpass_revoke)

#endif /* _UAPI_FARPASS_H */
