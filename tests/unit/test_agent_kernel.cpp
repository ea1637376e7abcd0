// FarpassKernelPort (lender-agent/farpass_device.cpp), the agent's side of /dev/farpass, against a fake
// device file that follows docs/uapi.md's rules (VERSION first, argsz/flags/pad, errno per ioctl), and
// against a real file that is not the farpass device.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "farpass_device.hpp"

#include "farpass_uapi.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <deque>
#include <tuple>

using namespace farpass::agent;
using namespace farpass::agent::testing;

namespace {

// What the kernel keeps for one open file and for the host.
struct FakeKernel {
	std::uint32_t version = FARPASS_API_VERSION;
	std::uint64_t features = FARPASS_FEAT_BORROWER;
	std::map<std::uint32_t, farpass_announce> announced;
	std::deque<farpass_upcall_req> upcalls;
	std::vector<farpass_upcall_reply> replies;
	std::vector<unsigned> commands; // every ioctl number, in order, across files
	int opens = 0;
	int lose_version_once = 0; // answer EPROTO to the next non-VERSION ioctl (as after a module reload)
	// Outbound windows of the one NTB "0000:00:0a.0" (sizes), link state, and the live mappings.
	std::vector<std::uint64_t> windows{64 << 20, 1u << 30};
	bool link_up = true;
	std::uint64_t down_ms = 0; // LINK_STATUS while the link is down
	std::map<std::uint64_t, std::vector<std::byte>> mapped; // by mmap offset
	int maps = 0, unmaps = 0;
	// The data path: DMA layouts by device id, BAR window mappings (ntb, pci, bar) -> (offset, size),
	// interrupt relays (ntb, slot) -> vectors.
	std::map<std::uint32_t, std::vector<farpass_dma_slot>> layouts;
	std::map<std::tuple<std::string, std::string, std::uint32_t>, std::pair<std::uint64_t, std::uint64_t>> bars;
	std::map<std::pair<std::string, std::uint32_t>, std::uint32_t> relays;
	std::uint32_t last_bridge_argsz = 0;
};

bool nul_terminated(const char (&name)[FARPASS_NAME_LEN])
{
	return std::memchr(name, '\0', sizeof(name)) != nullptr;
}

class FakeFarpassFile final : public DeviceFile {
public:
	explicit FakeFarpassFile(FakeKernel &kernel) : kernel_(kernel) { kernel_.opens++; }

	int fd() const override { return 42; }

