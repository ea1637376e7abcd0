// farpass-client: a test client for /dev/farpass and farpass mdevs, acting as the agent (and, for
// `vfio-info`, as QEMU does). One action per run; prints "ok ..." or "err ENAME (N)" and exits 0 when
// the outcome is the one --expect names (default: ok), 1 otherwise, 2 on usage errors.
//
//   farpass-client version [--api N] [--argsz N]
//   farpass-client announce --id N --lender NAME --ntb PCI [--addr PCI] [--vendor X] [--device X]
//                  [--class X] [--bar0 SIZE] [--argsz N] [--flags N] [--tail N [--tail-byte X]]
//                  [--no-version] [--bar0-win OFFSET (FARPASS_BAR_MAPPED)] [--irq-slot N]
//   farpass-client withdraw --id N [--no-version]
//   farpass-client open                                   (just open /dev/farpass)
//   farpass-client unknown-ioctl                          (after VERSION: an unknown command number)
//   farpass-client upcall-get [--nonblock] [--wait-ms N]  (one UPCALL_GET, no reply)
//   farpass-client upcall-reply --seq N [--error E] [--flags N]
//   farpass-client agent [--log FILE] [--delay-ms N] [--msix-table X] [--ignore OP,...]  (serve upcalls until
//                  killed: poll(2), then UPCALL_GET non-blocking; CFG_READ/WRITE on a fake lender's config
//                  space, an NVMe-like device 1b36:0010 with PM, VPD, MSI-X, AF, PCIe, MSI; one log line per
//                  request; --delay-ms: answer that late; --msix-table X: the MSI-X table register, default
//                  0x2000 (BAR0 at 0x2000); --ignore: requests of these ops (RETURN, RESET, ...) are
//                  logged and never answered)
//   farpass-client vfio-bar UUID [--borrow] [--offset X] [--write V] [--len N] [--mmap] [--lease]
//                  [--cfg-offset X]  (--borrow: bus master on first, off last: "bm_on= ... bm_off=";
//                  BAR0's region as QEMU's trapped accesses: a 4-byte pwrite of V at X if asked, then a
//                  pread of N bytes (default 4) at X: "wrote=ok|ENAME read=BYTES|ENAME value=FIRST-WORD";
//                  --mmap: then mmap of BAR0's first page and its word 0: "mmap=ok|ENAME mmio0="; --lease:
//                  instead its word 0 read
//                  before bus master, with it on (BORROW) and after it is off (RETURN): "idle=
//                  bm_on= leased= bm_off= returned="; --cfg-offset: a 4-byte pread of the config region
//                  at X: "cfg_read=BYTES|ENAME")
//   farpass-client vfio-info UUID [--hold S]              (VFIO group/container/device, GET_INFO;
//                                                          keep it open S seconds)
//   farpass-client vfio-cfg UUID                          (as QEMU: config region info, vendor/device,
//                  BAR0 sizing, capability chain, bus master on/off, VFIO_DEVICE_RESET, ERR and REQ
//                  eventfds: "err_irq=0|1 req_irq=0|1", whether each fired)
//   farpass-client vfio-dead UUID                         (the device must read as surprise-removed:
//                  all-ones, writes and reset fail with ENODEV, the ERR eventfd fired)
//   farpass-client link-status --ntb PCI                  (LINK_STATUS: "up=0|1 peer_ok=0|1 down_ms=N")
//   farpass-client window --ntb PCI [--mw N]             (OUTBOUND_WINDOW: count, size, mmap cookie;
//                  then mmap it whole and munmap; --mmap-extra N: N bytes more than the window;
//                  --hold-until FILE: read its first word, wait until FILE exists, read it again: prints
//                  "sigbus" and exits 3 if that faults, as after the NTB left farpass;
//                  --split: map the window's first two pages, unmap the first, and print the first
//                  words of the remaining page and of pages 0 and 1 mapped alone: "split=X page0=Y page1=Z")
//   farpass-client vfio-dma UUID --id N --dir DIR [--seed-base B]  (the borrower's DMA window, as QEMU would: two
//                  2 MiB zeroed buffers VFIO_IOMMU_MAP_DMA'd at IOVA 1 MiB and 4 GiB (the latter in two
//                  1 MiB mappings), bus master on
//                  (BORROW), DMA_LAYOUT printed ("layout ..."); then, each step after DIR/goN appears
//                  (at most 300 s): go1 count the pages holding window-stamp's words (seeds B+1, B+2),
//                  VFIO_IOMMU_UNMAP_DMA the high buffer's upper half; go2 count again (B+3 low; B+2, B+4 high) and
//                  compare the low buffer's page 1 with edu-dma's pattern --edu-seed S,
//                  bus master off (RETURN); go3 close)
//   farpass-client vfio-huge UUID --id N --dir DIR [--seed-base B]  (the DMA window over hugetlb pages, as
//                  QEMU with hugetlbfs guest RAM: two 2 MiB huge pages VFIO_IOMMU_MAP_DMA'd at IOVA 4 GiB, the
//                  first in two 1 MiB mappings; bus master on, "borrowed pinned= held= locked_kb= slot=GPA:SIZE:OFF"
//                  (held: debugfs dma_held_pages; locked_kb: growth of VmLck since before the open); then after
//                  DIR/goN (at most 300 s): go1 count window-stamp's pages of seed B+1, VFIO_IOMMU_UNMAP_DMA the
//                  first huge page's upper half, print "unmapped found= pinned_at_once= pinned= held= locked_kb="
//                  (pinned once the kernel pinned back the lower half, at most 10 s); go2 count seed B+2 in the
//                  lower half and B+3 in the second huge page, bus master off (RETURN), print "after lower= second=
//                  off= pinned= held= locked_kb="; go3 close)
//   farpass-client vfio-borrow UUID --id N [--mb M] [--open-at FILE] [--when-unpinning | --borrow-at FILE]
//                  [--hold-until FILE] [--then off|reset]
//                  (M MiB (default 2) VFIO_IOMMU_MAP_DMA'd at IOVA 1 MiB before the first config access, as
//                  QEMU maps guest RAM: staged then (docs/mdev.md); with --open-at, its pages faulted in, print
//                  "faulted" and wait until FILE exists (at most 300 s) before opening the device; with
//                  --when-unpinning, print "ready", wait until the debugfs pinned_pages counter falls below its
//                  value then (another window's teardown is unpinning, its IOMMU mappings gone: 1 ms polls); with
//                  --borrow-at,
//                  print "ready", wait until FILE exists (at most 300 s); bus master on (BORROW), DMA_LAYOUT:
//                  "bm_on= bm_ms= pinned_all=(debugfs pinned_pages counter then) offset=SLOT0'S-WINDOW-OFFSET
//                  pinned= charged=(growth of the cgroup's memory.current from before the device's open to after
//                  bus master on, its buffer's pages already charged, bytes; -1: no cgroup v2)"
//                  (with --hold-until also at once, as
//                  "borrowed ..."); then (once FILE exists, at most 300 s) bus
//                  master off (RETURN) or VFIO_DEVICE_RESET: "then= then_ms="; then close; the buffer's
//                  pages are physically apart, one IOMMU mapping each)
//   farpass-client vfio-cfg-flood UUID [--procs N] [--ms T] [--offset X]  (N processes (16) read 2 bytes
//                  of the config region at X (6) for T ms (5000), as a hostile VFIO user: "reads= busy=
//                  other=", EBUSY and other errors counted)
//   farpass-client vfio-two UUID1 UUID2 --id1 N --id2 N [--mb M] [--rounds R] [--gap-ms G]  (both mdevs in
//                  one container, as QEMU with two devices: M (64) MiB mapped at IOVA 1 MiB, pages apart,
//                  both borrowed; then R (20) times the mapping unmapped and mapped again (as QEMU re-splits
//                  a RAM section), G (30) ms apart; then (at most 60 s) until both windows are whole
//                  again; bus master off: "pinned1= pinned2= off1= off2=")
//   farpass-client fuzz UUID [--seed S] [--ms T]  (a hostile VFIO user, seeded, for T (30000) ms: random
//                  config and region reads/writes (any index, offset, size), GET_REGION_INFO, GET_IRQ_INFO,
//                  SET_IRQS (any index, flags, range, eventfd or not), RESET, mmap of any region offset,
//                  bus master toggles (borrows), unmaps and re-maps of its 4 MiB of RAM, and on /dev/farpass
//                  VERSION, DMA_LAYOUT and unknown commands with random bytes; then close:
//                  "ops= failed=")
//   farpass-client dma-layout --id N                      (DMA_LAYOUT: "nr=N pinned=P offsets=WINDOW-OFFSET,...
//                  slots=GPA+SIZE,...")
//   farpass-client window-stamp --ntb PCI --offset X --size N --seed S [--mw N]
//                  (lender: one 64-bit stamp at the start of each page of [X, X + N) of the outbound
//                  window, then a read over the link so that the posted writes were executed)
//   farpass-client vfio-irq UUID [--dir DIR] [--write1 X] [--trap0 1]  (BAR0 region info and sparse
//                  areas; mmap of the MSI-X page, across it and past the BAR refused; the area before
//                  it mmapped, and once borrowed: word 0 read, word 1 written with X and read; a trapped
//                  read of the MSI-X page (and with --trap0 of word 0); IRQ info; SET_IRQS MSI-X around a
//                  borrow, MSI refused while MSI-X is on, MASK ENOTTY, a local trigger fires; --dir:
//                  then print "armed", wait for DIR/go-irq and count each vector's eventfd: "bridged=")
//   farpass-client nvme-p2p --mdev UUID --peer UUID --dump FILE [--lba L] [--dst-lba D] [--peer-lba P]
//                  [--cmb-iova X] [--peer-last] [--timeout-ms N]
//                  (peer-to-peer as a guest does it: both mdevs in one container, 2 MiB of RAM each at IOVA
//                  1 MiB and 4 GiB, the peer's BAR2 (a controller memory buffer) placed at X (64 GiB) and its
//                  mmap VFIO_IOMMU_MAP_DMA'd there as QEMU does, the peer then the first borrowed (with
//                  --peer-last the other way round); polled NVMe queues on each: the first reads 4 KiB at
//                  LBA L (0) into the CMB at X + 4 KiB, the page goes to FILE, the first writes it from the
//                  CMB to its LBA D (8), the peer, its CMB enabled at X (CMBMSC), writes it from there to
//                  its LBA P (0): "read=STATUS write=STATUS peer_write=STATUS cmb=BAR2-SIZE
//                  peers=(debugfs dma_peers once both are borrowed) lender_peers=(dma_lender_peers then)
//                  peers_closed=, lender_peers_closed=(the same once the peer is closed, as at its
//                  hot-unplug, the first still borrowed)")
//   farpass-client nvme-identify (--group /dev/vfio/N --dev PCI | --mdev UUID) [--nsze N] [--low X]
//                  [--high X] [--timeout-ms N] [--no-mmap] [--hold-until FILE [--again]] [--return] [--reset]
//                  [--devctl V] [--devctl2 V]
//                  (as QEMU and a guest's NVMe driver: type1 container, BAR0 mmapped where VFIO allows it
//                  (sparse areas; --no-mmap: none, as QEMU's x-no-mmap) and pread/pwrite elsewhere, two
//                  2 MiB buffers mapped at IOVA --low (1 MiB) and --high (4 GiB), memory space + bus
//                  master, MSI-X enabled and vector 0 on an eventfd, the admin queues (SQ0 low, CQ0 high),
//                  Identify Controller into the low buffer and Identify Namespace 1 into the high one,
//                  each waited for on its completion and its interrupt; ok if both succeed, VID = the
//                  config space's vendor, the model is "QEMU NVMe Ctrl...", NSZE = --nsze, irqs >= 2.
//                  --devctl/--devctl2: before bus master (so before a borrow) write V to PCIe Device Control
//                  (2 bytes at cap + 8) / Device Control 2 (cap + 0x28) and read it back (devctl_write,
//                  devctl_pre, ...), read it again once identified (devctl_borrowed, ...).
//                  --hold-until: print "identified, holding: ..." and wait for FILE, then whether both
//                  buffers are byte for byte as when it began (held_ram=same|changed:IOVA,... of the first 8
//                  pages that differ) and read PCIe Device
//                  Control/Status (held_cfg); --again: then both Identify commands again, into the pages
//                  after the first ones, with the same checks (again=ok|bad|ENAME); --return: bus master off,
//                  then CSTS (return_csts);
//                  --reset: VFIO_DEVICE_RESET, then CSTS (reset_csts). --again-at F1,F2,...: once each file
//                  exists, both Identify commands again on the same admin queue, into zeroed pages, checked
//                  ("identified: ..." first, then "again N: ok|err ..."), before --hold-until.
//                  --hostile A,B,...: after the identify,
//                  Identify Controller with PRP1 at each address A, B, ... ("hostile=A:STATUS,..."), then
//                  whether the buffers are 0xa5 past the queue and identify data pages ("canary=ok|bad").
//                  Every wait is bounded: --timeout-ms, default 10000, counted in 1 ms polls.)
//   farpass-client pattern --seed N                       (the 4 KiB pattern of edu-dma, to stdout)
//   farpass-client edu-dma PCI --ntb PCI --iova X --seed N [--mw N] [--unmapped] [--win-offset X]
//                  (the lender agent's DMA path, with QEMU's edu device bound to vfio-pci at PCI: a type1
//                  container, the NTB's outbound window mmapped through /dev/farpass, VFIO_IOMMU_MAP_DMA
//                  of IOVA X onto its first 4 KiB (or those at --win-offset); then edu copies the seed's pattern from a local buffer
//                  (mapped at another IOVA) into its own buffer and from there to IOVA X, i.e. to the
//                  peer. --unmapped: VFIO_IOMMU_UNMAP_DMA of X before the DMA to it (it must fault).)
//   farpass-client window-rw --ntb PCI --mw N --offset X [--write V]
//                  (one 32-bit word at X of outbound window N, through the mmap: write V first if asked,
//                  then read: "value=0x...")
//   farpass-client bar-map --ntb PCI --pci PCI --bar N --offset X --size S [--unmap] [--flags N]
//                  (BAR_MAP of BAR N of PCI at X of the link's BAR window, or its unmap)
//   farpass-client irq-bridge --ntb PCI --slot S --start V --count N [--signal K] [--clear] [--bad-fd]
//                  (IRQ_BRIDGE: N new eventfds for vectors V.., then write each of them K times, round
//                  by round; --clear: FARPASS_IRQ_BRIDGE_F_CLEAR of the slot (count 0); --bad-fd: the
//                  last fd is /dev/null's. The fds are closed at exit: the kernel keeps its references.)
//   farpass-client irq-unmask --ntb PCI --slot S --dir DIR [--count N] [--start V] [--with-clear]
//                  (lender: IRQ_BRIDGE F_UNMASK of a new eventfd for slot S, as the agent does for a lent
//                  device's INTx (--count, --start, --with-clear F_CLEAR: a malformed call, for its error);
//                  print "ready", wait for DIR/go-count, then "unmasks=N" (what the eventfd got), then
//                  F_UNMASK with -1: "cleared=ok|ENAME")
//   farpass-client vfio-intx UUID --dir DIR  (as QEMU without KVM with a device's INTx: IRQ info of INTx
//                  ("info=COUNT/FLAGS", flags m maskable, a automasked, r noresize), UNMASK before INTx is
//                  on (EINVAL), the trigger eventfd set before the borrow, bus master on; "armed", wait for
//                  DIR/go1; read the trigger ("fired1=N"), UNMASK twice (DATA_NONE), an unmask eventfd set
//                  (ACTION_UNMASK DATA_EVENTFD), MASK with DATA_EVENTFD (ENOTTY); "armed2", wait for DIR/go2;
//                  read the trigger ("fired2=N"), signal the unmask eventfd; INTx off, bus master off)
//   farpass-client mbox-garbage --ntb PCI --slot S [--count K] [--gap-ms M]  (lender, as a broken peer:
//                  K (40) times, M (50) ms apart, a garbage HEAD (2^30 + k * 2^16) into the peer's interrupt
//                  mailbox through outbound window FARPASS_MW_DMA, then a post of slot S vector 0 through a
//                  fresh IRQ_BRIDGE eventfd, which rings the doorbell; the slot is cleared at the end.
//                  Our producer writes HEAD itself unless it sees the ring full: "heads=K")
// All: [--expect ok|ENAME] [--dev PATH]
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <linux/vfio.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <time.h>
#include <map>
#include <optional>
#include <utility>
#include <array>
#include <string>
#include <random>
#include <string_view>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "uapi/farpass.h"

