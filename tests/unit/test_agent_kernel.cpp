// FarpassKernelPort (lender-agent/farpass_device.cpp), the agent's side of /dev/farpass, against a fake
// device file that follows docs/uapi.md's rules (VERSION first, argsz/flags/pad, errno per ioctl), and
// against a real file that is not the farpass device.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "farpass_device.hpp"

#include <uapi/farpass.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <deque>

using namespace farpass::agent;
using namespace farpass::agent::testing;

namespace {

// What the kernel keeps for one open file and for the host.
struct FakeKernel {
	std::uint32_t version = FARPASS_API_VERSION;
	std::uint64_t features = FARPASS_FEAT_BORROWER;
	bool pending = false;
	std::map<std::uint32_t, farpass_announce> announced;
	std::deque<farpass_upcall_req> upcalls;
	std::vector<farpass_upcall_reply> replies;
	std::vector<unsigned> commands; // every ioctl number, in order, across files
	int opens = 0;
	int lose_version_once = 0; // answer EPROTO to the next non-VERSION ioctl (as after a module reload)
	// Outbound windows of the one NTB "0000:00:0a.0" (sizes), link state, and the live mappings.
	std::vector<std::uint64_t> windows{64 << 20, 1u << 30};
	bool link_up = true;
	std::map<std::uint64_t, std::vector<std::byte>> mapped; // by mmap offset
	int maps = 0, unmaps = 0;
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
			a->flags = kernel_.pending ? FARPASS_ANNOUNCE_F_PENDING : 0;
			return 0;
		}
		case FARPASS_CMD_WITHDRAW_DEVICE: {
			auto *w = static_cast<farpass_withdraw *>(argument);
			if (argsz < sizeof(*w) || flags || w->pad)
				return EINVAL;
			if (!kernel_.announced.erase(w->device_id))
				return ENOENT;
			w->flags = kernel_.pending ? FARPASS_WITHDRAW_F_PENDING : 0;
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
	CHECK(f.port.kernel_version() == 1);
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
	CHECK_FALSE(f.port.announce(nvme()));
}

TEST_CASE("a kernel of another uapi version: unavailable, both versions named")
{
	Fixture f;
	f.kernel.version = 2;
	CHECK_FALSE(f.port.available());
	CHECK(f.port.unavailable_reason() ==
	      "VERSION: EPROTONOSUPPORT: the kernel speaks another uapi version (kernel 2, agent 1)");
}

TEST_CASE("ANNOUNCE_DEVICE carries every field, argsz = sizeof, flags 0; PENDING is read back")
{
	Fixture f;
	CHECK_FALSE(f.port.announce(nvme()));
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

	RemoteDevice second = nvme();
	second.id = 8;
	f.kernel.pending = true;
	CHECK(f.port.announce(second)); // deferred: an instance exists on the NTB
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
					       "the device id is in use (maybe by a withdrawal still pending)");
	}
	CHECK(error_number_of([&] { f.port.withdraw(99); }) == ENOENT);
	CHECK_FALSE(f.port.withdraw(0x1234567));
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
	CHECK(f.port.announce(nvme()) == false);
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