	int ioctl(unsigned long request, void *argument) override
	{
		if (_IOC_TYPE(request) != FARPASS_IOCTL_TYPE)
			return ENOTTY;
		const unsigned command = _IOC_NR(request);
		kernel_.commands.push_back(command);
		const std::uint32_t argsz = *static_cast<std::uint32_t *>(argument);
		const std::uint32_t flags = static_cast<std::uint32_t *>(argument)[1];
		if (command == FARPASS_CMD_VERSION) {
			auto *v = static_cast<farpass_version *>(argument);
			if (argsz < 12 || flags)
				return EINVAL;
			const bool ok = v->version == kernel_.version;
			v->version = kernel_.version;
			if (!ok)
				return EPROTONOSUPPORT;
			v->max_devices = FARPASS_MAX_DEVICES;
			v->features = kernel_.features;
			negotiated_ = true;
			return 0;
		}
		if (!negotiated_)
			return EPROTO;
		if (kernel_.lose_version_once) {
			kernel_.lose_version_once = 0;
			negotiated_ = false;
			return EPROTO;
		}
		switch (command) {
		case FARPASS_CMD_ANNOUNCE_DEVICE: {
			auto *a = static_cast<farpass_announce *>(argument);
			if (argsz < sizeof(*a) || flags || !nul_terminated(a->lender) || !nul_terminated(a->ntb) ||
			    !nul_terminated(a->lender_addr))
				return EINVAL;
			for (const auto pad : a->pad0)
				if (pad)
					return EINVAL;
			if (kernel_.announced.count(a->device_id))
				return EEXIST;
			kernel_.announced[a->device_id] = *a;
			return 0;
		}
		case FARPASS_CMD_WITHDRAW_DEVICE: {
			auto *w = static_cast<farpass_withdraw *>(argument);
			if (argsz < sizeof(*w) || flags || w->pad)
				return EINVAL;
			if (!kernel_.announced.erase(w->device_id))
				return ENOENT;
			return 0;
		}
		case FARPASS_CMD_UPCALL_GET: {
			if (!(kernel_.features & FARPASS_FEAT_UPCALLS))
				return EOPNOTSUPP;
			if (kernel_.upcalls.empty())
				return EAGAIN; // the port opens the file O_NONBLOCK
			*static_cast<farpass_upcall_req *>(argument) = kernel_.upcalls.front();
			kernel_.upcalls.pop_front();
			return 0;
		}
		case FARPASS_CMD_OUTBOUND_WINDOW: {
			auto *w = static_cast<farpass_outbound_window *>(argument);
			if (argsz < sizeof(*w) || flags || !nul_terminated(w->ntb))
				return EINVAL;
			if (std::string(w->ntb) != "0000:00:0a.0")
				return ENODEV;
			w->count = static_cast<std::uint32_t>(kernel_.windows.size());
			if (w->mw >= kernel_.windows.size())
				return ENOENT;
			if (!kernel_.link_up)
				return ENOLINK;
			w->size = kernel_.windows[w->mw];
			w->offset = std::uint64_t{w->mw + 1} << 40;
			return 0;
		}
		case FARPASS_CMD_UPCALL_REPLY: {
			if (!(kernel_.features & FARPASS_FEAT_UPCALLS))
				return EOPNOTSUPP;
			const auto *r = static_cast<farpass_upcall_reply *>(argument);
			if (argsz < sizeof(*r) || flags || r->pad)
				return EINVAL;
			kernel_.replies.push_back(*r);
			return 0;
		}
		case FARPASS_CMD_DMA_LAYOUT: {
			if (!(kernel_.features & FARPASS_FEAT_DATA_PATH))
				return EOPNOTSUPP;
			auto *l = static_cast<farpass_dma_layout *>(argument);
			if (argsz < sizeof(*l) || flags)
				return EINVAL;
			const auto layout = kernel_.layouts.find(l->device_id);
			if (layout == kernel_.layouts.end())
				return ENOENT;
			l->nr_slots = static_cast<std::uint32_t>(layout->second.size());
			std::copy(layout->second.begin(), layout->second.end(), l->slots);
			return 0;
		}
		case FARPASS_CMD_BAR_MAP: {
			if (!(kernel_.features & FARPASS_FEAT_DATA_PATH))
				return EOPNOTSUPP;
			const auto *m = static_cast<farpass_bar_map *>(argument);
			if (argsz < sizeof(*m) || (flags & ~FARPASS_BAR_MAP_F_UNMAP) || m->pad || !nul_terminated(m->ntb) ||
			    !nul_terminated(m->pci) || m->bar >= FARPASS_NUM_BARS || m->win_offset % 4096 || m->size % 4096)
				return EINVAL;
			const auto key = std::make_tuple(std::string(m->ntb), std::string(m->pci), m->bar);
			if (flags & FARPASS_BAR_MAP_F_UNMAP)
				return kernel_.bars.erase(key) ? 0 : ENOENT;
			return kernel_.bars.emplace(key, std::make_pair(m->win_offset, m->size)).second ? 0 : EEXIST;
		}
		case FARPASS_CMD_IRQ_BRIDGE: {
			if (!(kernel_.features & FARPASS_FEAT_DATA_PATH))
				return EOPNOTSUPP;
			const auto *b = static_cast<farpass_irq_bridge *>(argument);
			kernel_.last_bridge_argsz = argsz;
			if (argsz != sizeof(*b) + b->count * sizeof(__s32) || (flags & ~FARPASS_IRQ_BRIDGE_F_CLEAR) || b->pad ||
			    !nul_terminated(b->ntb) || b->irq_slot >= FARPASS_IRQ_SLOTS ||
			    b->start + b->count > FARPASS_IRQ_VECTORS || ((flags & FARPASS_IRQ_BRIDGE_F_CLEAR) && b->count))
				return EINVAL;
			for (std::uint32_t i = 0; i < b->count; i++)
				if (b->fds[i] < 0)
					return EBADF;
			if (flags & FARPASS_IRQ_BRIDGE_F_CLEAR)
				kernel_.relays.erase({b->ntb, b->irq_slot});
			else
				kernel_.relays[{b->ntb, b->irq_slot}] = b->start + b->count;
			return 0;
		}
		case FARPASS_CMD_LINK_STATUS: {
			if (!(kernel_.features & FARPASS_FEAT_LINK_STATUS))
				return ENOTTY;
			auto *st = static_cast<farpass_link_status *>(argument);
			if (argsz < sizeof(*st) || flags || st->pad || !nul_terminated(st->ntb))
				return EINVAL;
			if (std::string(st->ntb) != "0000:00:0a.0")
				return ENODEV;
			st->state = kernel_.link_up ? FARPASS_LINK_UP | FARPASS_LINK_PEER_OK : 0;
			st->down_ms = kernel_.link_up ? 0 : kernel_.down_ms;
			return 0;
		}
		default:
			return ENOTTY;
		}
	}