namespace {

struct Args {
	std::string action;
	std::vector<std::string> positional;
	std::map<std::string, std::string> opt;
	bool has(const std::string &k) const { return opt.contains(k); }
	std::string str(const std::string &k, const std::string &def = "") const
	{
		auto it = opt.find(k);
		return it == opt.end() ? def : it->second;
	}
	unsigned long long num(const std::string &k, unsigned long long def) const
	{
		auto it = opt.find(k);
		return it == opt.end() ? def : std::strtoull(it->second.c_str(), nullptr, 0);
	}
};

// The outcome of the action: 0 or an errno.
int finish(const Args &a, int err, const std::string &detail)
{
	std::string got = err ? std::string(strerrorname_np(err)) : "ok";
	if (err)
		std::printf("err %s (%d)%s%s\n", got.c_str(), err, detail.empty() ? "" : ": ", detail.c_str());
	else
		std::printf("ok%s%s\n", detail.empty() ? "" : " ", detail.c_str());
	std::string want = a.str("expect", "ok");
	if (got != want) {
		std::printf("FAIL: expected %s\n", want.c_str());
		return 1;
	}
	return 0;
}

void copy_name(char (&dst)[FARPASS_NAME_LEN], const std::string &s)
{
	std::memset(dst, 0, sizeof(dst));
	std::memcpy(dst, s.data(), std::min(s.size(), sizeof(dst)));	// may be unterminated on purpose
}

int negotiate(int fd, const Args &a)
{
	if (a.has("no-version"))
		return 0;
	farpass_version v{};
	v.argsz = sizeof(v);
	v.version = FARPASS_API_VERSION;
	return ioctl(fd, FARPASS_IOCTL_VERSION, &v) ? errno : 0;
}

// A VFIO device opened as QEMU does (6.1: group + type1 container; no device cdev yet).
struct Vfio {
	int container = -1, group = -1, dev = -1;
	~Vfio()
	{
		for (int fd : {dev, group, container})
			if (fd >= 0)
				close(fd);
	}
};

// The device NAME of the VFIO group at GPATH (/dev/vfio/N): 0 or an errno; *what says which step failed.
// The IOMMU as QEMU picks it: type1v2 if the container has it, else type1.
int vfio_open_group(const std::string &gpath, const std::string &name, Vfio &v, std::string &what)
{
	if ((v.container = open("/dev/vfio/vfio", O_RDWR | O_CLOEXEC)) < 0)
		return what = "/dev/vfio/vfio", errno;
	if ((v.group = open(gpath.c_str(), O_RDWR | O_CLOEXEC)) < 0)
		return what = gpath, errno;
	vfio_group_status st{};
	st.argsz = sizeof(st);
	if (ioctl(v.group, VFIO_GROUP_GET_STATUS, &st) || !(st.flags & VFIO_GROUP_FLAGS_VIABLE))
		return what = "group not viable", errno ? errno : EINVAL;
	if (ioctl(v.group, VFIO_GROUP_SET_CONTAINER, &v.container))
		return what = "VFIO_GROUP_SET_CONTAINER", errno;
	int type = ioctl(v.container, VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU) > 0 ? VFIO_TYPE1v2_IOMMU
									    : VFIO_TYPE1_IOMMU;
	if (ioctl(v.container, VFIO_SET_IOMMU, type))
		return what = "VFIO_SET_IOMMU", errno;
	if ((v.dev = ioctl(v.group, VFIO_GROUP_GET_DEVICE_FD, name.c_str())) < 0)
		return what = "VFIO_GROUP_GET_DEVICE_FD", errno;
	return 0;
}

// The VFIO group file of the mdev UUID, from sysfs: 0 or ENOENT (and *what).
int mdev_group_path(const std::string &uuid, std::string &path, std::string &what)
{
	std::error_code ec;
	auto grp = std::filesystem::read_symlink("/sys/bus/mdev/devices/" + uuid + "/iommu_group", ec);
	if (ec)
		return what = "no iommu_group for " + uuid, ENOENT;
	path = "/dev/vfio/" + grp.filename().string();
	return 0;
}

// The mdev UUID: its group from sysfs, the device named by the UUID.
int vfio_open(const std::string &uuid, Vfio &v, std::string &what)
{
	std::string path;
	if (int err = mdev_group_path(uuid, path, what))
		return err;
	return vfio_open_group(path, uuid, v, what);
}

// The mdev UUID in CONTAINER, as QEMU puts a VM's devices in one (v.container stays -1: not ours).
int vfio_join(const std::string &uuid, int container, Vfio &v, std::string &what)
{
	std::string path;
	if (int err = mdev_group_path(uuid, path, what))
		return err;
	if ((v.group = open(path.c_str(), O_RDWR | O_CLOEXEC)) < 0)
		return what = "second group", errno;
	if (ioctl(v.group, VFIO_GROUP_SET_CONTAINER, &container))
		return what = "second VFIO_GROUP_SET_CONTAINER", errno;
	if ((v.dev = ioctl(v.group, VFIO_GROUP_GET_DEVICE_FD, uuid.c_str())) < 0)
		return what = "second VFIO_GROUP_GET_DEVICE_FD", errno;
	return 0;
}

int run_vfio_info(const Args &a)
{
	if (a.positional.empty())
		return 2;
	Vfio v;
	std::string what;
	if (int err = vfio_open(a.positional[0], v, what))
		return finish(a, err, what);
	int dev = v.dev;
	vfio_device_info info{};
	info.argsz = sizeof(info);
	if (ioctl(dev, VFIO_DEVICE_GET_INFO, &info))
		return finish(a, errno, "VFIO_DEVICE_GET_INFO");
	char detail[256];
	std::snprintf(detail, sizeof(detail), "flags=%#x pci=%d reset=%d regions=%u irqs=%u",
		      info.flags, !!(info.flags & VFIO_DEVICE_FLAGS_PCI), !!(info.flags & VFIO_DEVICE_FLAGS_RESET),
		      info.num_regions, info.num_irqs);
	bool good = (info.flags & VFIO_DEVICE_FLAGS_PCI) && (info.flags & VFIO_DEVICE_FLAGS_RESET);
	if (unsigned hold = static_cast<unsigned>(a.num("hold", 0)))
		sleep(hold);	// keep the device open, as a running VM would
	return finish(a, good ? 0 : EINVAL, detail);
}

// Config space through the VFIO config region, as QEMU's vfio_pci_read_config/write_config do.
struct Cfg {
	int dev;
	uint64_t base = 0;
	int read(uint32_t off, uint32_t size, uint32_t &val) const
	{
		val = 0;
		ssize_t n = pread(dev, &val, size, static_cast<off_t>(base + off));
		return n == static_cast<ssize_t>(size) ? 0 : n < 0 ? errno : EIO;
	}
	int write(uint32_t off, uint32_t size, uint32_t val) const
	{
		ssize_t n = pwrite(dev, &val, size, static_cast<off_t>(base + off));
		return n == static_cast<ssize_t>(size) ? 0 : n < 0 ? errno : EIO;
	}
};

double now_ms()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// VFIO_DEVICE_SET_IRQS of a new eventfd on vector 0 of INDEX; returns it (or -1).
int set_eventfd(int dev, uint32_t index)
{
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	alignas(vfio_irq_set) uint8_t buf[sizeof(vfio_irq_set) + sizeof(int32_t)] = {};
	auto *set = reinterpret_cast<vfio_irq_set *>(buf);
	set->argsz = sizeof(buf);
	set->flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
	set->index = index;
	set->start = 0;
	set->count = 1;
	int32_t fd32 = efd;
	std::memcpy(buf + sizeof(vfio_irq_set), &fd32, sizeof(fd32));
	if (ioctl(dev, VFIO_DEVICE_SET_IRQS, buf)) {
		close(efd);
		return -1;
	}
	return efd;
}

bool eventfd_fired(int efd)
{
	uint64_t n = 0;
	return efd >= 0 && ::read(efd, &n, sizeof(n)) == sizeof(n) && n > 0;
}

const char *ename(int err) { return err ? strerrorname_np(err) : "ok"; }

// GET_REGION_INFO of region INDEX of device DEV (without capabilities): 0 or the errno.
int region_info(int dev, uint32_t index, vfio_region_info &ri)
{
	ri = {};
	ri.argsz = sizeof(ri);
	ri.index = index;
	return ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, &ri) ? errno : 0;
}

int run_vfio_cfg(const Args &a, bool dead)
{
	if (a.positional.empty())
		return 2;
	Vfio v;
	std::string what;
	if (int err = vfio_open(a.positional[0], v, what))
		return finish(a, err, what);
	vfio_region_info ri;
	if (int err = region_info(v.dev, VFIO_PCI_CONFIG_REGION_INDEX, ri))
		return finish(a, err, "GET_REGION_INFO config");
	if (ri.size != 4096 || (ri.flags & 3) != (VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE))
		return finish(a, EINVAL, "config region size/flags");
	Cfg cfg{v.dev, ri.offset};
	int efd = set_eventfd(v.dev, VFIO_PCI_ERR_IRQ_INDEX);
	if (efd < 0)
		return finish(a, errno, "SET_IRQS ERR eventfd");
	int rfd = set_eventfd(v.dev, VFIO_PCI_REQ_IRQ_INDEX);
	if (rfd < 0)
		return finish(a, errno, "SET_IRQS REQ eventfd");
	char d[512];
	uint32_t id = 0;
	double t0 = now_ms();
	int err = cfg.read(0, 4, id);
	double ms = now_ms() - t0;
	if (err)
		return finish(a, err, "read vendor/device");

	if (dead) {
		// Surprise-removed: the whole header reads all-ones, writes and reset fail at once.
		std::array<uint8_t, 256> buf{};
		bool ones = pread(v.dev, buf.data(), buf.size(), static_cast<off_t>(ri.offset)) == 256;
		for (uint8_t b : buf)
			ones = ones && b == 0xff;
		double t1 = now_ms();
		int werr = cfg.write(4, 2, 0x6);
		int rerr = ioctl(v.dev, VFIO_DEVICE_RESET) ? errno : 0;
		double fast = now_ms() - t1;
		bool fired = eventfd_fired(efd);
		// An ERR eventfd set after the death is signalled at once.
		int efd2 = set_eventfd(v.dev, VFIO_PCI_ERR_IRQ_INDEX);
		bool fired2 = eventfd_fired(efd2);
		std::snprintf(d, sizeof(d),
			      "id=%#x first_read_ms=%.0f all_ones=%d write=%s reset=%s after_ms=%.0f err_irq=%d late_err_irq=%d",
			      id, ms, ones, ename(werr), ename(rerr), fast, fired, fired2);
		bool good = id == 0xffffffff && ones && werr == ENODEV && rerr == ENODEV && fired && fired2;
		return finish(a, good ? 0 : EIO, d);
	}

	// BAR0 sizing as a guest's BIOS does: save, all-ones, read the mask, restore an address.
	uint32_t bar0 = 0, bar1 = 0, m0 = 0, m1 = 0;
	int e = cfg.read(0x10, 4, bar0) | cfg.read(0x14, 4, bar1) | cfg.write(0x10, 4, 0xffffffff) |
		cfg.write(0x14, 4, 0xffffffff) | cfg.read(0x10, 4, m0) | cfg.read(0x14, 4, m1) |
		cfg.write(0x10, 4, 0xfebf0000) | cfg.write(0x14, 4, 0);
	uint32_t bar0_addr = 0;
	e |= cfg.read(0x10, 4, bar0_addr);
	vfio_region_info bri{};
	bri.argsz = sizeof(bri);
	bri.index = VFIO_PCI_BAR0_REGION_INDEX;
	e |= ioctl(v.dev, VFIO_DEVICE_GET_REGION_INFO, &bri) ? errno : 0;

	// The capability chain as QEMU walks it.
	std::string caps;
	uint32_t status = 0, pos = 0;
	e |= cfg.read(0x06, 2, status) | cfg.read(0x34, 1, pos);
	for (int n = 0; pos && n < 48; n++) {
		uint32_t hdr = 0;
		e |= cfg.read(pos, 2, hdr);
		char b[8];
		std::snprintf(b, sizeof(b), "%s%02x", caps.empty() ? "" : ",", hdr & 0xff);
		caps += b;
		pos = (hdr >> 8) & 0xfc;
	}
	// The whole region in one read (QEMU's first read of it) must work too.
	std::vector<uint8_t> whole(4096);
	bool whole_ok = pread(v.dev, whole.data(), whole.size(), static_cast<off_t>(ri.offset)) == 4096 &&
			whole[0] == 0x36 && whole[1] == 0x1b && whole[0x100] == 0;

	// Bus master on (BORROW), off (RETURN), then reset (RESET).
	uint32_t cmd = 0, cmd_on = 0, cmd_off = 0, cmd_reset = 0;
	e |= cfg.read(4, 2, cmd);
	int bm_on = cfg.write(4, 2, cmd | 0x6);
	e |= cfg.read(4, 2, cmd_on);
	// --before-return FILE: borrowed until FILE exists (at most 60 s), so a test can act in between.
	for (int i = 0; a.has("before-return") && i < 600 && access(a.str("before-return").c_str(), F_OK); i++)
		usleep(100'000);
	int bm_off = cfg.write(4, 2, cmd_on & ~0x4u);
	e |= cfg.read(4, 2, cmd_off);
	e |= cfg.write(4, 2, cmd_off | 0x4);	// on again: the reset must return it
	int reset = ioctl(v.dev, VFIO_DEVICE_RESET) ? errno : 0;
	e |= cfg.read(4, 2, cmd_reset);
	bool fired = eventfd_fired(efd);
	bool req_fired = eventfd_fired(rfd);
	std::snprintf(d, sizeof(d),
		      "vendor=%04x device=%04x first_read_ms=%.0f bar0=%#x/%#x sized=%#x/%#x addr=%#x bar0_region=%#llx "
		      "caps=%s whole_read=%d cmd_on=%#x(%s) cmd_off=%#x(%s) reset=%s cmd_after_reset=%#x err_irq=%d req_irq=%d",
		      id & 0xffff, id >> 16, ms, bar0, bar1, m0, m1, bar0_addr,
		      static_cast<unsigned long long>(bri.size), caps.c_str(), whole_ok, cmd_on, ename(bm_on), cmd_off,
		      ename(bm_off), ename(reset), cmd_reset, fired, req_fired);
	return finish(a, e ? EIO : 0, d);
}

// The fake lender's config space: what the agent would read from the device's vfio-pci on the lender.
struct FakeDevice {
	std::array<uint8_t, 256> cfg{};
	void put(uint32_t off, uint32_t val, uint32_t size)
	{
		for (uint32_t i = 0; i < size; i++)
			cfg[off + i] = static_cast<uint8_t>(val >> (8 * i));
	}
	uint32_t get(uint32_t off, uint32_t size) const
	{
		uint32_t v = 0;
		for (uint32_t i = 0; i < size && off + i < cfg.size(); i++)
			v |= static_cast<uint32_t>(cfg[off + i]) << (8 * i);
		return v;
	}
	FakeDevice(uint16_t vendor, uint16_t device)
	{
		put(0x00, vendor | static_cast<uint32_t>(device) << 16, 4);
		put(0x06, 0x0010, 2);		// capability list
		put(0x08, 0x01080202, 4);	// class 010802, revision 2
		put(0x2c, 0x11001af4, 4);
		put(0x34, 0x40, 1);
		put(0x3d, 0x01, 1);		// interrupt pin INTA: the mdev offers INTx
		put(0x40, 0x00035001, 4);	// PM -> 0x50
		put(0x50, 0x00006003, 4);	// VPD (hidden) -> 0x60
		put(0x60, 0x003f7011, 4);	// MSI-X, 64 vectors -> 0x70
		put(0x64, 0x00002000, 4);
		put(0x68, 0x00003000, 4);
		put(0x70, 0x03068013, 4);	// AF (hidden) -> 0x80
		put(0x80, 0x0002c010, 4);	// PCIe -> 0xc0
		put(0xc0, 0x01800005, 4);	// MSI, 64-bit, maskable, last
	}
};

const char *op_name(uint32_t op)
{
	switch (op) {
	case FARPASS_UPCALL_BORROW: return "BORROW";
	case FARPASS_UPCALL_RETURN: return "RETURN";
	case FARPASS_UPCALL_CFG_READ: return "CFG_READ";
	case FARPASS_UPCALL_CFG_WRITE: return "CFG_WRITE";
	case FARPASS_UPCALL_RESET: return "RESET";
	case FARPASS_UPCALL_SET_IRQS: return "SET_IRQS";
	default: return "UNKNOWN";
	}
}

// The agent's loop, as lender-agent's KernelPort is meant to run it: poll(2) for POLLIN, then
// UPCALL_GET with F_NONBLOCK until EAGAIN, one UPCALL_REPLY per request.
int run_agent(const Args &a, int fd)
{
	FILE *log = a.has("log") ? std::fopen(a.str("log").c_str(), "a") : stdout;
	if (!log)
		return finish(a, errno, "log");
	FakeDevice devcfg(static_cast<uint16_t>(a.num("vendor", 0x1b36)), static_cast<uint16_t>(a.num("device", 0x0010)));
	if (a.has("msix-table"))
		devcfg.put(0x64, static_cast<uint32_t>(a.num("msix-table", 0)), 4);
	unsigned delay_ms = static_cast<unsigned>(a.num("delay-ms", 0));
	const std::string ignore = "," + a.str("ignore") + ",";
	std::fprintf(log, "ready pid=%d\n", getpid());
	std::fflush(log);
	for (;;) {
		pollfd p{fd, POLLIN, 0};
		if (poll(&p, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			return finish(a, errno, "poll");
		}
		for (;;) {
			farpass_upcall_req r{};
			r.argsz = sizeof(r);
			r.flags = FARPASS_UPCALL_GET_F_NONBLOCK;
			if (ioctl(fd, FARPASS_IOCTL_UPCALL_GET, &r)) {
				if (errno == EAGAIN)
					break;	// poll said readable, another file took it: fine
				return finish(a, errno, "UPCALL_GET");
			}
			farpass_upcall_reply rep{};
			rep.argsz = sizeof(rep);
			rep.seq = r.seq;
			uint32_t off = static_cast<uint32_t>(r.args[0]), size = static_cast<uint32_t>(r.args[1]);
			switch (r.op) {
			case FARPASS_UPCALL_CFG_READ:
				if (off + size > 256 || (size != 1 && size != 2 && size != 4))
					rep.error = -EINVAL;
				else
					rep.data[0] = devcfg.get(off, size);
				std::fprintf(log, "%s %u %#x %u -> %#llx (seq %llu, %u ms left)\n", op_name(r.op), r.device_id,
					     off, size, static_cast<unsigned long long>(rep.data[0]),
					     static_cast<unsigned long long>(r.seq), r.timeout_ms);
				break;
			case FARPASS_UPCALL_CFG_WRITE:
				if (off + size <= 256)
					devcfg.put(off, static_cast<uint32_t>(r.args[2]), size);
				std::fprintf(log, "%s %u %#x %u %#llx (seq %llu)\n", op_name(r.op), r.device_id, off, size,
					     static_cast<unsigned long long>(r.args[2]), static_cast<unsigned long long>(r.seq));
				break;
			case FARPASS_UPCALL_SET_IRQS:
				std::fprintf(log, "%s %u instance %llu index %llu count %llu (seq %llu)\n", op_name(r.op),
					     r.device_id, static_cast<unsigned long long>(r.args[0]),
					     static_cast<unsigned long long>(r.args[1]), static_cast<unsigned long long>(r.args[2]),
					     static_cast<unsigned long long>(r.seq));
				break;
			default:
				std::fprintf(log, "%s %u instance %llu (seq %llu)\n", op_name(r.op), r.device_id,
					     static_cast<unsigned long long>(r.args[0]), static_cast<unsigned long long>(r.seq));
				if (r.op < FARPASS_UPCALL_BORROW || r.op > FARPASS_UPCALL_RESET)
					rep.error = -EOPNOTSUPP;
			}
			std::fflush(log);
			if (ignore.find("," + std::string(op_name(r.op)) + ",") != std::string::npos)
				continue;	// taken, never answered: the kernel's wait times out
			if (delay_ms)
				usleep(delay_ms * 1000);
			if (ioctl(fd, FARPASS_IOCTL_UPCALL_REPLY, &rep)) {
				std::fprintf(log, "reply seq %llu: %s\n", static_cast<unsigned long long>(r.seq),
					     strerrorname_np(errno));
				std::fflush(log);
			}
		}
	}
}

constexpr size_t edu_page = 4096;

std::vector<unsigned char> edu_pattern(unsigned seed)
{
	std::vector<unsigned char> p(edu_page);
	for (size_t i = 0; i < p.size(); i++)
		p[i] = static_cast<unsigned char>((i * 7 + seed * 13 + (i >> 8) * 5 + 1) & 0xff);
	return p;
}

int outbound_window(int fd, const Args &a, farpass_outbound_window &w)
{
	w = {};
	w.argsz = sizeof(w);
	w.mw = static_cast<uint32_t>(a.num("mw", 1));
	copy_name(w.ntb, a.str("ntb", "0000:00:0a.0"));
	return ioctl(fd, FARPASS_IOCTL_OUTBOUND_WINDOW, &w) ? errno : 0;
}

int run_window(const Args &a, int fd)
{
	farpass_outbound_window w;
	int err = outbound_window(fd, a, w);
	char d[160];
	std::snprintf(d, sizeof(d), "count=%u size=%#llx offset=%#llx", w.count, static_cast<unsigned long long>(w.size),
		      static_cast<unsigned long long>(w.offset));
	if (err)
		return finish(a, err, d);
	size_t len = w.size + a.num("mmap-extra", 0);
	void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(w.offset));
	if (m == MAP_FAILED)
		return finish(a, errno, std::string("mmap: ") + d);
	if (a.has("split")) {
		auto word_at = [&](uint64_t off, size_t pages, size_t page) -> long long {
			void *p = mmap(nullptr, pages * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
				       static_cast<off_t>(w.offset + off));
			if (p == MAP_FAILED)
				return -1;
			if (page)
				munmap(p, page * 4096); // the vma splits: the rest keeps its place in the window
			long long v = *reinterpret_cast<volatile uint32_t *>(static_cast<char *>(p) + page * 4096);
			munmap(static_cast<char *>(p) + page * 4096, (pages - page) * 4096);
			return v;
		};
		std::snprintf(d, sizeof(d), "split=%#llx page0=%#llx page1=%#llx", word_at(0, 2, 1), word_at(0, 1, 0),
			      word_at(4096, 1, 0));
	}
	if (a.has("hold-until")) {
		signal(SIGBUS, [](int) {
			static const char msg[] = "sigbus\n";
			(void)!write(1, msg, sizeof(msg) - 1);
			_exit(3);
		});
		volatile uint32_t *word = static_cast<volatile uint32_t *>(m);
		std::printf("mapped, first word %#x\n", static_cast<unsigned>(*word));
		std::fflush(stdout);
		while (access(a.str("hold-until").c_str(), F_OK))
			usleep(50000);
		std::printf("again %#x\n", static_cast<unsigned>(*word));
	}
	munmap(m, len);
	return finish(a, 0, d);
}

int run_window_rw(const Args &a, int fd)
{
	farpass_outbound_window w;
	int err = outbound_window(fd, a, w);
	if (err)
		return finish(a, err, "OUTBOUND_WINDOW");
	uint64_t off = a.num("offset", 0), page = off & ~4095ULL;
	if (off % 4 || off + 4 > w.size)
		return finish(a, EINVAL, "offset outside the window");
	void *m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(w.offset + page));
	if (m == MAP_FAILED)
		return finish(a, errno, "mmap");
	volatile uint32_t *word = reinterpret_cast<volatile uint32_t *>(static_cast<char *>(m) + (off - page));
	if (a.has("write"))
		*word = static_cast<uint32_t>(a.num("write", 0));
	char d[64];
	std::snprintf(d, sizeof(d), "value=%#x", static_cast<unsigned>(*word));
	munmap(m, 4096);
	return finish(a, 0, d);
}

