// The borrower's side (lender-agent/borrower.cpp) on a fake kernel port, talking to a real lender core
// through authenticated peer sessions: devices announced with stable ids, withdrawn when their lender
// stops lending, upcalls served by the lender, leases renewed by heartbeat, state kept across restarts.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "borrower.hpp"
#include "client.hpp"

using namespace farpass::agent;
using namespace farpass::agent::testing;
using nlohmann::json;

namespace {

const ClusterKey key(test_key_secret);
constexpr const char *ntb = "0000:00:0a.0";

// Host "borrower-b" borrows from lender-a (an AgentFixture lending its NVMe) over NTB 0000:00:0a.0.
struct BorrowerFixture {
	explicit BorrowerFixture(std::string host = "borrower-b") : host(std::move(host)), store(dir.path(), "borrower.json")
	{
		lender.lender->lend(nvme_address);
		make_borrower();
	}

	void make_borrower()
	{
		borrower = std::make_unique<Borrower>(
			kernel, clock, store, std::vector<PeerAddress>{{"lender-a", "10.0.0.1:7450", ntb}},
			[this](const PeerAddress &peer, std::string_view method, const json &params) {
				calls.push_back(std::string(method));
				if (lender_down)
					throw AgentError(ErrorCode::peer_unreachable, EHOSTUNREACH,
							 "connecting to " + peer.address + ": No route to host");
				Session session(*lender.dispatcher, {Principal::peer, "lender-a", peer.address, &key},
						[](LogLevel, const std::string &) {});
				LoopbackTransport pipe(session);
				RpcClient client(pipe, host, &key);
				client.hello();
				return client.call(method, params);
			},
			[this](LogLevel, const std::string &line) { log.push_back(line); }, 5'000);
	}

	// Both hosts' clocks move together.
	void advance(std::int64_t ms)
	{
		clock.now += ms;
		lender.clock.now += ms;
	}

	UpcallReply upcall(UpcallOp op, std::uint32_t id, std::array<std::uint64_t, 6> args = {})
	{
		Upcall request;
		request.seq = ++seq;
		request.op = static_cast<std::uint32_t>(op);
		request.device_id = id;
		request.timeout_ms = 5000;
		request.args = args;
		kernel.upcalls.push_back(request);
		borrower->serve_upcalls();
		REQUIRE(kernel.replies.count(seq));
		return kernel.replies[seq];
	}

	std::uint32_t nvme_id() const { return stable_device_id("lender-a", nvme_address); }

	std::string host;
	AgentFixture lender;
	TempDir dir;
	StateStore store;
	FakeKernelPort kernel;
	FakeClock clock;
	std::unique_ptr<Borrower> borrower;
	std::vector<std::string> calls;
	std::vector<std::string> log;
	bool lender_down = false;
	std::uint64_t seq = 0;
};

} // namespace

TEST_CASE("stable ids: one per (lender, PCI address), the same on every host, below 2^31")
{
	CHECK(stable_device_id("lender", "0000:00:08.0") == stable_device_id("lender", "0000:00:08.0"));
	CHECK(stable_device_id("lender", "0000:00:08.0") != stable_device_id("lender", "0000:00:09.0"));
	CHECK(stable_device_id("lender", "0000:00:08.0") != stable_device_id("lender2", "0000:00:08.0"));
	CHECK(stable_device_id("lender", "0000:00:08.0") < (1u << 31));
	// Pinned: changing the function would rename every mdev type in the field.
	CHECK(stable_device_id("lender", "0000:00:08.0") == 0x1f0c628au);
}

TEST_CASE("refresh announces every device a lender lends, once, with its PCI identity and BARs")
{
	BorrowerFixture f;
	f.borrower->refresh();
	REQUIRE(f.kernel.announced.size() == 1);
	const RemoteDevice &d = f.kernel.announced.at(f.nvme_id());
	CHECK(d.lender_host == "lender-a");
	CHECK(d.pci_address == nvme_address);
	CHECK(d.ntb == ntb);
	CHECK(d.vendor == 0x8086);
	CHECK(d.device == 0x5845);
	CHECK(d.class_code == 0x010802);
	CHECK(d.subsystem_vendor == 0x1af4);
	CHECK(d.revision == 2);
	CHECK(d.bar_sizes[0] == 0x4000);
	CHECK(f.calls == std::vector<std::string>{"device.list"});
	f.borrower->refresh();
	CHECK(f.kernel.announce_calls == 1);

	f.lender.lender->lend(nic_address);
	f.borrower->refresh();
	CHECK(f.kernel.announced.size() == 2);
	CHECK(f.kernel.announced.count(stable_device_id("lender-a", nic_address)));
}

TEST_CASE("ids and announced devices survive a restart; a still-announced device (EEXIST) is fine")
{
	BorrowerFixture f;
	f.borrower->refresh();
	f.make_borrower(); // restart: same state directory, same kernel
	f.borrower->restore();
	f.lender_down = true; // the lender cannot be asked: the devices stay as they were
	f.borrower->refresh();
	CHECK(f.kernel.announced.size() == 1);
	REQUIRE(f.borrower->devices().size() == 1);
	CHECK(f.borrower->devices().begin()->second.announced);

	// After a module reload the kernel has nothing: the agent's next file announces everything again.
	f.kernel.announced.clear();
	f.kernel.loaded = false;
	f.borrower->tick();
	CHECK(f.kernel.announced.empty());
	f.kernel.loaded = true;
	f.advance(1000);
	f.borrower->tick();
	CHECK(f.kernel.announced.count(f.nvme_id()));
}

TEST_CASE("an id taken by another device on this host moves to the next free one, and stays there")
{
	BorrowerFixture f;
	const std::uint32_t taken = f.nvme_id();
	f.store.save({{"version", 1}, {"ids", {{"lender-z/0000:00:01.0", taken}}}, {"devices", json::array()}});
	f.borrower->restore();
	f.borrower->refresh();
	CHECK(f.kernel.announced.count(taken + 1));
	f.make_borrower();
	f.borrower->restore();
	f.kernel.announced.clear();
	f.borrower->refresh();
	CHECK(f.kernel.announced.count(taken + 1));
}

TEST_CASE("a device its lender stopped lending is withdrawn; EBUSY (an instance) is retried")
{
	BorrowerFixture f;
	f.borrower->refresh();
	f.lender.lender->unlend(nvme_address, false);
	f.kernel.busy.insert(f.nvme_id());
	f.borrower->refresh();
	CHECK(f.kernel.announced.count(f.nvme_id()));
	CHECK(f.borrower->devices().begin()->second.withdrawing);
	f.advance(1000);
	f.borrower->tick(); // still busy: logged once, kept
	f.kernel.busy.clear();
	f.advance(1000);
	f.borrower->tick();
	CHECK(f.kernel.announced.empty());
	CHECK(f.kernel.withdrawn == std::vector<std::uint32_t>{f.nvme_id()});
	CHECK(f.borrower->devices().empty());
}

TEST_CASE("an unreachable lender withdraws nothing")
{
	BorrowerFixture f;
	f.borrower->refresh();
	f.lender_down = true;
	f.borrower->refresh();
	CHECK(f.kernel.announced.size() == 1);
	CHECK(f.kernel.withdrawn.empty());
	CHECK(f.log.back().find("cannot list lender-a's devices") != std::string::npos);
}

TEST_CASE("upcalls: borrow takes the lease, config and reset go to the lender, give_back releases")
{
	BorrowerFixture f;
	f.borrower->refresh();
	const std::uint32_t id = f.nvme_id();
	f.lender.vfio.records[nvme_address]->config[0] = 0x36;
	// Before the borrow (the kernel's capability scan): a free device's config space reads without a lease.
	const UpcallReply scan = f.upcall(UpcallOp::config_read, id, {0, 1});
	CHECK(scan.error == 0);
	CHECK(scan.data[0] == 0x36);
	CHECK(f.upcall(UpcallOp::config_write, id, {4, 2, 0x0406}).error == -ENOENT); // writes need the lease
	CHECK(f.upcall(UpcallOp::borrow, id).error == 0);
	REQUIRE(f.lender.lender->devices().at(nvme_address).lease);
	CHECK(f.lender.lender->devices().at(nvme_address).lease->borrower == "borrower-b");

	f.lender.vfio.records[nvme_address]->config[0] = 0x86;
	f.lender.vfio.records[nvme_address]->config[1] = 0x80;
	const UpcallReply read = f.upcall(UpcallOp::config_read, id, {0, 2});
	CHECK(read.error == 0);
	CHECK(read.data[0] == 0x8086);
	CHECK(f.upcall(UpcallOp::config_write, id, {4, 2, 0x0406}).error == 0);
	CHECK(f.lender.vfio.records[nvme_address]->config[4] == 0x06);
	CHECK(f.upcall(UpcallOp::config_read, id, {3, 2}).error == -EINVAL); // unaligned: the lender's EINVAL
	const int resets = f.lender.vfio.records[nvme_address]->resets;
	CHECK(f.upcall(UpcallOp::reset, id).error == 0);
	CHECK(f.lender.vfio.records[nvme_address]->resets == resets + 1);
	CHECK(f.upcall(UpcallOp::give_back, id).error == 0);
	CHECK_FALSE(f.lender.lender->devices().at(nvme_address).lease);
	CHECK(f.upcall(UpcallOp::borrow, 12345).error == -ENODEV);
	CHECK(f.upcall(static_cast<UpcallOp>(99), id).error == -EOPNOTSUPP);
	f.lender_down = true;
	CHECK(f.upcall(UpcallOp::borrow, id).error == -EHOSTUNREACH);
}

TEST_CASE("a device borrowed by another host: the borrow upcall fails with EBUSY")
{
	BorrowerFixture f;
	f.lender.lender->acquire(nvme_address, "borrower-c");
	f.borrower->refresh();
	CHECK(f.upcall(UpcallOp::borrow, f.nvme_id()).error == -EBUSY);
}

TEST_CASE("held leases are renewed every lease_ms / 3 and outlive many lease times")
{
	BorrowerFixture f;
	f.borrower->refresh();
	REQUIRE(f.upcall(UpcallOp::borrow, f.nvme_id()).error == 0);
	for (int i = 0; i < 30; i++) {
		f.advance(1000);
		f.borrower->tick();
		CHECK(f.lender.lender->expire_due().empty());
	}
	CHECK(f.lender.lender->devices().at(nvme_address).lease);
	// The lease survives a restart of the borrower's agent, which renews it at once.
	f.make_borrower();
	f.borrower->restore();
	f.advance(5000);
	f.borrower->tick();
	f.advance(6000);
	CHECK(f.lender.lender->expire_due().empty());

	// A borrower that stops renewing loses the lease; noticing, it forgets it.
	f.advance(10'000);
	CHECK(f.lender.lender->expire_due().size() == 1);
	f.advance(4000);
	f.borrower->tick();
	CHECK_FALSE(f.borrower->devices().begin()->second.lease);
}