	std::unique_ptr<WindowMapping> map(std::size_t length, std::uint64_t offset, int &error) override
	{
		const std::size_t mw = (offset >> 40) - 1;
		if (!negotiated_ || mw >= kernel_.windows.size() || length > kernel_.windows[mw]) {
			error = EINVAL;
			return nullptr;
		}
		auto &memory = kernel_.mapped[offset];
		memory.resize(length); // stands for the window (the real one may be 1 GiB: only touched pages count)
		kernel_.maps++;
		FakeKernel *kernel = &kernel_;
		return std::make_unique<WindowMapping>(std::span<std::byte>(memory), [kernel, offset](void *, std::size_t) {
			kernel->unmaps++;
			kernel->mapped.erase(offset);
		});
	}

private:
	FakeKernel &kernel_;
	bool negotiated_ = false;
};

struct Fixture {
	FakeKernel kernel;
	bool loaded = true;
	FarpassKernelPort port{[this]() -> std::unique_ptr<DeviceFile> {
		if (!loaded)
			throw AgentError(ErrorCode::system_error, ENOENT, "opening /dev/farpass: No such file or directory");
		return std::make_unique<FakeFarpassFile>(kernel);
	},
				  {{"borrower1", "0000:00:0a.0"}, {"borrower2", "0000:00:0b.0"}}};
};

RemoteDevice nvme()
{
	RemoteDevice d;
	d.id = 0x1234567;
	d.lender_host = "lender";
	d.pci_address = "0000:00:08.0";
	d.ntb = "0000:00:0a.0";
	d.vendor = 0x1b36;
	d.device = 0x0010;
	d.subsystem_vendor = 0x1af4;
	d.subsystem_device = 0x1100;
	d.class_code = 0x010802;
	d.revision = 2;
	d.bar_sizes = {0x4000, 0, 0, 0, 0, 0};
	d.bar_flags = {bar_mem64, 0, 0, 0, 0, 0};
	return d;
}

int error_number_of(const std::function<void()> &action)
{
	try {
		action();
	} catch (const AgentError &e) {
		return e.error_number();
	}
	return 0;
}

} // namespace

TEST_CASE("VERSION is the first ioctl on the file, and decides availability and features")
{
	Fixture f;
	CHECK(f.port.available());
	CHECK(f.port.unavailable_reason().empty());
	REQUIRE(!f.kernel.commands.empty());
	CHECK(f.kernel.commands.front() == FARPASS_CMD_VERSION);
	CHECK(f.port.kernel_version() == FARPASS_API_VERSION);
	CHECK(f.port.upcall_fd() == -1); // no FARPASS_FEAT_UPCALLS: no upcall descriptor to poll
	CHECK(f.port.next_upcall() == std::nullopt);
	CHECK(f.port.available());
	CHECK(f.kernel.opens == 1); // kept open
}