int run_bar_map(const Args &a, int fd)
{
	farpass_bar_map m{};
	m.argsz = sizeof(m);
	m.flags = static_cast<uint32_t>(a.num("flags", a.has("unmap") ? FARPASS_BAR_MAP_F_UNMAP : 0));
	copy_name(m.ntb, a.str("ntb", "0000:00:0a.0"));
	copy_name(m.pci, a.str("pci", "0000:00:06.0"));
	m.bar = static_cast<uint32_t>(a.num("bar", 0));
	m.win_offset = a.num("offset", 0);
	m.size = a.num("size", 4096);
	return finish(a, ioctl(fd, FARPASS_IOCTL_BAR_MAP, &m) ? errno : 0, "");
}

int run_irq_bridge(const Args &a, int fd)
{
	uint32_t count = a.has("clear") ? 0 : static_cast<uint32_t>(a.num("count", 1));
	std::vector<unsigned char> buf(sizeof(farpass_irq_bridge) + count * sizeof(int32_t));
	auto *b = reinterpret_cast<farpass_irq_bridge *>(buf.data());
	b->argsz = static_cast<uint32_t>(buf.size());
	b->flags = a.has("clear") ? FARPASS_IRQ_BRIDGE_F_CLEAR : 0;
	copy_name(b->ntb, a.str("ntb", "0000:00:0a.0"));
	b->irq_slot = static_cast<uint32_t>(a.num("slot", 0));
	b->start = static_cast<uint32_t>(a.num("start", 0));
	b->count = count;
	std::vector<int> efds;
	for (uint32_t i = 0; i < count; i++) {
		bool bad = a.has("bad-fd") && i + 1 == count;
		int e = bad ? open("/dev/null", O_RDWR | O_CLOEXEC) : eventfd(0, EFD_CLOEXEC);
		if (e < 0)
			return finish(a, errno, "eventfd");
		efds.push_back(e);
		b->fds[i] = e;
	}
	int err = ioctl(fd, FARPASS_IOCTL_IRQ_BRIDGE, buf.data()) ? errno : 0;
	unsigned long long writes = 0;
	for (unsigned long long k = 0; !err && k < a.num("signal", 0); k++) {
		for (int e : efds) {
			uint64_t one = 1;
			if (write(e, &one, sizeof(one)) != sizeof(one))
				return finish(a, errno, "eventfd write");
			writes++;
		}
	}
	for (int e : efds)
		close(e);
	return finish(a, err, "signalled=" + std::to_string(writes));
}

// A broken peer's garbage HEADs in the borrower's interrupt mailbox, each followed by a doorbell.
int run_mbox_garbage(const Args &a, int fd)
{
	constexpr uint64_t ring_area = 64 * 1024;	// FP_XWIN_DMA_TAIL: the ring area ends the DMA window
	farpass_outbound_window w;
	Args wa = a;
	wa.opt["mw"] = std::to_string(FARPASS_MW_DMA);
	if (int err = outbound_window(fd, wa, w))
		return finish(a, err, "OUTBOUND_WINDOW");
	void *m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		       static_cast<off_t>(w.offset + w.size - ring_area));
	if (m == MAP_FAILED)
		return finish(a, errno, "mmap");
	auto *head = static_cast<volatile uint32_t *>(m);	// FP_MBOX_HEAD, word 0
	int efd = eventfd(0, EFD_CLOEXEC);
	std::vector<unsigned char> buf(sizeof(farpass_irq_bridge) + sizeof(int32_t));
	auto *b = reinterpret_cast<farpass_irq_bridge *>(buf.data());
	b->argsz = static_cast<uint32_t>(buf.size());
	copy_name(b->ntb, a.str("ntb", "0000:00:0a.0"));
	b->irq_slot = static_cast<uint32_t>(a.num("slot", 0));
	b->count = 1;
	b->fds[0] = efd;
	if (efd < 0 || ioctl(fd, FARPASS_IOCTL_IRQ_BRIDGE, buf.data()))
		return finish(a, errno, "IRQ_BRIDGE");
	const uint64_t count = a.num("count", 40);
	for (uint64_t k = 1; k <= count; k++) {
		*head = static_cast<uint32_t>((1u << 30) + (k << 16));
		__sync_synchronize();	// the window's write-combined store out before the doorbell
		uint64_t one = 1;
		if (write(efd, &one, sizeof(one)) != sizeof(one))
			return finish(a, errno, "eventfd write");
		usleep(static_cast<useconds_t>(a.num("gap-ms", 50) * 1000));
	}
	close(efd);
	munmap(m, 4096);
	b->flags = FARPASS_IRQ_BRIDGE_F_CLEAR;
	b->count = 0;
	b->argsz = sizeof(farpass_irq_bridge);
	if (ioctl(fd, FARPASS_IOCTL_IRQ_BRIDGE, buf.data()))
		return finish(a, errno, "IRQ_BRIDGE clear");
	return finish(a, 0, "heads=" + std::to_string(count));
}

// edu's registers (QEMU hw/misc/edu.c): 4-byte accesses; DMA from/to its buffer at 0x40000 (4 KiB; a
// transfer must end before the buffer's last byte, so we move 2 KiB at a time from its start).
struct Edu {
	int dev;
	uint64_t bar0;	// region offset of BAR0 in the device fd
	int write32(uint64_t reg, uint32_t v) const
	{
		return pwrite(dev, &v, 4, static_cast<off_t>(bar0 + reg)) == 4 ? 0 : (errno ? errno : EIO);
	}
	int read32(uint64_t reg, uint32_t &v) const
	{
		return pread(dev, &v, 4, static_cast<off_t>(bar0 + reg)) == 4 ? 0 : (errno ? errno : EIO);
	}
	// One transfer; waits (bounded, not timed: L1's clock may stall) for cmd's RUN bit to clear.
	int dma(uint64_t src, uint64_t dst, uint32_t count, bool to_pci) const
	{
		int err = write32(0x80, static_cast<uint32_t>(src));
		if (!err)
			err = write32(0x88, static_cast<uint32_t>(dst));
		if (!err)
			err = write32(0x90, count);
		if (!err)
			err = write32(0x98, 1u | (to_pci ? 2u : 0u));
		for (int i = 0; !err && i < 3000; i++) {
			uint32_t cmd;
			if ((err = read32(0x98, cmd)))
				break;
			if (!(cmd & 1))
				return 0;
			usleep(10000);
		}
		return err ? err : ETIMEDOUT;
	}
};

int run_edu_dma(const Args &a, int fd)
{
	if (a.positional.empty())
		return 2;
	const std::string bdf = a.positional[0];
	const uint64_t iova = a.num("iova", 0x1000000), src_iova = iova + 0x100000;
	const auto pattern = edu_pattern(static_cast<unsigned>(a.num("seed", 1)));

	farpass_outbound_window w;
	if (int err = outbound_window(fd, a, w))
		return finish(a, err, "OUTBOUND_WINDOW");
	void *win = mmap(nullptr, w.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(w.offset));
	if (win == MAP_FAILED)
		return finish(a, errno, "mmap of the outbound window");

	char link[256];
	ssize_t n = readlink(("/sys/bus/pci/devices/" + bdf + "/iommu_group").c_str(), link, sizeof(link) - 1);
	if (n < 0)
		return finish(a, errno, "iommu_group of " + bdf);
	link[n] = 0;
	const std::string group_path = "/dev/vfio/" + std::filesystem::path(link).filename().string();
	int container = open("/dev/vfio/vfio", O_RDWR | O_CLOEXEC);
	int group = open(group_path.c_str(), O_RDWR | O_CLOEXEC);
	if (container < 0 || group < 0)
		return finish(a, errno, "open container/group " + group_path);
	vfio_group_status gs{};
	gs.argsz = sizeof(gs);
	if (ioctl(group, VFIO_GROUP_GET_STATUS, &gs) || !(gs.flags & VFIO_GROUP_FLAGS_VIABLE))
		return finish(a, errno ? errno : EBUSY, "group not viable");
	if (ioctl(group, VFIO_GROUP_SET_CONTAINER, &container))
		return finish(a, errno, "VFIO_GROUP_SET_CONTAINER");
	if (ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU))
		return finish(a, errno, "VFIO_SET_IOMMU");
	int dev = ioctl(group, VFIO_GROUP_GET_DEVICE_FD, bdf.c_str());
	if (dev < 0)
		return finish(a, errno, "VFIO_GROUP_GET_DEVICE_FD");
	vfio_region_info bar0{}, cfg{};
	bar0.argsz = cfg.argsz = sizeof(bar0);
	bar0.index = VFIO_PCI_BAR0_REGION_INDEX;
	cfg.index = VFIO_PCI_CONFIG_REGION_INDEX;
	if (ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, &bar0) || ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, &cfg))
		return finish(a, errno, "VFIO_DEVICE_GET_REGION_INFO");
	uint16_t command;
	if (pread(dev, &command, 2, static_cast<off_t>(cfg.offset + 4)) != 2)
		return finish(a, errno, "command register");
	command |= 0x6; // memory space + bus master: edu's DMA is dropped without it
	if (pwrite(dev, &command, 2, static_cast<off_t>(cfg.offset + 4)) != 2)
		return finish(a, errno, "command register");
	Edu edu{dev, bar0.offset};
	uint32_t ident;
	if (int err = edu.read32(0, ident))
		return finish(a, err, "edu ident");

	// The local source buffer, and the window's first page, as the agent's dma.map does.
	void *local = mmap(nullptr, edu_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (local == MAP_FAILED)
		return finish(a, errno, "anonymous buffer");
	std::memcpy(local, pattern.data(), edu_page);
	auto map = [&](uint64_t at, void *vaddr) {
		vfio_iommu_type1_dma_map m{};
		m.argsz = sizeof(m);
		m.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
		m.vaddr = reinterpret_cast<uint64_t>(vaddr);
		m.iova = at;
		m.size = edu_page;
		return ioctl(container, VFIO_IOMMU_MAP_DMA, &m) ? errno : 0;
	};
	if (int err = map(src_iova, local))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA of the local buffer");
	if (int err = map(iova, static_cast<char *>(win) + a.num("win-offset", 0)))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA of the outbound window");
	if (a.has("unmapped")) {
		vfio_iommu_type1_dma_unmap u{};
		u.argsz = sizeof(u);
		u.iova = iova;
		u.size = edu_page;
		if (ioctl(container, VFIO_IOMMU_UNMAP_DMA, &u) || u.size != edu_page)
			return finish(a, errno ? errno : EIO, "VFIO_IOMMU_UNMAP_DMA");
	}
	const uint64_t edu_buf = 0x40000;
	const uint32_t chunk = edu_page / 2;
	for (uint32_t off = 0; off < edu_page; off += chunk) {
		if (int err = edu.dma(src_iova + off, edu_buf, chunk, false))
			return finish(a, err, "edu DMA local -> edu");
		if (int err = edu.dma(edu_buf, iova + off, chunk, true))
			return finish(a, err, "edu DMA edu -> outbound IOVA");
	}
	// Order: a read over the link returns after the peer executed the posted writes before it.
	volatile uint32_t first = *static_cast<volatile uint32_t *>(win);
	char d[200];
	std::snprintf(d, sizeof(d), "edu %#x window size=%#llx iova=%#llx%s window[0]=%#x", ident,
		      static_cast<unsigned long long>(w.size), static_cast<unsigned long long>(iova),
		      a.has("unmapped") ? " (unmapped)" : "", static_cast<unsigned>(first));
	return finish(a, 0, d);
}


// ---- the DMA window (vfio-dma on the borrower, window-stamp on the lender) and interrupts (vfio-irq)

constexpr uint64_t stamp_page = 4096;

// The word window-stamp writes at the start of window page `page` (counted from its --offset).
uint64_t stamp_word(unsigned seed, uint64_t page)
{
	return 0xfa55000000000000ull | static_cast<uint64_t>(seed) << 32 | page;
}

int run_window_stamp(const Args &a, int fd)
{
	farpass_outbound_window w;
	if (int err = outbound_window(fd, a, w))
		return finish(a, err, "OUTBOUND_WINDOW");
	const uint64_t off = a.num("offset", 0), size = a.num("size", 0);
	const unsigned seed = static_cast<unsigned>(a.num("seed", 1));
	if (!size || off % stamp_page || size % stamp_page || off + size > w.size)
		return finish(a, EINVAL, "offset/size outside the window");
	void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(w.offset + off));
	if (m == MAP_FAILED)
		return finish(a, errno, "mmap");
	auto *base = static_cast<volatile uint8_t *>(m);
	for (uint64_t p = 0; p < size / stamp_page; p++)
		*reinterpret_cast<volatile uint64_t *>(base + p * stamp_page) = stamp_word(seed, p);
	// A read over the link returns after the peer executed the posted writes before it.
	uint64_t last = *reinterpret_cast<volatile uint64_t *>(base + size - stamp_page);
	munmap(m, size);
	char d[128];
	std::snprintf(d, sizeof(d), "pages=%llu last=%#llx", static_cast<unsigned long long>(size / stamp_page),
		      static_cast<unsigned long long>(last));
	return finish(a, 0, d);
}

// Pages of buf (size bytes) whose first word is window-stamp's word for seed.
uint64_t stamped_pages(const uint8_t *buf, uint64_t size, unsigned seed)
{
	uint64_t n = 0;
	for (uint64_t p = 0; p < size / stamp_page; p++)
		n += *reinterpret_cast<const volatile uint64_t *>(buf + p * stamp_page) == stamp_word(seed, p);
	return n;
}

// Wait (bounded) until file exists.
bool wait_file(const std::string &file)
{
	for (int i = 0; i < 3000; i++) {
		if (!access(file.c_str(), F_OK))
			return true;
		usleep(100000);
	}
	return false;
}

int dma_layout(int fd, uint32_t id, farpass_dma_layout &l)
{
	l = {};
	l.argsz = sizeof(l);
	l.device_id = id;
	return ioctl(fd, FARPASS_IOCTL_DMA_LAYOUT, &l) ? errno : 0;
}