TEST_CASE("no module yet: unavailable with the reason, then available once it is loaded")
{
	Fixture f;
	f.loaded = false;
	CHECK_FALSE(f.port.available());
	CHECK(f.port.unavailable_reason().find("No such file") != std::string::npos);
	CHECK(error_number_of([&] { f.port.announce(nvme()); }) == ENODEV);
	f.loaded = true;
	CHECK(f.port.available());
	CHECK_NOTHROW(f.port.announce(nvme()));
}

TEST_CASE("a kernel of another uapi version: unavailable, both versions named")
{
	Fixture f;
	f.kernel.version = 1; // before the data path
	CHECK_FALSE(f.port.available());
	CHECK(f.port.unavailable_reason() ==
	      "VERSION: EPROTONOSUPPORT: the kernel speaks another uapi version (kernel 1, agent " +
		      std::to_string(FARPASS_API_VERSION) + ")");
}

TEST_CASE("ANNOUNCE_DEVICE carries every field, argsz = sizeof, flags 0")
{
	Fixture f;
	CHECK_NOTHROW(f.port.announce(nvme()));
	REQUIRE(f.kernel.announced.count(0x1234567));
	const farpass_announce &a = f.kernel.announced[0x1234567];
	CHECK(a.argsz == sizeof(farpass_announce));
	CHECK(a.vendor == 0x1b36);
	CHECK(a.device == 0x0010);
	CHECK(a.subsystem_vendor == 0x1af4);
	CHECK(a.subsystem_device == 0x1100);
	CHECK(a.class_code == 0x010802);
	CHECK(a.revision == 2);
	CHECK(std::string(a.lender) == "lender");
	CHECK(std::string(a.lender_addr) == "0000:00:08.0");
	CHECK(std::string(a.ntb) == "0000:00:0a.0");
	CHECK(a.bars[0].size == 0x4000);
	CHECK(a.bars[0].flags == FARPASS_BAR_MEM64);
	CHECK(a.bars[1].size == 0);
	CHECK(a.bars[0].win_offset == 0);
	CHECK(a.irq_slot == 0);

	// BAR window places reach a kernel with the data path only.
	RemoteDevice placed = nvme();
	placed.id = 7;
	placed.bar_flags[0] |= bar_mapped;
	placed.bar_offsets[0] = 3 << 22;
	placed.irq_slot = 3;
	CHECK_NOTHROW(f.port.announce(placed));
	CHECK(f.kernel.announced[7].bars[0].flags == FARPASS_BAR_MEM64);
	CHECK(f.kernel.announced[7].bars[0].win_offset == 0);
	CHECK(f.kernel.announced[7].irq_slot == 3);
	Fixture data_path;
	data_path.kernel.features |= FARPASS_FEAT_DATA_PATH;
	CHECK_NOTHROW(data_path.port.announce(placed));
	CHECK(data_path.kernel.announced[7].bars[0].flags == (FARPASS_BAR_MEM64 | FARPASS_BAR_MAPPED));
	CHECK(data_path.kernel.announced[7].bars[0].win_offset == 3 << 22);
	CHECK(data_path.kernel.announced[7].irq_slot == 3);
}

TEST_CASE("errno of each ioctl becomes a system_error naming the ioctl and what the errno means")
{
	Fixture f;
	f.port.announce(nvme());
	try {
		f.port.announce(nvme());
		FAIL("a duplicate id must fail");
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::system_error);
		CHECK(e.error_number() == EEXIST);
		CHECK(std::string(e.what()) == "announcing lender 0000:00:08.0 as id 19088743: ANNOUNCE_DEVICE: EEXIST: "
					       "the device id is already announced");
	}
	CHECK(error_number_of([&] { f.port.withdraw(99); }) == ENOENT);
	CHECK_NOTHROW(f.port.withdraw(0x1234567));
	CHECK(farpass_errno_text(FARPASS_CMD_ANNOUNCE_DEVICE, EADDRINUSE) ==
	      "ANNOUNCE_DEVICE: EADDRINUSE: the device's slot (mdev type), or its place in the BAR window, holds "
	      "another announced device");
	CHECK(farpass_errno_text(FARPASS_CMD_ANNOUNCE_DEVICE, EINVAL).ends_with("or the NTB's mdev types are another lender's"));
	CHECK(farpass_errno_text(FARPASS_CMD_WITHDRAW_DEVICE, EBUSY) ==
	      "WITHDRAW_DEVICE: EBUSY: an mdev instance of the type exists");
	CHECK(farpass_errno_text(FARPASS_CMD_UPCALL_REPLY, ENOENT) ==
	      "UPCALL_REPLY: ENOENT: no such pending request (answered too late?)");
}