int vfio_dma_map(int container, void *vaddr, uint64_t iova, uint64_t size, bool unmap)
{
	if (unmap) {
		vfio_iommu_type1_dma_unmap u{};
		u.argsz = sizeof(u);
		u.iova = iova;
		u.size = size;
		return ioctl(container, VFIO_IOMMU_UNMAP_DMA, &u) ? errno : u.size == size ? 0 : EIO;
	}
	vfio_iommu_type1_dma_map m{};
	m.argsz = sizeof(m);
	m.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
	m.vaddr = reinterpret_cast<uint64_t>(vaddr);
	m.iova = iova;
	m.size = size;
	return ioctl(container, VFIO_IOMMU_MAP_DMA, &m) ? errno : 0;
}

// V's config region (into CFG) and its command register, as QEMU reads them before setting bus master:
// 0 or an errno, *what says which step failed.
int cfg_command(const Vfio &v, Cfg &cfg, uint32_t &cmd, std::string &what)
{
	vfio_region_info ri;
	if (int err = region_info(v.dev, VFIO_PCI_CONFIG_REGION_INDEX, ri))
		return what = "GET_REGION_INFO config", err;
	cfg.base = ri.offset;
	if (int err = cfg.read(4, 2, cmd))
		return what = "command", err;
	return 0;
}

int run_vfio_dma(const Args &a, int fd)
{
	if (a.positional.empty() || !a.has("dir"))
		return 2;
	const std::string dir = a.str("dir");
	const uint32_t id = static_cast<uint32_t>(a.num("id", 1));
	const unsigned sb = static_cast<unsigned>(a.num("seed-base", 0));
	constexpr uint64_t size = 2ull << 20, iova_lo = 1ull << 20, iova_hi = 4ull << 30;
	Vfio v;
	std::string what;
	if (int err = vfio_open(a.positional[0], v, what))
		return finish(a, err, what);
	auto *lo = static_cast<uint8_t *>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	// The high buffer 2 MiB aligned and a huge page if THP allows: physically contiguous, so the
	// kernel maps it as one run, which the unmap of its upper half must cut.
	auto *hi_map = static_cast<uint8_t *>(mmap(nullptr, 2 * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (lo == MAP_FAILED || hi_map == MAP_FAILED)
		return finish(a, errno, "buffers");
	auto *hi = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(hi_map) + size - 1) & ~(size - 1));
	madvise(hi, size, MADV_HUGEPAGE);
	// The low buffer in 4 KiB pages, each touched right after a page of a spacer: whether the page
	// allocator hands out consecutive frames ascending or descending, a spacer frame then sits between
	// two neighbours, so the kernel sees many runs in the low buffer's slot.
	auto *spacer = static_cast<uint8_t *>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (spacer == MAP_FAILED)
		return finish(a, errno, "spacer");
	madvise(lo, size, MADV_NOHUGEPAGE);
	madvise(spacer, size, MADV_NOHUGEPAGE);
	for (uint64_t off = 0; off < size; off += 4096) {
		std::memset(spacer + off, 0, 4096);
		std::memset(lo + off, 0, 4096);
	}
	std::memset(hi, 0, size);
	if (int err = vfio_dma_map(v.container, lo, iova_lo, size, false))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA low");
	munmap(spacer, size); // the low buffer's frames are pinned now
	// The high buffer in two mappings, as QEMU maps adjacent RAM sections: one guest RAM range.
	if (int err = vfio_dma_map(v.container, hi, iova_hi, size / 2, false))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA high, lower half");
	if (int err = vfio_dma_map(v.container, hi + size / 2, iova_hi + size / 2, size / 2, false))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA high, upper half");
	Cfg cfg{v.dev};
	uint32_t cmd = 0;
	if (int err = cfg_command(v, cfg, cmd, what))
		return finish(a, err, what);
	double t0 = now_ms();
	if (int err = cfg.write(4, 2, cmd | 0x6))
		return finish(a, err, "bus master on (BORROW)");
	double bm_ms = now_ms() - t0;

	farpass_dma_layout l;
	if (int err = dma_layout(fd, id, l))
		return finish(a, err, "DMA_LAYOUT");
	std::string thp = "?";
	if (FILE *f = std::fopen("/proc/self/smaps_rollup", "r")) {
		char line[128];
		while (std::fgets(line, sizeof(line), f))
			if (!std::strncmp(line, "AnonHugePages:", 14))
				thp = std::to_string(std::strtoull(line + 14, nullptr, 10)) + "kB";
		std::fclose(f);
	}
	std::printf("layout nr=%u pinned=%llu bm_on_ms=%.0f thp=%s", l.nr_slots,
		    static_cast<unsigned long long>(l.pages_pinned), bm_ms, thp.c_str());
	for (uint32_t i = 0; i < l.nr_slots && i < FARPASS_DMA_SLOTS; i++)
		std::printf(" slot%u=%#llx:%#llx:%#llx", i, static_cast<unsigned long long>(l.slots[i].gpa),
			    static_cast<unsigned long long>(l.slots[i].size), static_cast<unsigned long long>(l.slots[i].offset));
	std::printf("\n");
	std::fflush(stdout);

	if (!wait_file(dir + "/go1"))
		return finish(a, ETIMEDOUT, "go1");
	std::printf("found low=%llu high=%llu\n", static_cast<unsigned long long>(stamped_pages(lo, size, sb + 1)),
		    static_cast<unsigned long long>(stamped_pages(hi, size, sb + 2)));
	int uerr = vfio_dma_map(v.container, nullptr, iova_hi + size / 2, size / 2, true);
	int lerr = dma_layout(fd, id, l);
	std::printf("unmapped high_upper=%s pinned=%llu (%s)\n", ename(uerr),
		    static_cast<unsigned long long>(l.pages_pinned), ename(lerr));
	std::fflush(stdout);

	if (!wait_file(dir + "/go2"))
		return finish(a, ETIMEDOUT, "go2");
	// --edu-seed S: the lender's edu DMAed edu-dma's pattern S into the low buffer's page 1.
	const auto edu = edu_pattern(static_cast<unsigned>(a.num("edu-seed", 0)));
	std::printf("after_unmap low_seed3=%llu high_seed2=%llu high_seed4=%llu edu_page1=%d\n",
		    static_cast<unsigned long long>(stamped_pages(lo, size, sb + 3)),
		    static_cast<unsigned long long>(stamped_pages(hi, size, sb + 2)),
		    static_cast<unsigned long long>(stamped_pages(hi, size, sb + 4)),
		    !std::memcmp(lo + stamp_page, edu.data(), edu.size()));
	// As QEMU merging RAM sections: unmap the lower half's mapping and at once map the whole high buffer
	// as one. The kernel pins it back by itself (its refill, ~20 ms after the unmap); wait, bounded.
	int rerr = vfio_dma_map(v.container, nullptr, iova_hi, size / 2, true);
	if (!rerr)
		rerr = vfio_dma_map(v.container, hi, iova_hi, size, false);
	for (int i = 0; !rerr && i < 100 && !(lerr = dma_layout(fd, id, l)) && l.pages_pinned < 1024; i++)
		usleep(100000);
	std::printf("remapped high=%s pinned=%llu\n", ename(rerr), static_cast<unsigned long long>(l.pages_pinned));
	int off = cfg.write(4, 2, cmd & ~0x4u);
	lerr = dma_layout(fd, id, l);
	std::printf("bus_master_off=%s layout_after=%s\n", ename(off), ename(lerr));
	std::fflush(stdout);
	if (!wait_file(dir + "/go3"))
		return finish(a, ETIMEDOUT, "go3");
	return finish(a, uerr ? uerr : off, "");
}

// This process's cgroup v2 memory.current (bytes charged to it, kernel memory included), or -1.
long long cgroup_memory()
{
	std::ifstream cg("/proc/self/cgroup");
	std::string line, path;
	while (std::getline(cg, line))
		if (line.starts_with("0::"))
			path = line.substr(3);
	std::ifstream cur("/sys/fs/cgroup" + path + "/memory.current");
	long long v;
	return !path.empty() && cur >> v ? v : -1;
}

// A debugfs counter of farpass (all-ones if unreadable).
unsigned long long debugfs_counter(const std::string &name)
{
	unsigned long long n = ~0ull;
	if (FILE *f = std::fopen("/sys/kernel/debug/farpass/counters", "r")) {
		char line[128];
		const std::string key = name + " ";
		while (std::fgets(line, sizeof(line), f))
			if (!std::strncmp(line, key.c_str(), key.size()))
				n = std::strtoull(line + key.size(), nullptr, 10);
		std::fclose(f);
	}
	return n;
}

// Every instance's pinned pages.
unsigned long long pinned_pages()
{
	return debugfs_counter("pinned_pages");
}

// This process's locked memory (VmLck: the mm's locked_vm, where VFIO accounts its pins), kB, or -1.
long long locked_kb()
{
	std::ifstream status("/proc/self/status");
	std::string line;
	while (std::getline(status, line))
		if (line.starts_with("VmLck:"))
			return std::strtoll(line.c_str() + 6, nullptr, 10);
	return -1;
}

int run_vfio_huge(const Args &a, int fd)
{
	if (a.positional.empty() || !a.has("dir"))
		return 2;
	const std::string dir = a.str("dir");
	const uint32_t id = static_cast<uint32_t>(a.num("id", 1));
	const unsigned sb = static_cast<unsigned>(a.num("seed-base", 0));
	constexpr uint64_t huge = 2ull << 20, size = 2 * huge, iova = 4ull << 30;
	auto *buf = static_cast<uint8_t *>(
		mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0));
	if (buf == MAP_FAILED)
		return finish(a, errno, "2 MiB hugetlb pages (vm.nr_hugepages)");
	std::memset(buf, 0, size);
	const long long locked0 = locked_kb();
	Vfio v;
	std::string what;
	if (int err = vfio_open(a.positional[0], v, what))
		return finish(a, err, what);
	// The first huge page in two mappings, as QEMU maps adjacent RAM sections: one guest RAM range.
	if (int err = vfio_dma_map(v.container, buf, iova, huge / 2, false))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA first huge page, lower half");
	if (int err = vfio_dma_map(v.container, buf + huge / 2, iova + huge / 2, huge / 2, false))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA first huge page, upper half");
	if (int err = vfio_dma_map(v.container, buf + huge, iova + huge, huge, false))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA second huge page");
	Cfg cfg{v.dev};
	uint32_t cmd = 0;
	if (int err = cfg_command(v, cfg, cmd, what))
		return finish(a, err, what);
	if (int err = cfg.write(4, 2, cmd | 0x6))
		return finish(a, err, "bus master on (BORROW)");
	farpass_dma_layout l;
	if (int err = dma_layout(fd, id, l))
		return finish(a, err, "DMA_LAYOUT");
	std::printf("borrowed pinned=%llu held=%llu locked_kb=%lld slot=%#llx:%#llx:%#llx\n",
		    static_cast<unsigned long long>(l.pages_pinned), debugfs_counter("dma_held_pages"),
		    locked_kb() - locked0, static_cast<unsigned long long>(l.slots[0].gpa),
		    static_cast<unsigned long long>(l.slots[0].size), static_cast<unsigned long long>(l.slots[0].offset));
	std::fflush(stdout);

	if (!wait_file(dir + "/go1"))
		return finish(a, ETIMEDOUT, "go1");
	const uint64_t found = stamped_pages(buf, size, sb + 1);
	int uerr = vfio_dma_map(v.container, nullptr, iova + huge / 2, huge / 2, true);
	int lerr = uerr ? uerr : dma_layout(fd, id, l);
	const uint64_t at_once = lerr ? 0 : l.pages_pinned;
	// The kernel pins back what is still mapped (its refill, ~20 ms after the unmap); wait, bounded.
	for (int i = 0; !lerr && i < 100 && l.pages_pinned < 768; i++) {
		usleep(100000);
		lerr = dma_layout(fd, id, l);
	}
	std::printf("unmapped found=%llu pinned_at_once=%llu pinned=%llu held=%llu locked_kb=%lld (%s)\n",
		    static_cast<unsigned long long>(found), static_cast<unsigned long long>(at_once),
		    static_cast<unsigned long long>(lerr ? 0 : l.pages_pinned), debugfs_counter("dma_held_pages"),
		    locked_kb() - locked0, ename(lerr));
	std::fflush(stdout);

	if (!wait_file(dir + "/go2"))
		return finish(a, ETIMEDOUT, "go2");
	const uint64_t lower = stamped_pages(buf, huge / 2, sb + 2), second = stamped_pages(buf + huge, huge, sb + 3);
	int off = cfg.write(4, 2, cmd & ~0x4u);
	std::printf("after lower=%llu second=%llu off=%s pinned=%llu held=%llu locked_kb=%lld\n",
		    static_cast<unsigned long long>(lower), static_cast<unsigned long long>(second), ename(off),
		    pinned_pages(), debugfs_counter("dma_held_pages"), locked_kb() - locked0);
	std::fflush(stdout);
	if (!wait_file(dir + "/go3"))
		return finish(a, ETIMEDOUT, "go3");
	return finish(a, uerr ? uerr : off, "");
}

int run_vfio_borrow(const Args &a, int fd)
{
	if (a.positional.empty())
		return 2;
	const uint64_t size = a.num("mb", 2) << 20, iova = 1ull << 20;
	auto *buf = static_cast<uint8_t *>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (buf == MAP_FAILED)
		return finish(a, errno, "buffer");
	// Pages faulted in from the end: the allocator hands out ascending frames, so no two neighbours are
	// physically contiguous and the kernel maps (and unmaps, with an IOTLB flush) each page on its own.
	madvise(buf, size, MADV_NOHUGEPAGE);
	for (uint64_t off = size; off; off -= 4096)
		buf[off - 4096] = 1;
	if (a.has("open-at")) {
		// Faulted in, not yet opened: the caller measures the host before the device costs anything.
		std::printf("faulted\n");
		std::fflush(stdout);
		if (!wait_file(a.str("open-at")))
			return finish(a, ETIMEDOUT, "open-at");
	}
	// From here the cgroup pays only for what opening and borrowing the device cost (the window's page
	// arrays, allocated at the first access after open or at the borrow).
	const long long mem0 = cgroup_memory();
	Vfio v;
	std::string what;
	if (int err = vfio_open(a.positional[0], v, what))
		return finish(a, err, what);
	if (int err = vfio_dma_map(v.container, buf, iova, size, false))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA");
	Cfg cfg{v.dev};
	uint32_t cmd = 0;
	if (int err = cfg_command(v, cfg, cmd, what))
		return finish(a, err, what);
	if (a.has("when-unpinning")) {
		// Ready to borrow at once: wait (1 ms polls, at most 300 s) for another window's unpinning.
		const unsigned long long pinned0 = pinned_pages();
		std::printf("ready\n");
		std::fflush(stdout);
		for (int i = 0; pinned_pages() >= pinned0; i++)
			if (i == 300000)
				return finish(a, ETIMEDOUT, "when-unpinning");
			else
				usleep(1000);
	}
	if (a.has("borrow-at")) {
		// Mapped, not yet borrowed: the caller measures the host between the two.
		std::printf("ready\n");
		std::fflush(stdout);
		if (!wait_file(a.str("borrow-at")))
			return finish(a, ETIMEDOUT, "borrow-at");
	}
	double t0 = now_ms();
	int bm = cfg.write(4, 2, cmd | 0x6);
	const long bm_ms = static_cast<long>(now_ms() - t0);
	const long long charged = mem0 < 0 ? -1 : cgroup_memory() - mem0;
	// Every instance's pinned pages at once, to tell whether another window was still being torn down.
	const unsigned long long all = pinned_pages();
	farpass_dma_layout l;
	int lerr = bm ? bm : dma_layout(fd, static_cast<uint32_t>(a.num("id", 1)), l);
	char detail[192];
	std::snprintf(detail, sizeof(detail), "bm_on=%s bm_ms=%ld pinned_all=%llu offset=%#llx pinned=%llu charged=%lld",
		      ename(bm), bm_ms, all, static_cast<unsigned long long>(!lerr && l.nr_slots ? l.slots[0].offset : ~0ull),
		      static_cast<unsigned long long>(lerr ? 0 : l.pages_pinned), charged);
	std::string out = detail;
	if (a.has("hold-until")) {
		std::printf("borrowed %s\n", detail);
		std::fflush(stdout);
		if (!wait_file(a.str("hold-until")))
			return finish(a, ETIMEDOUT, out + " hold-until");
	}
	const std::string then = a.str("then");
	t0 = now_ms();
	if (then == "off")
		out += std::string(" then=") + ename(cfg.write(4, 2, cmd & ~0x4u));
	else if (then == "reset")
		out += std::string(" then=") + ename(ioctl(v.dev, VFIO_DEVICE_RESET) ? errno : 0);
	if (!then.empty())
		out += " then_ms=" + std::to_string(static_cast<long>(now_ms() - t0));
	return finish(a, bm ? bm : lerr, out);
}

// Two farpass devices in one VFIO container: their .dma_unmap are called in turn by the same unmap.
int run_vfio_two(const Args &a, int fd)
{
	if (a.positional.size() < 2)
		return 2;
	const uint64_t size = a.num("mb", 64) << 20, iova = 1ull << 20;
	Vfio v1, v2;
	std::string what;
	if (int err = vfio_open(a.positional[0], v1, what))
		return finish(a, err, what);
	if (int err = vfio_join(a.positional[1], v1.container, v2, what))
		return finish(a, err, what);
	auto *buf = static_cast<uint8_t *>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (buf == MAP_FAILED)
		return finish(a, errno, "buffer");
	madvise(buf, size, MADV_NOHUGEPAGE);
	for (uint64_t off = size; off; off -= 4096)	// pages apart, as vfio-borrow
		buf[off - 4096] = 1;
	if (int err = vfio_dma_map(v1.container, buf, iova, size, false))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA");
	Cfg c1{v1.dev}, c2{v2.dev};
	uint32_t cmd1 = 0, cmd2 = 0;
	if (int err = cfg_command(v1, c1, cmd1, what))
		return finish(a, err, what);
	if (int err = cfg_command(v2, c2, cmd2, what))
		return finish(a, err, what);
	if (int err = c1.write(4, 2, cmd1 | 0x6))
		return finish(a, err, "bus master on 1");
	if (int err = c2.write(4, 2, cmd2 | 0x6))
		return finish(a, err, "bus master on 2");
	for (uint64_t r = 0; r < a.num("rounds", 20); r++) {
		if (int err = vfio_dma_map(v1.container, buf, iova, size, true))
			return finish(a, err, "VFIO_IOMMU_UNMAP_DMA round " + std::to_string(r));
		if (int err = vfio_dma_map(v1.container, buf, iova, size, false))
			return finish(a, err, "VFIO_IOMMU_MAP_DMA round " + std::to_string(r));
		usleep(static_cast<useconds_t>(a.num("gap-ms", 30) * 1000));
	}
	const uint32_t id1 = static_cast<uint32_t>(a.num("id1", 1)), id2 = static_cast<uint32_t>(a.num("id2", 2));
	farpass_dma_layout l1, l2;
	for (int i = 0; i < 600; i++) {
		int err = dma_layout(fd, id1, l1);
		if (err || (err = dma_layout(fd, id2, l2)))
			return finish(a, err, "DMA_LAYOUT");
		if (l1.pages_pinned == size / 4096 && l2.pages_pinned == size / 4096)
			break;
		usleep(100000);
	}
	std::string out = "pinned1=" + std::to_string(l1.pages_pinned) + " pinned2=" + std::to_string(l2.pages_pinned);
	out += std::string(" off1=") + ename(c1.write(4, 2, cmd1 & ~0x4u));
	out += std::string(" off2=") + ename(c2.write(4, 2, cmd2 & ~0x4u));
	return finish(a, 0, out);
}

// A seeded hostile VFIO user (and /dev/farpass caller of the harmless commands): random calls until
// --ms passed. Only whether the kernel survives them, and cleans up after, is the test's business.
int run_fuzz(const Args &a, int fd)
{
	if (a.positional.empty())
		return 2;
	Vfio v;
	std::string what;
	if (int err = vfio_open(a.positional[0], v, what))
		return finish(a, err, what);
	constexpr uint64_t size = 4ull << 20, iova = 1ull << 20, half = size / 2;
	auto *buf = static_cast<uint8_t *>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (buf == MAP_FAILED)
		return finish(a, errno, "buffer");
	for (uint64_t h = 0; h < size; h += half)	// two sections, as QEMU's RAM
		if (int err = vfio_dma_map(v.container, buf + h, iova + h, half, false))
			return finish(a, err, "VFIO_IOMMU_MAP_DMA");
	std::mt19937_64 rng(a.num("seed", 1));
	auto pick = [&](uint64_t n) { return rng() % n; };
	const int fds[] = {eventfd(0, EFD_CLOEXEC), -1, open("/dev/null", O_RDONLY | O_CLOEXEC)};
	std::vector<unsigned char> blob(8192);
	// Regions at index << 40 (docs/mdev.md); the fuzz also tries indexes beyond the device's.
	auto region_off = [](uint64_t index) { return index << 40; };
	const uint64_t cfg = region_off(VFIO_PCI_CONFIG_REGION_INDEX);
	uint64_t ops = 0, failed = 0;
	const double end = now_ms() + static_cast<double>(a.num("ms", 30000));
	while (now_ms() < end) {
		for (auto &b : blob)
			b = static_cast<unsigned char>(rng());
		const uint64_t off = pick(4) ? pick(0x5000) : rng();
		const size_t len = 1 + pick(pick(4) ? 8 : 8192);
		const uint64_t region = region_off(pick(12));
		int r = 0;
		switch (pick(11)) {
		case 0:
			r = static_cast<int>(pread(v.dev, blob.data(), len, static_cast<off_t>(region + off)));
			break;
		case 1:
			r = static_cast<int>(pwrite(v.dev, blob.data(), len, static_cast<off_t>(region + off)));
			break;
		case 2: {	// the command register, bus master on or off (a borrow or a return)
			uint16_t cmd = static_cast<uint16_t>(pick(2) ? 0x6 : 0x2);
			r = static_cast<int>(pwrite(v.dev, &cmd, 2, static_cast<off_t>(cfg + 4)));
			break;
		}
		case 3: {
			vfio_region_info ri{};
			ri.argsz = static_cast<uint32_t>(pick(2) ? sizeof(ri) : pick(64));
			ri.index = static_cast<uint32_t>(pick(2) ? pick(12) : rng());
			r = ioctl(v.dev, VFIO_DEVICE_GET_REGION_INFO, &ri);
			break;
		}
		case 4: {
			vfio_irq_info ii{};
			ii.argsz = static_cast<uint32_t>(pick(2) ? sizeof(ii) : pick(64));
			ii.index = static_cast<uint32_t>(pick(2) ? pick(6) : rng());
			r = ioctl(v.dev, VFIO_DEVICE_GET_IRQ_INFO, &ii);
			break;
		}
		case 5: {
			auto *si = reinterpret_cast<vfio_irq_set *>(blob.data());
			const uint32_t count = static_cast<uint32_t>(pick(4) ? pick(70) : rng());
			si->index = static_cast<uint32_t>(pick(6));
			si->flags = static_cast<uint32_t>((1u << pick(3)) | (1u << (3 + pick(3))));
			si->start = static_cast<uint32_t>(pick(4) ? pick(70) : rng());
			si->count = count;
			si->argsz = static_cast<uint32_t>(pick(4) ? sizeof(*si) + std::min<uint32_t>(count, 1024) * 4 : pick(8192));
			auto *data = reinterpret_cast<int32_t *>(si->data);
			for (uint32_t i = 0; i < std::min<uint32_t>(count, 1024); i++)
				data[i] = fds[pick(3)];
			r = ioctl(v.dev, VFIO_DEVICE_SET_IRQS, si);
			break;
		}
		case 6:
			r = ioctl(v.dev, VFIO_DEVICE_RESET);
			break;
		case 7: {
			void *m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, v.dev,
				       static_cast<off_t>(region + (off & ~4095ull)));
			r = m == MAP_FAILED ? -1 : 0;
			if (!r) {
				(void)*static_cast<volatile uint32_t *>(m);
				munmap(m, 4096);
			}
			break;
		}
		case 8: {	// a section unmapped (.dma_unmap), then mapped again (the refill)
			const uint64_t h = pick(2) * half;
			r = vfio_dma_map(v.container, buf + h, iova + h, half, true) ? -1 : 0;
			if (!r)
				r = vfio_dma_map(v.container, buf + h, iova + h, half, false) ? -1 : 0;
			break;
		}
		case 9: {
			farpass_version ver{};
			ver.argsz = static_cast<uint32_t>(pick(2) ? sizeof(ver) : pick(64));
			ver.version = static_cast<uint32_t>(pick(2) ? FARPASS_API_VERSION : rng());
			r = ioctl(fd, FARPASS_IOCTL_VERSION, &ver);
			if (r) {	// an agent's file stays negotiated for the rest
				ver.argsz = sizeof(ver);
				ver.version = FARPASS_API_VERSION;
				ioctl(fd, FARPASS_IOCTL_VERSION, &ver);
			}
			break;
		}
		default: {	// DMA_LAYOUT of any device, or a command farpass does not have
			auto *l = reinterpret_cast<farpass_dma_layout *>(blob.data());
			l->argsz = static_cast<uint32_t>(pick(2) ? sizeof(*l) : pick(8192));
			if (pick(2))
				r = ioctl(fd, FARPASS_IOCTL_DMA_LAYOUT, blob.data());
			else
				r = ioctl(fd, _IOC(pick(4), FARPASS_IOCTL_TYPE, 16 + pick(240), pick(4096)), blob.data());
		}
		}
		ops++;
		failed += r < 0;
	}
	for (int f : fds)
		if (f >= 0)
			close(f);
	return finish(a, 0, "ops=" + std::to_string(ops) + " failed=" + std::to_string(failed));
}

// A hostile VFIO user's flood of forwarded config reads (each one a CFG_READ upcall): --procs processes
// read 2 bytes at --offset (default 6, the status register) for --ms ms. "reads=OK busy=EBUSY other=N".
int run_vfio_cfg_flood(const Args &a)
{
	if (a.positional.empty())
		return 2;
	Vfio v;
	std::string what;
	if (int err = vfio_open(a.positional[0], v, what))
		return finish(a, err, what);
	vfio_region_info ri;
	if (int err = region_info(v.dev, VFIO_PCI_CONFIG_REGION_INDEX, ri))
		return finish(a, err, "GET_REGION_INFO config");
	const unsigned procs = static_cast<unsigned>(a.num("procs", 16));
	const double end = now_ms() + static_cast<double>(a.num("ms", 5000));
	// Counts shared by the processes: reads, EBUSY, other errors.
	auto *n = static_cast<std::atomic<uint64_t> *>(mmap(nullptr, 3 * sizeof(std::atomic<uint64_t>),
							     PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
	if (n == MAP_FAILED)
		return finish(a, errno, "counts");
	for (unsigned i = 0; i < procs; i++) {
		pid_t pid = fork();
		if (pid < 0)
			return finish(a, errno, "fork");
		if (pid)
			continue;
		uint16_t val;
		while (now_ms() < end) {
			ssize_t r = pread(v.dev, &val, 2, static_cast<off_t>(ri.offset + a.num("offset", 6)));
			n[r == 2 ? 0 : errno == EBUSY ? 1 : 2]++;
		}
		_exit(0);
	}
	while (wait(nullptr) > 0)
		;
	return finish(a, 0, "reads=" + std::to_string(n[0].load()) + " busy=" + std::to_string(n[1].load()) +
				    " other=" + std::to_string(n[2].load()));
}

int set_irqs(int dev, uint32_t index, uint32_t flags, uint32_t start, uint32_t count, const void *data = nullptr,
	     size_t len = 0)
{
	std::vector<uint8_t> buf(sizeof(vfio_irq_set) + len);
	auto *set = reinterpret_cast<vfio_irq_set *>(buf.data());
	set->argsz = static_cast<uint32_t>(buf.size());
	set->flags = flags;
	set->index = index;
	set->start = start;
	set->count = count;
	if (len)
		std::memcpy(buf.data() + sizeof(vfio_irq_set), data, len);
	return ioctl(dev, VFIO_DEVICE_SET_IRQS, buf.data()) ? errno : 0;
}

int set_irq_eventfds(int dev, uint32_t index, const std::vector<int32_t> &fds)
{
	return set_irqs(dev, index, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, 0,
			static_cast<uint32_t>(fds.size()), fds.data(), fds.size() * sizeof(int32_t));
}

// BAR0's region info with its capabilities: "flags=rwmc sparse=OFF+SIZE,..." (empty: no sparse cap).
std::string bar0_info(int dev, vfio_region_info &info)
{
	std::vector<uint8_t> buf(sizeof(vfio_region_info));
	for (int pass = 0; pass < 2; pass++) {
		auto *ri = reinterpret_cast<vfio_region_info *>(buf.data());
		ri->argsz = static_cast<uint32_t>(buf.size());
		ri->index = VFIO_PCI_BAR0_REGION_INDEX;
		if (ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, buf.data()))
			return std::string("err=") + ename(errno);
		if (ri->argsz <= buf.size())
			break;
		buf.resize(ri->argsz);	// the capabilities did not fit: ask again
	}
	std::memcpy(&info, buf.data(), sizeof(info));
	std::string f = "flags=";
	f += info.flags & VFIO_REGION_INFO_FLAG_READ ? "r" : "-";
	f += info.flags & VFIO_REGION_INFO_FLAG_WRITE ? "w" : "-";
	f += info.flags & VFIO_REGION_INFO_FLAG_MMAP ? "m" : "-";
	f += info.flags & VFIO_REGION_INFO_FLAG_CAPS ? "c" : "-";
	std::string sparse;
	for (uint32_t off = info.flags & VFIO_REGION_INFO_FLAG_CAPS ? info.cap_offset : 0;
	     off && off + sizeof(vfio_info_cap_header) <= buf.size();) {
		auto *h = reinterpret_cast<vfio_info_cap_header *>(buf.data() + off);
		if (h->id == VFIO_REGION_INFO_CAP_SPARSE_MMAP) {
			auto *sp = reinterpret_cast<vfio_region_info_cap_sparse_mmap *>(h);
			for (uint32_t i = 0; i < sp->nr_areas; i++) {
				char b[64];
				std::snprintf(b, sizeof(b), "%s%#llx+%#llx", sparse.empty() ? "" : ",",
					      static_cast<unsigned long long>(sp->areas[i].offset),
					      static_cast<unsigned long long>(sp->areas[i].size));
				sparse += b;
			}
		}
		off = h->next;
	}
	return f + " sparse=" + (sparse.empty() ? "none" : sparse);
}

// Trapped accesses to BAR0 through the region (as QEMU's to the MSI-X pages), and its mmap.
int run_vfio_bar(const Args &a)
{
	if (a.positional.empty())
		return 2;
	Vfio v;
	std::string what;
	if (int err = vfio_open(a.positional[0], v, what))
		return finish(a, err, what);
	vfio_region_info bar;
	if (int err = region_info(v.dev, VFIO_PCI_BAR0_REGION_INDEX, bar))
		return finish(a, err, "GET_REGION_INFO");
	const uint64_t off = a.num("offset", 0);
	std::string detail;
	vfio_region_info ci;
	if (int err = region_info(v.dev, VFIO_PCI_CONFIG_REGION_INDEX, ci))
		return finish(a, err, "GET_REGION_INFO config");
	Cfg cfg{v.dev, ci.offset};
	uint32_t cmd = 0;
	if (a.has("borrow")) {
		int on = cfg.read(4, 2, cmd);
		if (!on)
			on = cfg.write(4, 2, cmd | 0x6);
		detail += std::string("bm_on=") + ename(on) + " ";
	}
	if (a.has("write")) {
		uint32_t w = static_cast<uint32_t>(a.num("write", 0));
		ssize_t n = pwrite(v.dev, &w, 4, static_cast<off_t>(bar.offset + off));
		detail += std::string("wrote=") + (n == 4 ? "ok" : n < 0 ? ename(errno) : "short") + " ";
	}
	std::vector<uint8_t> buf(a.num("len", 4));
	ssize_t n = pread(v.dev, buf.data(), buf.size(), static_cast<off_t>(bar.offset + off));
	uint32_t word = 0;
	std::memcpy(&word, buf.data(), std::min<size_t>(4, buf.size()));
	char d[96];
	std::snprintf(d, sizeof(d), "read=%s value=%#x", n < 0 ? ename(errno) : std::to_string(n).c_str(), word);
	detail += d;
	if (a.has("mmap") || a.has("lease")) {
		void *m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, v.dev, static_cast<off_t>(bar.offset));
		detail += std::string(" mmap=") + (m == MAP_FAILED ? ename(errno) : "ok");
		if (m != MAP_FAILED && !a.has("lease")) {
			char b[32];
			std::snprintf(b, sizeof(b), " mmio0=%#x", *static_cast<volatile uint32_t *>(m));
			detail += b;
		}
		if (m != MAP_FAILED && a.has("lease")) {
			// Word 0 of the mmap before the borrow, while borrowed, after the return.
			volatile uint32_t *w = static_cast<volatile uint32_t *>(m);
			char b[160];
			uint32_t idle = w[0];
			int on = cfg.read(4, 2, cmd);
			if (!on)
				on = cfg.write(4, 2, cmd | 0x6);
			uint32_t leased = w[0];
			int off = cfg.write(4, 2, cmd & ~0x4u);
			uint32_t returned = w[0];
			std::snprintf(b, sizeof(b), " idle=%#x bm_on=%s leased=%#x bm_off=%s returned=%#x", idle, ename(on),
				      leased, ename(off), returned);
			detail += b;
		}
		if (m != MAP_FAILED)
			munmap(m, 4096);
	}
	if (a.has("cfg-offset")) {
		// The config region at a large offset: past its 4 KiB, however the offset is cut.
		uint32_t val = 0;
		ssize_t r = pread(v.dev, &val, 4, static_cast<off_t>(ci.offset + a.num("cfg-offset", 0)));
		detail += std::string(" cfg_read=") + (r < 0 ? ename(errno) : std::to_string(r));
	}
	if (a.has("borrow"))
		detail += std::string(" bm_off=") + ename(cfg.write(4, 2, cmd & ~0x4u));
	return finish(a, 0, detail);
}