TEST_CASE("names that do not fit the uapi's char[32] are refused before any ioctl")
{
	Fixture f;
	REQUIRE(f.port.available());
	const std::size_t before = f.kernel.commands.size();
	RemoteDevice d = nvme();
	d.lender_host = std::string(32, 'a');
	CHECK_THROWS_AS(f.port.announce(d), AgentError);
	d = nvme();
	d.ntb = "";
	CHECK_THROWS_AS(f.port.announce(d), AgentError);
	d = nvme();
	d.id = 1u << 31;
	CHECK_THROWS_AS(f.port.announce(d), AgentError);
	CHECK(f.kernel.commands.size() == before);
}

TEST_CASE("a file that lost its VERSION (EPROTO) is dropped: the next call opens and negotiates again")
{
	Fixture f;
	REQUIRE(f.port.available());
	f.kernel.lose_version_once = 1;
	CHECK(error_number_of([&] { f.port.announce(nvme()); }) == EPROTO);
	CHECK_NOTHROW(f.port.announce(nvme()));
	CHECK(f.kernel.opens == 2);
	CHECK(f.kernel.commands[f.kernel.commands.size() - 2] == FARPASS_CMD_VERSION);
}

TEST_CASE("upcalls: GET until EAGAIN, REPLY with seq, error and data")
{
	Fixture f;
	f.kernel.features |= FARPASS_FEAT_UPCALLS;
	REQUIRE(f.port.available());
	CHECK(f.port.upcall_fd() == 42);
	farpass_upcall_req request{};
	request.seq = 77;
	request.op = FARPASS_UPCALL_CFG_READ;
	request.device_id = 5;
	request.timeout_ms = 900;
	request.args[0] = 0x10;
	request.args[1] = 4;
	f.kernel.upcalls.push_back(request);
	const auto upcall = f.port.next_upcall();
	REQUIRE(upcall);
	CHECK(upcall->seq == 77);
	CHECK(upcall->op == static_cast<std::uint32_t>(UpcallOp::config_read));
	CHECK(upcall->device_id == 5);
	CHECK(upcall->timeout_ms == 900);
	CHECK(upcall->args[0] == 0x10);
	CHECK(upcall->args[1] == 4);
	CHECK(f.port.next_upcall() == std::nullopt); // EAGAIN
	UpcallReply reply;
	reply.error = -EBUSY;
	reply.data[0] = 0xfebc0000;
	f.port.complete(77, reply);
	REQUIRE(f.kernel.replies.size() == 1);
	CHECK(f.kernel.replies[0].argsz == sizeof(farpass_upcall_reply));
	CHECK(f.kernel.replies[0].seq == 77);
	CHECK(f.kernel.replies[0].error == -EBUSY);
	CHECK(f.kernel.replies[0].data[0] == 0xfebc0000);
}

TEST_CASE("the real file seam: a file that is not /dev/farpass answers ENOTTY to VERSION")
{
	TempDir dir;
	write_file(dir.path() / "not-farpass", "");
	FarpassKernelPort port(open_device_path((dir.path() / "not-farpass").string()));
	CHECK_FALSE(port.available());
	CHECK(port.unavailable_reason() == "VERSION: ENOTTY: the kernel does not know this ioctl");
	FarpassKernelPort missing(open_device_path((dir.path() / "missing").string()));
	CHECK_FALSE(missing.available());
	CHECK(missing.unavailable_reason().find("opening ") == 0);
}