int run_vfio_irq(const Args &a)
{
	if (a.positional.empty())
		return 2;
	Vfio v;
	std::string what;
	if (int err = vfio_open(a.positional[0], v, what))
		return finish(a, err, what);
	vfio_region_info bar{};
	std::string binfo = bar0_info(v.dev, bar);
	// mmap: the MSI-X table page (BAR0 + 0x2000) is refused, the area before it is fine.
	void *m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, v.dev, static_cast<off_t>(bar.offset + 0x2000));
	int msix_mmap = m == MAP_FAILED ? errno : 0;
	if (m != MAP_FAILED)
		munmap(m, 4096);
	m = mmap(nullptr, 0x4000, PROT_READ | PROT_WRITE, MAP_SHARED, v.dev, static_cast<off_t>(bar.offset));
	int across_mmap = m == MAP_FAILED ? errno : 0;
	if (m != MAP_FAILED)
		munmap(m, 0x4000);
	m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, v.dev, static_cast<off_t>(bar.offset + bar.size));
	int beyond_mmap = m == MAP_FAILED ? errno : 0;
	if (m != MAP_FAILED)
		munmap(m, 4096);
	// The area before the MSI-X pages, mmapped now, read once borrowed (below).
	void *area = mmap(nullptr, 0x2000, PROT_READ | PROT_WRITE, MAP_SHARED, v.dev, static_cast<off_t>(bar.offset));
	int area_mmap = area == MAP_FAILED ? errno : 0;

	std::string counts;
	for (uint32_t i = 0; i < VFIO_PCI_NUM_IRQS; i++) {
		vfio_irq_info ii{};
		ii.argsz = sizeof(ii);
		ii.index = i;
		counts += (i ? "," : "") + (ioctl(v.dev, VFIO_DEVICE_GET_IRQ_INFO, &ii) ? std::string("E") :
					    std::to_string(ii.count));
	}

	vfio_region_info ri;
	if (int err = region_info(v.dev, VFIO_PCI_CONFIG_REGION_INDEX, ri))
		return finish(a, err, "GET_REGION_INFO config");
	Cfg cfg{v.dev, ri.offset};
	int e0 = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), e1 = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC),
	    e2 = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	const uint32_t msix = VFIO_PCI_MSIX_IRQ_INDEX, none = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
	// Before the borrow: local state only. Then the borrow re-sends it; each change after is sent.
	int pre = set_irq_eventfds(v.dev, msix, {e0, e1});
	uint32_t cmd = 0;
	int bm_on = cfg.read(4, 2, cmd) ? EIO : cfg.write(4, 2, cmd | 0x6);
	// Borrowed: words 0 and 1 of the mmapped area straight from the device (on the lender, through the
	// NTB), word 1 after writing a value (edu's liveness register inverts it).
	uint32_t mmio0 = 0, mmio1 = 0;
	if (area != MAP_FAILED) {
		volatile uint32_t *w = static_cast<volatile uint32_t *>(area);
		mmio0 = w[0];
		if (a.has("write1")) {
			w[1] = static_cast<uint32_t>(a.num("write1", 0));
			mmio1 = w[1];
		}
		munmap(area, 0x2000);
	}
	// Trapped accesses: the MSI-X table page (QEMU's), and word 0 read through the region.
	uint32_t word = 0, trapped0 = 0;
	int trapped = pread(v.dev, &word, 4, static_cast<off_t>(bar.offset + 0x2000)) == 4 ? 0 : errno ? errno : EIO;
	if (!trapped && a.has("trap0"))
		trapped = pread(v.dev, &trapped0, 4, static_cast<off_t>(bar.offset)) == 4 ? 0 : errno ? errno : EIO;
	int msi_busy = set_irq_eventfds(v.dev, VFIO_PCI_MSI_IRQ_INDEX, {e0});
	int mask = set_irqs(v.dev, msix, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_MASK, 0, 1);
	int off = set_irqs(v.dev, msix, none, 0, 0);
	int trig_off = set_irqs(v.dev, msix, none, 0, 1);
	int on3 = set_irq_eventfds(v.dev, msix, {e0, -1, e2});
	int trig = set_irqs(v.dev, msix, none, 0, 3);
	bool f0 = eventfd_fired(e0), f1 = eventfd_fired(e1), f2 = eventfd_fired(e2);
	// --dir: wait for DIR/go-irq while borrowed with vectors 0-2 armed (the lender signals them through
	// the interrupt bridge meanwhile), then count what each eventfd got.
	std::string bridged = "none";
	if (a.has("dir")) {
		std::printf("armed\n");
		std::fflush(stdout);
		if (!wait_file(a.str("dir") + "/go-irq"))
			return finish(a, ETIMEDOUT, "go-irq");
		bridged.clear();
		for (int e : {e0, e1, e2}) {
			uint64_t n = 0;
			bridged += (bridged.empty() ? "" : "/") +
				   std::to_string(::read(e, &n, sizeof(n)) == sizeof(n) ? n : 0);
		}
	}
	int bm_off = cfg.write(4, 2, cmd & ~0x4u);
	int off2 = set_irqs(v.dev, msix, none, 0, 0);
	char d[512];
	std::snprintf(d, sizeof(d),
		      "bar0 %s size=%#llx mmap_msix=%s mmap_across=%s mmap_beyond=%s mmap_area=%s mmio0=%#x mmio1=%#x "
		      "trapped_read=%s trapped0=%#x irq_counts=%s "
		      "msix_pre=%s bm_on=%s msi_while_msix=%s mask=%s msix_off=%s trigger_off=%s msix_on3=%s "
		      "trigger=%s fired=%d%d%d bridged=%s bm_off=%s msix_off2=%s",
		      binfo.c_str(), static_cast<unsigned long long>(bar.size), ename(msix_mmap), ename(across_mmap),
		      ename(beyond_mmap), ename(area_mmap), mmio0, mmio1, ename(trapped), trapped0, counts.c_str(), ename(pre), ename(bm_on), ename(msi_busy),
		      ename(mask), ename(off), ename(trig_off), ename(on3), ename(trig), f0, f1, f2, bridged.c_str(), ename(bm_off),
		      ename(off2));
	return finish(a, 0, d);
}

// The lender's INTx unmask eventfd for a slot (IRQ_BRIDGE F_UNMASK), counted until DIR/go-count.
int run_irq_unmask(const Args &a, int fd)
{
	const uint32_t count = static_cast<uint32_t>(a.num("count", 1));
	std::vector<unsigned char> buf(sizeof(farpass_irq_bridge) + std::max(count, 1u) * sizeof(int32_t));
	auto *b = reinterpret_cast<farpass_irq_bridge *>(buf.data());
	b->argsz = static_cast<uint32_t>(sizeof(farpass_irq_bridge) + count * sizeof(int32_t));
	b->flags = FARPASS_IRQ_BRIDGE_F_UNMASK | (a.has("with-clear") ? FARPASS_IRQ_BRIDGE_F_CLEAR : 0);
	copy_name(b->ntb, a.str("ntb", "0000:00:0a.0"));
	b->irq_slot = static_cast<uint32_t>(a.num("slot", 0));
	b->start = static_cast<uint32_t>(a.num("start", 0));
	b->count = count;
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	for (uint32_t i = 0; i < count; i++)
		b->fds[i] = efd;
	if (efd < 0 || ioctl(fd, FARPASS_IOCTL_IRQ_BRIDGE, buf.data()))
		return finish(a, errno, "IRQ_BRIDGE F_UNMASK");
	std::printf("ready\n");
	std::fflush(stdout);
	if (!wait_file(a.str("dir") + "/go-count"))
		return finish(a, ETIMEDOUT, "go-count");
	uint64_t n = 0;
	if (::read(efd, &n, sizeof(n)) != sizeof(n))
		n = 0;
	b->fds[0] = -1;
	int cleared = ioctl(fd, FARPASS_IOCTL_IRQ_BRIDGE, buf.data()) ? errno : 0;
	close(efd);
	return finish(a, 0, "unmasks=" + std::to_string(n) + " cleared=" + ename(cleared));
}

// QEMU's use of a device's INTx without KVM (hw/vfio/pci.c vfio_intx_*), against the mdev.
int run_vfio_intx(const Args &a)
{
	if (a.positional.empty())
		return 2;
	Vfio v;
	std::string what;
	if (int err = vfio_open(a.positional[0], v, what))
		return finish(a, err, what);
	const uint32_t intx = VFIO_PCI_INTX_IRQ_INDEX;
	vfio_irq_info ii{};
	ii.argsz = sizeof(ii);
	ii.index = intx;
	if (ioctl(v.dev, VFIO_DEVICE_GET_IRQ_INFO, &ii))
		return finish(a, errno, "GET_IRQ_INFO INTx");
	std::string info = std::to_string(ii.count) + "/" + (ii.flags & VFIO_IRQ_INFO_MASKABLE ? "m" : "") +
			   (ii.flags & VFIO_IRQ_INFO_AUTOMASKED ? "a" : "") + (ii.flags & VFIO_IRQ_INFO_NORESIZE ? "r" : "");
	const uint32_t unmask_none = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_UNMASK;
	int unmask_off = set_irqs(v.dev, intx, unmask_none, 0, 1);
	vfio_region_info ri;
	if (int err = region_info(v.dev, VFIO_PCI_CONFIG_REGION_INDEX, ri))
		return finish(a, err, "GET_REGION_INFO config");
	Cfg cfg{v.dev, ri.offset};
	int trig = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), unmask = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	int on = set_irq_eventfds(v.dev, intx, {trig});
	uint32_t cmd = 0;
	int bm_on = cfg.read(4, 2, cmd) ? EIO : cfg.write(4, 2, cmd | 0x6);
	const auto fired = [&] {
		uint64_t n = 0;
		return std::to_string(::read(trig, &n, sizeof(n)) == sizeof(n) ? n : 0);
	};
	std::printf("armed\n");
	std::fflush(stdout);
	if (!wait_file(a.str("dir") + "/go1"))
		return finish(a, ETIMEDOUT, "go1");
	std::string fired1 = fired();
	int unmask1 = set_irqs(v.dev, intx, unmask_none, 0, 1);
	int unmask2 = set_irqs(v.dev, intx, unmask_none, 0, 1);
	int unmask_fd = set_irqs(v.dev, intx, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_UNMASK, 0, 1, &unmask,
				 sizeof(int32_t));
	int mask_fd = set_irqs(v.dev, intx, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_MASK, 0, 1, &unmask,
			       sizeof(int32_t));
	std::printf("armed2\n");
	std::fflush(stdout);
	if (!wait_file(a.str("dir") + "/go2"))
		return finish(a, ETIMEDOUT, "go2");
	std::string fired2 = fired();
	uint64_t one = 1;
	int signal = ::write(unmask, &one, sizeof(one)) == sizeof(one) ? 0 : errno;
	if (!wait_file(a.str("dir") + "/go3"))
		return finish(a, ETIMEDOUT, "go3");
	int off = set_irqs(v.dev, intx, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, 0, 0);
	int bm_off = cfg.write(4, 2, cmd & ~0x4u);
	char d[512];
	std::snprintf(d, sizeof(d),
		      "info=%s unmask_off=%s intx_on=%s bm_on=%s fired1=%s unmask1=%s unmask2=%s unmask_fd=%s "
		      "mask_fd=%s fired2=%s signal=%s intx_off=%s bm_off=%s",
		      info.c_str(), ename(unmask_off), ename(on), ename(bm_on), fired1.c_str(), ename(unmask1),
		      ename(unmask2), ename(unmask_fd), ename(mask_fd), fired2.c_str(), ename(signal), ename(off),
		      ename(bm_off));
	return finish(a, 0, d);
}

// Polls step() every millisecond (counted, not timed: L1's clock may stall under TCG) until it returns
// anything but EAGAIN; ETIMEDOUT after `ms` polls.
template <typename F> int wait_until(unsigned ms, F step)
{
	for (unsigned i = 0;; i++) {
		int r = step();
		if (r != EAGAIN)
			return r;
		if (i == ms)
			return ETIMEDOUT;
		usleep(1000);
	}
}

// The offset of capability ID in the config space's chain, 0 if absent.
int find_cap(const Cfg &cfg, uint8_t id, uint32_t &pos)
{
	int err = cfg.read(0x34, 1, pos);
	for (int n = 0; !err && pos && n < 48; n++) {
		uint32_t hdr = 0;
		if ((err = cfg.read(pos, 2, hdr)) || (hdr & 0xff) == id)
			break;
		pos = (hdr >> 8) & 0xfc;
	}
	if (err || !pos)
		pos = 0;
	return err;
}

// A BAR region as QEMU maps it: what VFIO lets us mmap (all of it, or the areas of
// VFIO_REGION_INFO_CAP_SPARSE_MMAP) is mmapped; registers outside go through pread/pwrite.
struct Bar {
	struct Area {
		uint64_t off, size;
		uint8_t *p;
	};
	int dev = -1;
	uint64_t offset = 0, size = 0;	// the region's offset in the device file, its size
	std::vector<Area> areas;
	~Bar() { unmap(); }
	void unmap()
	{
		for (const Area &m : areas)
			munmap(m.p, m.size);
		areas.clear();
	}
	volatile uint32_t *mapped(uint64_t reg) const
	{
		for (const Area &m : areas)
			if (reg >= m.off && reg + 4 <= m.off + m.size)
				return reinterpret_cast<volatile uint32_t *>(m.p + (reg - m.off));
		return nullptr;
	}
	// Through the device file even where mmapped: an unreachable BAR gives an errno or all-ones, no SIGBUS.
	int pread32(uint64_t reg, uint32_t &v) const
	{
		ssize_t n = pread(dev, &v, 4, static_cast<off_t>(offset + reg));
		return n == 4 ? 0 : n < 0 ? errno : EIO;
	}
	int read32(uint64_t reg, uint32_t &v) const
	{
		if (volatile uint32_t *p = mapped(reg))
			return v = *p, 0;
		return pread32(reg, v);
	}
	int write32(uint64_t reg, uint32_t v) const
	{
		if (volatile uint32_t *p = mapped(reg))
			return *p = v, 0;
		ssize_t n = pwrite(dev, &v, 4, static_cast<off_t>(offset + reg));
		return n == 4 ? 0 : n < 0 ? errno : EIO;
	}
	// Low dword first, as a 32-bit driver writes NVMe's ASQ/ACQ.
	int write64(uint64_t reg, uint64_t v) const
	{
		int err = write32(reg, static_cast<uint32_t>(v));
		return err ? err : write32(reg + 4, static_cast<uint32_t>(v >> 32));
	}
	// GET_REGION_INFO of INDEX (again with the size it asks for when it has capabilities), then the mmaps
	// unless no_mmap.
	int map(int fd, uint32_t index, bool no_mmap, std::string &what)
	{
		dev = fd;
		std::vector<uint8_t> buf(sizeof(vfio_region_info));
		for (;;) {
			auto *ri = reinterpret_cast<vfio_region_info *>(buf.data());
			ri->argsz = static_cast<uint32_t>(buf.size());
			ri->index = index;
			if (ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, ri))
				return what = "VFIO_DEVICE_GET_REGION_INFO BAR", errno;
			if (ri->argsz <= buf.size())
				break;
			buf.resize(ri->argsz);
		}
		const auto *ri = reinterpret_cast<const vfio_region_info *>(buf.data());
		offset = ri->offset;
		size = ri->size;
		if (!size)
			return what = "BAR region of size 0", ENODEV;
		std::vector<std::pair<uint64_t, uint64_t>> mmappable;
		bool sparse = false;
		uint32_t at = ri->flags & VFIO_REGION_INFO_FLAG_CAPS ? ri->cap_offset : 0;
		for (int n = 0; at && at + sizeof(vfio_info_cap_header) <= buf.size() && n < 16; n++) {
			const auto *hdr = reinterpret_cast<const vfio_info_cap_header *>(buf.data() + at);
			if (hdr->id == VFIO_REGION_INFO_CAP_SPARSE_MMAP) {
				const auto *sp = reinterpret_cast<const vfio_region_info_cap_sparse_mmap *>(hdr);
				if (at + sizeof(*sp) + sp->nr_areas * sizeof(sp->areas[0]) > buf.size())
					return what = "sparse mmap capability past the region info", EINVAL;
				sparse = true;
				for (uint32_t i = 0; i < sp->nr_areas; i++)
					mmappable.emplace_back(sp->areas[i].offset, sp->areas[i].size);
			}
			at = hdr->next;
		}
		if (no_mmap || !(ri->flags & VFIO_REGION_INFO_FLAG_MMAP))
			mmappable.clear();
		else if (!sparse)
			mmappable.emplace_back(0, size);
		for (auto [off, len] : mmappable) {
			if (!len)
				continue;
			void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, dev, static_cast<off_t>(offset + off));
			if (p == MAP_FAILED)
				return what = "mmap of BAR area " + std::to_string(off) + "+" + std::to_string(len), errno;
			areas.push_back({off, len, static_cast<uint8_t *>(p)});
		}
		return 0;
	}
	std::string describe() const
	{
		char b[64];
		std::snprintf(b, sizeof(b), "bar0=%#llx mmap=%zu", static_cast<unsigned long long>(size), areas.size());
		std::string s = b;
		for (const Area &m : areas) {
			std::snprintf(b, sizeof(b), "%s%#llx+%#llx", &m == areas.data() ? ":" : ",",
				      static_cast<unsigned long long>(m.off), static_cast<unsigned long long>(m.size));
			s += b;
		}
		return s;
	}
};

// An anonymous 2 MiB buffer the device sees at an IOVA (VFIO_IOMMU_MAP_DMA), as QEMU maps guest RAM.
// Filled with 0xa5, which no identify structure or completion looks like.
struct DmaBuf {
	static constexpr size_t size = 2u << 20;
	uint8_t *p = nullptr;
	uint64_t iova = 0;
	~DmaBuf()
	{
		if (p)
			munmap(p, size);
	}
	int map(int container, uint64_t at)
	{
		void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		if (m == MAP_FAILED)
			return errno;
		p = static_cast<uint8_t *>(m);
		iova = at;
		std::memset(p, 0xa5, size);
		vfio_iommu_type1_dma_map dm{};
		dm.argsz = sizeof(dm);
		dm.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
		dm.vaddr = reinterpret_cast<uint64_t>(p);
		dm.iova = at;
		dm.size = size;
		return ioctl(container, VFIO_IOMMU_MAP_DMA, &dm) ? errno : 0;
	}
};

// NVMe controller registers (NVMe 1.4, 3.1).
constexpr uint32_t nvme_cap = 0x00, nvme_cc = 0x14, nvme_csts = 0x1c, nvme_aqa = 0x24, nvme_asq = 0x28,
		   nvme_acq = 0x30, nvme_sq0tdbl = 0x1000;
constexpr uint32_t nvme_csts_rdy = 1u, nvme_csts_cfs = 2u;

std::string hex_or_errno(int err, uint32_t v)
{
	char b[16];
	std::snprintf(b, sizeof(b), "0x%x", v);
	return err ? ename(err) : b;
}

// CSTS.RDY == rdy within ms; a fatal status (CFS; all-ones has it) while waiting for RDY=1 is EIO.
int wait_ready(const Bar &bar, uint32_t rdy, unsigned ms, uint32_t &csts)
{
	return wait_until(ms, [&] {
		if (int err = bar.read32(nvme_csts, csts))
			return err;
		if (rdy && (csts & nvme_csts_cfs))
			return EIO;
		return (csts & nvme_csts_rdy) == rdy ? 0 : EAGAIN;
	});
}

// PRP1 of a submission queue entry: the data (or queue) address, low dword first.
void set_prp1(std::array<uint32_t, 16> &sqe, uint64_t addr)
{
	sqe[6] = static_cast<uint32_t>(addr);
	sqe[7] = static_cast<uint32_t>(addr >> 32);
}

// A queue pair: the SQ and the CQ in DMA buffers, completions signalled on an MSI-X vector's eventfd,
// or polled (efd -1).
struct NvmeQueue {
	const Bar &bar;
	uint8_t *sq;
	const volatile uint8_t *cq;
	uint32_t entries, sq_doorbell, cq_doorbell;
	int efd;
	unsigned timeout_ms;
	uint32_t sq_tail = 0, cq_head = 0, phase = 1;
	uint16_t cid = 0;
	uint64_t irqs = 0;	// the MSI-X eventfd's count, summed

	// One command (its CID set here): 0 and its completion status, or an errno and *what failed.
	// Rings the SQ tail doorbell, waits for the completion's phase tag (and the interrupt), then rings
	// the CQ head.
	int submit(std::array<uint32_t, 16> sqe, uint16_t &status, std::string &what)
	{
		sqe[0] = (sqe[0] & 0xffff) | static_cast<uint32_t>(++cid) << 16;
		std::memcpy(sq + sq_tail * 64, sqe.data(), 64);
		sq_tail = (sq_tail + 1) % entries;
		std::atomic_thread_fence(std::memory_order_release);
		if (int err = bar.write32(sq_doorbell, sq_tail))
			return what = "SQ tail doorbell", err;
		auto *cqe = reinterpret_cast<const volatile uint32_t *>(cq + cq_head * 16);
		if (int err = wait_until(timeout_ms, [&] { return (cqe[3] >> 16 & 1) == phase ? 0 : EAGAIN; }))
			return what = "completion of command " + std::to_string(cid) + " (phase tag)", err;
		std::atomic_thread_fence(std::memory_order_acquire);
		uint32_t dw3 = cqe[3];
		status = static_cast<uint16_t>(dw3 >> 17);
		if ((dw3 & 0xffff) != cid)
			return what = "completion for command " + std::to_string(dw3 & 0xffff) + ", not " +
				      std::to_string(cid),
			       EIO;
		if (efd >= 0) {
			pollfd p{efd, POLLIN, 0};
			int n = poll(&p, 1, static_cast<int>(timeout_ms));
			uint64_t count = 0;
			if (n <= 0 || ::read(efd, &count, sizeof(count)) != sizeof(count))
				return what = "MSI-X vector 0 eventfd after command " + std::to_string(cid),
				       n < 0 ? errno : ETIMEDOUT;
			irqs += count;
		}
		if (++cq_head == entries)
			cq_head = 0, phase ^= 1;
		if (int err = bar.write32(cq_doorbell, cq_head))
			return what = "CQ head doorbell", err;
		return 0;
	}
	// An admin command with PRP1 and CDW10.
	int submit(uint8_t opcode, uint32_t nsid, uint64_t prp1, uint32_t cdw10, uint16_t &status, std::string &what)
	{
		std::array<uint32_t, 16> sqe{};
		sqe[0] = opcode;
		sqe[1] = nsid;
		set_prp1(sqe, prp1);
		sqe[10] = cdw10;
		return submit(sqe, status, what);
	}
};

// The doorbells of queue QID (CAP.DSTRD: 4 << DSTRD bytes apart).
uint32_t nvme_sq_doorbell(uint32_t cap_hi, uint32_t qid)
{
	return nvme_sq0tdbl + 2 * qid * (4u << (cap_hi & 0xf));
}
uint32_t nvme_cq_doorbell(uint32_t cap_hi, uint32_t qid)
{
	return nvme_sq_doorbell(cap_hi, qid) + (4u << (cap_hi & 0xf));
}

// The admin bring-up: disable, the admin queues at ASQ/ACQ (ENTRIES each), enable (4 KiB pages,
// 64-byte SQ and 16-byte CQ entries). *cap_hi gets CAP's upper half.
int nvme_enable(const Bar &bar, uint64_t asq, uint64_t acq, uint32_t entries, unsigned timeout_ms, uint32_t &cap_hi,
		std::string &what)
{
	uint32_t cap_lo = 0, csts = 0;
	int err;
	if ((err = bar.read32(nvme_cap, cap_lo) | bar.read32(nvme_cap + 4, cap_hi)))
		return what = "CAP", err;
	if ((cap_hi >> 16) & 0xf)
		return what = "CAP.MPSMIN above 4 KiB", ENOTSUP;
	if (entries > (cap_lo & 0xffff) + 1)
		return what = "CAP.MQES below " + std::to_string(entries) + " entries", ENOTSUP;
	if ((err = bar.write32(nvme_cc, 0)) || (err = wait_ready(bar, 0, timeout_ms, csts)))
		return what = "CC.EN=0: CSTS " + hex_or_errno(0, csts), err;
	if ((err = bar.write32(nvme_aqa, (entries - 1) | (entries - 1) << 16)) || (err = bar.write64(nvme_asq, asq)) ||
	    (err = bar.write64(nvme_acq, acq)))
		return what = "AQA/ASQ/ACQ", err;
	if ((err = bar.write32(nvme_cc, 1u | 6u << 16 | 4u << 20)) || (err = wait_ready(bar, 1, timeout_ms, csts)))
		return what = "CC.EN=1: CSTS " + hex_or_errno(0, csts), err;
	return 0;
}

// nvme-identify: QEMU's part for a guest's NVMe driver (DMA map, command register, MSI-X) and the
// driver's admin bring-up, Identify Controller into the low buffer and Identify Namespace 1 into the
// high one, then optionally a hold, the return (bus master off) and a reset.
int run_nvme_identify(const Args &a)
{
	const bool mdev = a.has("mdev");
	const std::string name = a.str(mdev ? "mdev" : "dev");
	if (name.empty() || (!mdev && !a.has("group")))
		return 2;
	const unsigned timeout_ms = static_cast<unsigned>(a.num("timeout-ms", 10000));
	Vfio v;
	std::string what;
	if (int err = mdev ? vfio_open(name, v, what) : vfio_open_group(a.str("group"), name, v, what))
		return finish(a, err, what);
	vfio_device_info info{};
	info.argsz = sizeof(info);
	if (ioctl(v.dev, VFIO_DEVICE_GET_INFO, &info))
		return finish(a, errno, "VFIO_DEVICE_GET_INFO");
	if (!(info.flags & VFIO_DEVICE_FLAGS_PCI) || info.num_regions <= VFIO_PCI_CONFIG_REGION_INDEX ||
	    info.num_irqs <= VFIO_PCI_MSIX_IRQ_INDEX)
		return finish(a, EINVAL, "not a VFIO PCI device");
	vfio_region_info ri;
	if (int err = region_info(v.dev, VFIO_PCI_CONFIG_REGION_INDEX, ri))
		return finish(a, err, "GET_REGION_INFO config");
	Cfg cfg{v.dev, ri.offset};
	Bar bar;
	if (int err = bar.map(v.dev, VFIO_PCI_BAR0_REGION_INDEX, a.has("no-mmap"), what))
		return finish(a, err, what);
	vfio_irq_info ii{};
	ii.argsz = sizeof(ii);
	ii.index = VFIO_PCI_MSIX_IRQ_INDEX;
	if (ioctl(v.dev, VFIO_DEVICE_GET_IRQ_INFO, &ii))
		return finish(a, errno, "GET_IRQ_INFO MSI-X");
	if (!ii.count || !(ii.flags & VFIO_IRQ_INFO_EVENTFD))
		return finish(a, ENOTSUP,
			      "MSI-X: " + std::to_string(ii.count) + " vectors, flags " + std::to_string(ii.flags));

	DmaBuf low, high;
	if (int err = low.map(v.container, a.num("low", 0x100000)))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA of the low buffer");
	if (int err = high.map(v.container, a.num("high", 0x100000000ull)))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA of the high buffer");
	// SQ0 and Identify Controller's data in the low buffer, CQ0 and Identify Namespace's in the high one.
	constexpr size_t queue_bytes = 4096, data_off = 0x1000;
	std::memset(low.p, 0, queue_bytes);
	std::memset(high.p, 0, queue_bytes);

	// As QEMU passes the guest's writes on: memory space and bus master on, MSI-X enabled in its
	// capability (vfio-pci and farpass virtualise that bit), then vector 0's eventfd.
	uint32_t id = 0, cmd = 0, msix = 0, exp = 0, msix_ctrl = 0;
	int err = cfg.read(0, 4, id) | cfg.read(4, 2, cmd) | find_cap(cfg, 0x11, msix) | find_cap(cfg, 0x10, exp);
	if (err || !msix)
		return finish(a, err ? err : ENOTSUP, "config space: vendor, command, MSI-X capability");
	// --devctl/--devctl2: PCIe control registers as a guest's driver writes them, before bus master.
	const std::pair<const char *, uint32_t> ctl_regs[] = {{"devctl", 8}, {"devctl2", 0x28}};
	const auto read_ctl = [&](const char *when) {
		std::string out;
		for (auto [key, reg] : ctl_regs) {
			uint32_t v = 0;
			if (!a.has(key))
				continue;
			const int rerr = exp ? cfg.read(exp + reg, 2, v) : ENOTSUP;
			out += std::string(" ") + key + "_" + when + "=" + hex_or_errno(rerr, v);
		}
		return out;
	};
	std::string ctl;
	for (auto [key, reg] : ctl_regs)
		if (a.has(key))
			ctl += std::string(" ") + key + "_write=" +
			       ename(exp ? cfg.write(exp + reg, 2, static_cast<uint32_t>(a.num(key, 0))) : ENOTSUP);
	ctl += read_ctl("pre");
	if ((err = cfg.write(4, 2, cmd | 0x6)))
		return finish(a, err, "command register: memory space + bus master");
	if ((err = cfg.read(msix + 2, 2, msix_ctrl)) || (err = cfg.write(msix + 2, 2, msix_ctrl | 0x8000)))
		return finish(a, err, "MSI-X enable");
	int efd = set_eventfd(v.dev, VFIO_PCI_MSIX_IRQ_INDEX);
	if (efd < 0)
		return finish(a, errno, "SET_IRQS MSI-X vector 0 eventfd");

	constexpr uint32_t entries = 32;
	uint32_t cap_hi = 0, csts = 0;
	if ((err = nvme_enable(bar, low.iova, high.iova, entries, timeout_ms, cap_hi, what)))
		return finish(a, err, what);
	NvmeQueue q{bar, low.p, high.p, entries, nvme_sq_doorbell(cap_hi, 0), nvme_cq_doorbell(cap_hi, 0), efd, timeout_ms};
	// Identify Controller into the low buffer and Identify Namespace 1 into the high one, at offset off.
	struct Identified {
		uint16_t st_ctrl = 0, st_ns = 0, vid = 0;
		uint64_t nsze = 0;
		std::string model;
	};
	const auto identify = [&](size_t off, Identified &r) {
		int e = q.submit(0x06, 0, low.iova + off, 1, r.st_ctrl, what);
		if (e || (e = q.submit(0x06, 1, high.iova + off, 0, r.st_ns, what)))
			return e;
		const uint8_t *ctrl = low.p + off;
		std::memcpy(&r.vid, ctrl, sizeof(r.vid));
		std::memcpy(&r.nsze, high.p + off, sizeof(r.nsze));
		r.model.assign(reinterpret_cast<const char *>(ctrl + 24), 40);
		r.model.erase(r.model.find_last_not_of(std::string(" \0", 2)) + 1);
		return 0;
	};
	const auto right = [&](const Identified &r) {
		return !r.st_ctrl && !r.st_ns && r.vid == (id & 0xffff) && r.model.starts_with("QEMU NVMe Ctrl") &&
		       (!a.has("nsze") || r.nsze == a.num("nsze", 0));
	};
	Identified idd;
	const double t0 = now_ms();
	if ((err = identify(data_off, idd)))
		return finish(a, err, what);
	const double identify_ms = now_ms() - t0;

	char d[512];
	std::snprintf(d, sizeof(d),
		      "nvme vid=%#06x model=\"%s\" nsze=%llu irqs=%llu status=%#x/%#x low=%#llx high=%#llx %s identify_ms=%.0f",
		      idd.vid, idd.model.c_str(), static_cast<unsigned long long>(idd.nsze),
		      static_cast<unsigned long long>(q.irqs), idd.st_ctrl, idd.st_ns, static_cast<unsigned long long>(low.iova),
		      static_cast<unsigned long long>(high.iova), bar.describe().c_str(), identify_ms);
	std::string detail = d + ctl + read_ctl("borrowed");
	// --hostile A,B,...: as a malicious guest, Identify Controller again with PRP1 at each address
	// ("hostile=ADDR:STATUS,..."), then "canary=": whether both buffers are still 0xa5 past the queue
	// and identify data pages, i.e. no DMA landed in the guest's own RAM instead.
	if (a.has("hostile")) {
		std::string list = a.str("hostile"), res;
		for (size_t at = 0; at < list.size();) {
			size_t end = std::min(list.find(',', at), list.size());
			const uint64_t prp = std::strtoull(list.substr(at, end - at).c_str(), nullptr, 0);
			uint16_t st = 0;
			if ((err = q.submit(0x06, 0, prp, 1, st, what)))
				return finish(a, err, what);
			std::snprintf(d, sizeof(d), "%s%#llx:%#x", res.empty() ? "" : ",", static_cast<unsigned long long>(prp), st);
			res += d;
			at = end + 1;
		}
		const auto intact = [&](const uint8_t *p) {
			const auto a5 = [](uint8_t b) { return b == 0xa5; };
			return std::all_of(p + data_off + 4096, p + DmaBuf::size, a5);
		};
		detail += " hostile=" + res + " canary=" + (intact(low.p) && intact(high.p) ? "ok" : "bad");
	}
	bool good = right(idd) && q.irqs >= 2;

	// --again-at F1,F2,...: once each file exists, both Identify commands again on the same admin queue
	// (no bring-up: a controller reset meanwhile would not answer), into zeroed data pages, checked as
	// above: one line each, "again N: ok ..." or "again N: err ...", after "identified: ...".
	if (a.has("again-at")) {
		std::printf("identified: %s\n", detail.c_str());
		std::fflush(stdout);
	}
	for (size_t at = 0, round = 1; a.has("again-at") && at < a.str("again-at").size(); round++) {
		const std::string list = a.str("again-at");
		const size_t end = std::min(list.find(',', at), list.size());
		const std::string file = list.substr(at, end - at);
		at = end + 1;
		if ((err = wait_until(600000, [&] { return access(file.c_str(), F_OK) ? EAGAIN : 0; })))
			return finish(a, err, "waiting for " + file);
		std::memset(low.p + data_off, 0, 4096);
		std::memset(high.p + data_off, 0, 4096);
		const uint64_t irqs_before = q.irqs;
		Identified r;
		err = identify(data_off, r);
		const bool same = !err && right(r) && r.vid == idd.vid && r.nsze == idd.nsze && r.model == idd.model &&
				  q.irqs >= irqs_before + 2;
		std::printf("again %zu: %s vid=%#06x nsze=%llu irqs=%llu status=%#x/%#x%s\n", round,
			    same ? "ok" : "err", r.vid, static_cast<unsigned long long>(r.nsze),
			    static_cast<unsigned long long>(q.irqs - irqs_before), r.st_ctrl, r.st_ns,
			    err ? (" " + what + ": " + ename(err)).c_str() : "");
		std::fflush(stdout);
	}

	// --hold-until FILE: stay borrowed until FILE exists, then read a forwarded register (PCIe Device
	// Control/Status; the header if there is no PCIe capability) as the vCPU of a running VM would.
	// "held_ram=": whether both buffers are byte for byte as before the hold (nothing was submitted
	// meanwhile, so any change is another's DMA), else the first pages that changed. --again: then Identify again into the pages after
	// the first identify data, "again=ok|bad" as the first one's checks.
	if (a.has("hold-until")) {
		const std::vector<uint8_t> held_low(low.p, low.p + DmaBuf::size), held_high(high.p, high.p + DmaBuf::size);
		std::printf("identified, holding: %s\n", detail.c_str());
		std::fflush(stdout);
		const std::string file = a.str("hold-until");
		if ((err = wait_until(600000, [&] { return access(file.c_str(), F_OK) ? EAGAIN : 0; })))
			return finish(a, err, "waiting for " + file);
		std::string changed; // the IOVAs of the first 8 pages that differ
		unsigned nr_changed = 0;
		for (const auto &[buf, held] : {std::pair{&low, &held_low}, std::pair{&high, &held_high}})
			for (size_t pg = 0; pg < DmaBuf::size && nr_changed < 8; pg += 4096)
				if (std::memcmp(buf->p + pg, held->data() + pg, 4096)) {
					std::snprintf(d, sizeof(d), "%s%#llx", nr_changed++ ? "," : ":",
						      static_cast<unsigned long long>(buf->iova + pg));
					changed += d;
				}
		const uint32_t off = exp ? exp + 8 : 0;
		uint32_t val = 0;
		const double t1 = now_ms();
		err = cfg.read(off, 4, val);
		std::snprintf(d, sizeof(d), " held_off=%#x held_cfg=%s held_cfg_ms=%.0f", off, hex_or_errno(err, val).c_str(),
			      now_ms() - t1);
		detail += std::string(" held_ram=") + (nr_changed ? "changed" + changed : "same") + d;
		if (a.has("again")) {
			Identified again;
			const uint64_t irqs = q.irqs;
			if ((err = identify(data_off + 4096, again))) {
				detail += std::string(" again=") + ename(err) + " again_failed=\"" + what + "\"";
				good = false;
			} else {
				const bool ok = right(again) && q.irqs >= irqs + 2;
				std::snprintf(d, sizeof(d), " again=%s again_status=%#x/%#x", ok ? "ok" : "bad",
					      again.st_ctrl, again.st_ns);
				detail += d;
				good &= ok;
			}
		}
	}
	// --return: bus master off, then CSTS; --reset: VFIO_DEVICE_RESET, then CSTS.
	if (a.has("return")) {
		uint32_t c = 0;
		err = cfg.read(4, 2, c);
		if (!err)
			err = cfg.write(4, 2, c & ~0x4u);
		int rerr = bar.pread32(nvme_csts, csts);
		detail += std::string(" return=") + ename(err) + " return_csts=" + hex_or_errno(rerr, csts);
	}
	if (a.has("reset")) {
		err = ioctl(v.dev, VFIO_DEVICE_RESET) ? errno : 0;
		int rerr = bar.pread32(nvme_csts, csts);
		detail += std::string(" reset=") + ename(err) + " reset_csts=" + hex_or_errno(rerr, csts);
	}
	close(efd);
	return finish(a, good ? 0 : EIO, detail);
}