TEST_CASE("outbound_window: the NTB towards the borrower, its largest window, mmapped once and unmapped with the port")
{
	{
		Fixture f;
		f.kernel.windows = {64 << 20, 16 << 20}; // the largest first: it still wins over the later smaller one
		const auto window = f.port.outbound_window("borrower1");
		CHECK(window.size() == 64 << 20);
		REQUIRE(f.kernel.mapped.count(std::uint64_t{1} << 40) == 1);
		CHECK(window.data() == f.kernel.mapped[std::uint64_t{1} << 40].data());
		const auto again = f.port.outbound_window("borrower1"); // kept: VFIO mappings point into it
		CHECK(again.data() == window.data());
		CHECK(f.kernel.maps == 1);
		CHECK(f.kernel.unmaps == 0);
		CHECK(std::count(f.kernel.commands.begin(), f.kernel.commands.end(), FARPASS_CMD_OUTBOUND_WINDOW) == 2);
	}
	Fixture f;
	f.kernel.windows = {64 << 20, std::uint64_t{1} << 30};
	{
		FarpassKernelPort port([&]() -> std::unique_ptr<DeviceFile> { return std::make_unique<FakeFarpassFile>(f.kernel); },
				       {{"borrower1", "0000:00:0a.0"}});
		CHECK(port.outbound_window("borrower1").size() == std::uint64_t{1} << 30); // MW2, the large one
		CHECK(f.kernel.mapped.count(std::uint64_t{2} << 40) == 1);
	}
	CHECK(f.kernel.unmaps == 1);
	CHECK(f.kernel.mapped.empty());
}

TEST_CASE("outbound_window errors: unknown borrower, NTB not bound, link down")
{
	Fixture f;
	CHECK(error_number_of([&] { f.port.outbound_window("stranger"); }) == ENOLINK);
	CHECK(error_number_of([&] { f.port.outbound_window("borrower2"); }) == ENODEV);
	f.kernel.link_up = false;
	CHECK(error_number_of([&] { f.port.outbound_window("borrower1"); }) == ENOLINK);
	try {
		f.port.outbound_window("borrower1");
	} catch (const AgentError &e) {
		CHECK(std::string(e.what()).find("OUTBOUND_WINDOW: ENOLINK: the NTB link is down") != std::string::npos);
	}
	CHECK(f.kernel.maps == 0);
	f.kernel.link_up = true;
	CHECK(f.port.outbound_window("borrower1").size() == std::uint64_t{1} << 30);
}

TEST_CASE("the data path: DMA_LAYOUT slots, BAR_MAP and its unmap, IRQ_BRIDGE with its fds and clear")
{
	Fixture f;
	f.kernel.features |= FARPASS_FEAT_DATA_PATH;
	f.kernel.layouts[5] = {{0, 0xa0000, 0, 0, 0, 0, 0},
			       {0x100000, 0x7ff00000, 0x100000, 0, 0, 0, 0},
			       {0x800000000, 0x200000, 0, FARPASS_DMA_SLOT_F_LENDER_PEER, 9, 2, 0}};
	const std::vector<DmaSlot> slots = f.port.dma_layout(5);
	REQUIRE(slots.size() == 3);
	CHECK(slots[1].gpa == 0x100000);
	CHECK(slots[1].size == 0x7ff00000);
	CHECK(slots[1].offset == 0x100000);
	CHECK_FALSE(slots[1].lender_peer);
	CHECK(slots[2].lender_peer);
	CHECK(slots[2].peer_id == 9);
	CHECK(slots[2].peer_bar == 2);
	CHECK(error_number_of([&] { f.port.dma_layout(6); }) == ENOENT);

	f.port.bar_map("0000:00:0a.0", "0000:00:08.0", 0, 0x400000, 0x4000, false);
	CHECK(f.kernel.bars.at({"0000:00:0a.0", "0000:00:08.0", 0}) == std::make_pair(std::uint64_t{0x400000}, std::uint64_t{0x4000}));
	try {
		f.port.bar_map("0000:00:0a.0", "0000:00:08.0", 0, 0x400000, 0x4000, false);
		FAIL("a second map of the same BAR must fail");
	} catch (const AgentError &e) {
		CHECK(e.error_number() == EEXIST);
		CHECK(std::string(e.what()) == "mapping BAR 0 of 0000:00:08.0 at 4194304 of NTB 0000:00:0a.0's BAR window: "
					       "BAR_MAP: EEXIST: overlaps a mapping in the BAR window");
	}
	f.port.bar_map("0000:00:0a.0", "0000:00:08.0", 0, 0x400000, 0x4000, true);
	CHECK(f.kernel.bars.empty());
	CHECK(error_number_of([&] { f.port.bar_map("0000:00:0a.0", "0000:00:08.0", 0, 0x400000, 0x4000, true); }) == ENOENT);

	const std::vector<int> fds = {10, 11, 12};
	f.port.irq_bridge("0000:00:0a.0", 3, 0, fds);
	CHECK(f.kernel.last_bridge_argsz == sizeof(farpass_irq_bridge) + 3 * sizeof(__s32));
	CHECK(f.kernel.relays.at({"0000:00:0a.0", 3}) == 3);
	f.port.irq_bridge("0000:00:0a.0", 3, 0, {});
	CHECK(f.kernel.last_bridge_argsz == sizeof(farpass_irq_bridge));
	CHECK(f.kernel.relays.empty());
	CHECK(error_number_of([&] { f.port.irq_bridge("0000:00:0a.0", 3, 0, std::vector<int>{-1}); }) == EBADF);
}