// A polled NVMe controller: the admin queues and I/O queue pair 1, each queue a page of BUF (admin SQ,
// admin CQ, I/O SQ, I/O CQ), no interrupts.
struct PolledNvme {
	static constexpr uint32_t entries = 16;
	const Bar &bar;
	const DmaBuf &buf;
	unsigned timeout_ms;
	std::optional<NvmeQueue> admin, io;

	int bring_up(std::string &what)
	{
		uint32_t cap_hi = 0;
		uint16_t st = 0;
		std::memset(buf.p, 0, 0x4000);	// empty queues: every CQ entry's phase tag 0
		if (int err = nvme_enable(bar, buf.iova, buf.iova + 0x1000, entries, timeout_ms, cap_hi, what))
			return err;
		admin.emplace(NvmeQueue{bar, buf.p, buf.p + 0x1000, entries, nvme_sq_doorbell(cap_hi, 0),
					nvme_cq_doorbell(cap_hi, 0), -1, timeout_ms});
		// Create I/O CQ 1 and I/O SQ 1 on it: physically contiguous, interrupts off.
		std::array<uint32_t, 16> cq{}, sq{};
		cq[0] = 0x05, cq[10] = (entries - 1) << 16 | 1, cq[11] = 1;
		set_prp1(cq, buf.iova + 0x3000);
		sq[0] = 0x01, sq[10] = (entries - 1) << 16 | 1, sq[11] = 1u << 16 | 1;
		set_prp1(sq, buf.iova + 0x2000);
		for (auto *cmd : {&cq, &sq}) {
			if (int err = admin->submit(*cmd, st, what))
				return err;
			if (st)
				return what = "Create I/O queue: status " + hex_or_errno(0, st), EIO;
		}
		io.emplace(NvmeQueue{bar, buf.p + 0x2000, buf.p + 0x3000, entries, nvme_sq_doorbell(cap_hi, 1),
				     nvme_cq_doorbell(cap_hi, 1), -1, timeout_ms});
		return 0;
	}
	// Read (opcode 2) or write (1) 4 KiB of namespace 1 at 512-byte LBA SLBA, data at PRP.
	int rw(uint8_t opcode, uint64_t slba, uint64_t prp, uint16_t &status, std::string &what)
	{
		std::array<uint32_t, 16> c{};
		c[0] = opcode, c[1] = 1;
		set_prp1(c, prp);
		c[10] = static_cast<uint32_t>(slba), c[11] = static_cast<uint32_t>(slba >> 32), c[12] = 4096 / 512 - 1;
		return io->submit(c, status, what);
	}
};

// nvme-p2p: a guest's two NVMe controllers in one container (QEMU's part), A = --mdev, B = --peer with
// a controller memory buffer (BAR2) the guest placed at --cmb-iova (default 64 GiB) and QEMU mapped
// into the container from B's BAR mmap; then the drivers' part, polled: A reads 4 KiB at LBA --lba
// into the CMB (A's DMA writes B's BAR), the CMB page goes to --dump FILE, A writes it from the CMB to
// its LBA --dst-lba (A's DMA reads B's BAR), and B, its CMB enabled at that address (CMBMSC, as a
// guest driver does), writes it from its CMB to its own LBA --peer-lba.
int run_nvme_p2p(const Args &a)
{
	const std::string ua = a.str("mdev"), ub = a.str("peer"), dump = a.str("dump");
	if (ua.empty() || ub.empty() || dump.empty())
		return 2;
	const unsigned timeout_ms = static_cast<unsigned>(a.num("timeout-ms", 10000));
	const uint64_t cmb_iova = a.num("cmb-iova", 64ull << 30), cmb_off = 0x1000;
	Vfio va, vb;
	std::string what;
	if (int err = vfio_open(ua, va, what))
		return finish(a, err, what);
	if (int err = vfio_join(ub, va.container, vb, what))
		return finish(a, err, what);
	DmaBuf ram_a, ram_b;
	if (int err = ram_a.map(va.container, 0x100000))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA of A's buffer");
	if (int err = ram_b.map(va.container, 1ull << 32))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA of B's buffer");
	Bar bar_a, bar_b, cmb;
	if (int err = bar_a.map(va.dev, VFIO_PCI_BAR0_REGION_INDEX, false, what))
		return finish(a, err, "A: " + what);
	if (int err = bar_b.map(vb.dev, VFIO_PCI_BAR0_REGION_INDEX, false, what))
		return finish(a, err, "B: " + what);
	if (int err = cmb.map(vb.dev, VFIO_PCI_BAR2_REGION_INDEX, false, what))
		return finish(a, err, "B's CMB: " + what);
	if (cmb.areas.size() != 1 || cmb.areas[0].off || cmb.areas[0].size != cmb.size || cmb.size < 2 * cmb_off)
		return finish(a, ENOTSUP, "B's BAR2 not one mmap of the whole CMB: " + cmb.describe());
	// As QEMU's VFIO listener maps an assigned device's mmapped BAR where the guest placed it.
	if (int err = vfio_dma_map(va.container, cmb.areas[0].p, cmb_iova, cmb.size, false))
		return finish(a, err, "VFIO_IOMMU_MAP_DMA of B's CMB mmap");
	Cfg cfg_a{va.dev}, cfg_b{vb.dev};
	uint32_t cmd_a = 0, cmd_b = 0;
	if (int err = cfg_command(va, cfg_a, cmd_a, what))
		return finish(a, err, "A: " + what);
	if (int err = cfg_command(vb, cfg_b, cmd_b, what))
		return finish(a, err, "B: " + what);
	// The guest places B's BAR2 (64-bit) and enables both: B borrows, then A, whose window then leads
	// to B's CMB (or A first: B's borrow then maps A's way to it on a lender of both).
	int err = cfg_b.write(0x18, 4, static_cast<uint32_t>(cmb_iova)) | cfg_b.write(0x1c, 4, static_cast<uint32_t>(cmb_iova >> 32));
	if (err)
		return finish(a, err, "B's BAR2 in config space");
	const bool peer_last = a.has("peer-last");
	for (int i = 0; i < 2; i++) {
		const bool b_now = (i == 0) != peer_last;
		if ((err = (b_now ? cfg_b : cfg_a).write(4, 2, (b_now ? cmd_b : cmd_a) | 0x6)))
			return finish(a, err, std::string(b_now ? "B" : "A") + ": memory space and bus master on (BORROW)");
	}
	const unsigned long long peers = debugfs_counter("dma_peers"), lender_peers = debugfs_counter("dma_lender_peers");

	PolledNvme na{bar_a, ram_a, timeout_ms, {}, {}}, nb{bar_b, ram_b, timeout_ms, {}, {}};
	if ((err = na.bring_up(what)))
		return finish(a, err, "A: " + what);
	uint16_t st_read = 0, st_write = 0, st_peer = 0;
	auto *page = cmb.areas[0].p + cmb_off;
	std::memset(page, 0, 4096);
	if ((err = na.rw(0x02, a.num("lba", 0), cmb_iova + cmb_off, st_read, what)))
		return finish(a, err, "A's read into the CMB: " + what);
	std::vector<uint8_t> copy(page, page + 4096);
	if (FILE *f = std::fopen(dump.c_str(), "w")) {
		const bool ok = std::fwrite(copy.data(), 1, copy.size(), f) == copy.size();
		if (std::fclose(f) || !ok)
			return finish(a, EIO, dump);
	} else {
		return finish(a, errno, dump);
	}
	if ((err = na.rw(0x01, a.num("dst-lba", 8), cmb_iova + cmb_off, st_write, what)))
		return finish(a, err, "A's write from the CMB: " + what);
	if ((err = nb.bring_up(what)))
		return finish(a, err, "B: " + what);
	// CMBMSC (0x50): upper half first, then CBA, CMSE and CRE in the lower (which takes effect).
	if ((err = bar_b.write32(0x54, static_cast<uint32_t>(cmb_iova >> 32))) ||
	    (err = bar_b.write32(0x50, static_cast<uint32_t>(cmb_iova & 0xfffff000u) | 0x3)))
		return finish(a, err, "B's CMBMSC");
	if ((err = nb.rw(0x01, a.num("peer-lba", 0), cmb_iova + cmb_off, st_peer, what)))
		return finish(a, err, "B's write from its CMB: " + what);
	// B goes as at its hot-unplug (its BAR out of the container, its mmaps and files closed) while A
	// stays borrowed: no window may lead to B's BAR any more.
	if ((err = vfio_dma_map(va.container, nullptr, cmb_iova, cmb.size, true)))
		return finish(a, err, "VFIO_IOMMU_UNMAP_DMA of B's CMB");
	cmb.unmap();
	bar_b.unmap();
	for (int *fd : {&vb.dev, &vb.group})
		close(std::exchange(*fd, -1));
	const unsigned long long peers_closed = debugfs_counter("dma_peers");
	const unsigned long long lender_peers_closed = debugfs_counter("dma_lender_peers");
	char d[256];
	std::snprintf(d, sizeof(d),
		      "read=%#x write=%#x peer_write=%#x cmb=%#llx peers=%llu lender_peers=%llu peers_closed=%llu "
		      "lender_peers_closed=%llu",
		      st_read, st_write, st_peer, static_cast<unsigned long long>(cmb.size), peers, lender_peers,
		      peers_closed, lender_peers_closed);
	return finish(a, 0, d);
}

int run(const Args &a)
{
	if (a.action == "pattern") {
		const auto p = edu_pattern(static_cast<unsigned>(a.num("seed", 1)));
		return fwrite(p.data(), 1, p.size(), stdout) == p.size() ? 0 : 1;
	}
	if (a.action == "vfio-info")
		return run_vfio_info(a);
	if (a.action == "vfio-irq")
		return run_vfio_irq(a);
	if (a.action == "vfio-intx")
		return run_vfio_intx(a);
	if (a.action == "vfio-cfg-flood")
		return run_vfio_cfg_flood(a);
	if (a.action == "vfio-bar")
		return run_vfio_bar(a);
	if (a.action == "vfio-cfg" || a.action == "vfio-dead")
		return run_vfio_cfg(a, a.action == "vfio-dead");
	if (a.action == "nvme-p2p")
		return run_nvme_p2p(a);
	if (a.action == "nvme-identify")
		return run_nvme_identify(a);
	int fd = open(a.str("dev", FARPASS_DEV_PATH).c_str(), O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return finish(a, errno, "open");
	if (a.action == "open")
		return finish(a, 0, "");
	if (a.action == "version") {
		farpass_version v{};
		v.argsz = static_cast<uint32_t>(a.num("argsz", sizeof(v)));
		v.version = static_cast<uint32_t>(a.num("api", FARPASS_API_VERSION));
		int err = ioctl(fd, FARPASS_IOCTL_VERSION, &v) ? errno : 0;
		char d[128];
		std::snprintf(d, sizeof(d), "kernel_version=%u max_devices=%u features=%#llx", v.version,
			      v.max_devices, static_cast<unsigned long long>(v.features));
		return finish(a, err, d);
	}
	if (int err = negotiate(fd, a))
		return finish(a, err, "VERSION");
	if (a.action == "announce") {
		farpass_announce an{};
		an.argsz = static_cast<uint32_t>(a.num("argsz", sizeof(an)));
		an.flags = static_cast<uint32_t>(a.num("flags", 0));
		an.device_id = static_cast<uint32_t>(a.num("id", 1));
		an.vendor = static_cast<uint16_t>(a.num("vendor", 0x1b36));
		an.device = static_cast<uint16_t>(a.num("device", 0x0010));
		an.class_code = static_cast<uint32_t>(a.num("class", 0x010802));
		copy_name(an.lender, a.str("lender", "lender"));
		copy_name(an.lender_addr, a.str("addr", "0000:00:08.0"));
		copy_name(an.ntb, a.str("ntb", "0000:00:0a.0"));
		an.bars[0].size = a.num("bar0", 0x4000);
		an.bars[0].flags = FARPASS_BAR_MEM64;
		if (a.has("bar0-win")) {
			an.bars[0].flags |= FARPASS_BAR_MAPPED;
			an.bars[0].win_offset = a.num("bar0-win", 0);
		}
		an.irq_slot = static_cast<uint32_t>(a.num("irq-slot", 0));
		// --tail N: pass a struct N bytes larger than this uapi's (a newer agent), whose last byte is
		// --tail-byte (default 0): the kernel accepts zeros it does not know, and nothing else.
		std::vector<unsigned char> buf(sizeof(an) + a.num("tail", 0));
		if (buf.size() > sizeof(an)) {
			an.argsz = static_cast<uint32_t>(buf.size());
			buf.back() = static_cast<unsigned char>(a.num("tail-byte", 0));
		}
		std::memcpy(buf.data(), &an, sizeof(an));
		int err = ioctl(fd, FARPASS_IOCTL_ANNOUNCE_DEVICE, buf.data()) ? errno : 0;
		std::memcpy(&an, buf.data(), sizeof(an));
		return finish(a, err, err ? "" : "flags=" + std::to_string(an.flags));
	}
	if (a.action == "withdraw") {
		farpass_withdraw w{};
		w.argsz = sizeof(w);
		w.device_id = static_cast<uint32_t>(a.num("id", 1));
		int err = ioctl(fd, FARPASS_IOCTL_WITHDRAW_DEVICE, &w) ? errno : 0;
		return finish(a, err, err ? "" : "flags=" + std::to_string(w.flags));
	}
	if (a.action == "unknown-ioctl") {
		farpass_version v{};
		v.argsz = sizeof(v);
		int err = ioctl(fd, _IOWR(FARPASS_IOCTL_TYPE, 99, struct farpass_version), &v) ? errno : 0;
		return finish(a, err, "");
	}
	if (a.action == "upcall-get") {
		farpass_upcall_req r{};
		r.argsz = sizeof(r);
		r.flags = a.has("nonblock") ? FARPASS_UPCALL_GET_F_NONBLOCK : 0;
		r.wait_ms = static_cast<uint32_t>(a.num("wait-ms", 0));
		int err = ioctl(fd, FARPASS_IOCTL_UPCALL_GET, &r) ? errno : 0;
		return finish(a, err, err ? "" : "seq=" + std::to_string(r.seq) + " op=" + op_name(r.op));
	}
	if (a.action == "upcall-reply") {
		farpass_upcall_reply r{};
		r.argsz = sizeof(r);
		r.flags = static_cast<uint32_t>(a.num("flags", 0));
		r.seq = a.num("seq", 1);
		r.error = static_cast<int32_t>(std::strtol(a.str("error", "0").c_str(), nullptr, 0));
		int err = ioctl(fd, FARPASS_IOCTL_UPCALL_REPLY, &r) ? errno : 0;
		return finish(a, err, "");
	}
	if (a.action == "agent")
		return run_agent(a, fd);
	if (a.action == "window")
		return run_window(a, fd);
	if (a.action == "link-status") {
		farpass_link_status st{};
		st.argsz = sizeof(st);
		copy_name(st.ntb, a.str("ntb", "0000:00:0a.0"));
		int err = ioctl(fd, FARPASS_IOCTL_LINK_STATUS, &st) ? errno : 0;
		return finish(a, err, err ? "" : "up=" + std::to_string(st.state & FARPASS_LINK_UP ? 1 : 0) +
					      " peer_ok=" + std::to_string(st.state & FARPASS_LINK_PEER_OK ? 1 : 0) +
					      " down_ms=" + std::to_string(st.down_ms));
	}
	if (a.action == "edu-dma")
		return run_edu_dma(a, fd);
	if (a.action == "window-rw")
		return run_window_rw(a, fd);
	if (a.action == "bar-map")
		return run_bar_map(a, fd);
	if (a.action == "mbox-garbage")
		return run_mbox_garbage(a, fd);
	if (a.action == "irq-bridge")
		return run_irq_bridge(a, fd);
	if (a.action == "irq-unmask")
		return run_irq_unmask(a, fd);
	if (a.action == "window-stamp")
		return run_window_stamp(a, fd);
	if (a.action == "vfio-dma")
		return run_vfio_dma(a, fd);
	if (a.action == "fuzz")
		return run_fuzz(a, fd);
	if (a.action == "vfio-two")
		return run_vfio_two(a, fd);
	if (a.action == "vfio-borrow")
		return run_vfio_borrow(a, fd);
	if (a.action == "vfio-huge")
		return run_vfio_huge(a, fd);
	if (a.action == "dma-layout") {
		farpass_dma_layout l;
		int err = dma_layout(fd, static_cast<uint32_t>(a.num("id", 1)), l);
		std::string slots, offsets;
		for (uint32_t i = 0; !err && i < l.nr_slots && i < FARPASS_DMA_SLOTS; i++) {
			char slot[64];
			std::snprintf(slot, sizeof slot, "%s%#llx+%#llx", i ? "," : "",
				      (unsigned long long)l.slots[i].gpa, (unsigned long long)l.slots[i].size);
			slots += slot;
			std::snprintf(slot, sizeof slot, "%s%#llx", i ? "," : "", (unsigned long long)l.slots[i].offset);
			offsets += slot;
		}
		return finish(a, err, err ? "" : "nr=" + std::to_string(l.nr_slots) + " pinned=" +
					     std::to_string(l.pages_pinned) + " offsets=" + offsets + " slots=" + slots);
	}
	std::fprintf(stderr, "unknown action %s\n", a.action.c_str());
	return 2;
}

} // namespace

int main(int argc, char **argv)
{
	Args a;
	if (argc < 2) {
		std::fprintf(stderr, "usage: farpass-client ACTION [options] (see the source)\n");
		return 2;
	}
	a.action = argv[1];
	for (int i = 2; i < argc; i++) {
		std::string_view s = argv[i];
		if (s.starts_with("--")) {
			std::string key(s.substr(2));
			if (key == "no-version" || key == "nonblock" || key == "unmapped" || key == "split" ||
			    key == "unmap" || key == "clear" || key == "bad-fd" || key == "return" ||
			    key == "reset" || key == "no-mmap" || key == "mmap" || key == "lease" ||
			    key == "borrow" || key == "again" || key == "when-unpinning" || key == "peer-last")
				a.opt[key] = "1";
			else if (i + 1 < argc)
				a.opt[key] = argv[++i];
			else
				return 2;
		} else {
			a.positional.emplace_back(s);
		}
	}
	return run(a);
}