TEST_CASE("link_down_ms: LINK_STATUS's down_ms; nothing from a kernel without it, for an unknown NTB, or unloaded")
{
	Fixture f;
	f.kernel.features |= FARPASS_FEAT_LINK_STATUS;
	CHECK(f.port.link_down_ms("0000:00:0a.0") == std::uint64_t{0});
	f.kernel.link_up = false;
	f.kernel.down_ms = 12'345;
	CHECK(f.port.link_down_ms("0000:00:0a.0") == std::uint64_t{12'345});
	CHECK_FALSE(f.port.link_down_ms("0000:00:0b.0"));	// ENODEV
	CHECK_FALSE(f.port.link_down_ms(std::string(40, 'x'))); // too long for the struct: never sent
	CHECK(std::count(f.kernel.commands.begin(), f.kernel.commands.end(), FARPASS_CMD_LINK_STATUS) == 3);

	Fixture old; // no FARPASS_FEAT_LINK_STATUS: not even asked
	CHECK_FALSE(old.port.link_down_ms("0000:00:0a.0"));
	CHECK(std::count(old.kernel.commands.begin(), old.kernel.commands.end(), FARPASS_CMD_LINK_STATUS) == 0);
	Fixture unloaded;
	unloaded.loaded = false;
	CHECK_FALSE(unloaded.port.link_down_ms("0000:00:0a.0"));
}

TEST_CASE("a kernel without the data path answers EOPNOTSUPP, named as such")
{
	Fixture f;
	try {
		f.port.bar_map("0000:00:0a.0", "0000:00:08.0", 0, 0, 0x4000, false);
		FAIL("BAR_MAP must fail without FARPASS_FEAT_DATA_PATH");
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::system_error);
		CHECK(e.error_number() == EOPNOTSUPP);
		CHECK(std::string(e.what()).find("BAR_MAP: EOPNOTSUPP: the kernel has no data path") != std::string::npos);
	}
	CHECK(error_number_of([&] { f.port.dma_layout(5); }) == EOPNOTSUPP);
	CHECK(error_number_of([&] { f.port.irq_bridge("0000:00:0a.0", 0, 0, {}); }) == EOPNOTSUPP);
	CHECK(farpass_errno_text(FARPASS_CMD_BAR_MAP, EPERM) == "BAR_MAP: EPERM: the device is not bound to vfio-pci");
	CHECK(farpass_errno_text(FARPASS_CMD_DMA_LAYOUT, ENODATA) ==
	      "DMA_LAYOUT: ENODATA: no instance of the device is borrowing it now");
}
