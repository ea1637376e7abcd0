// The borrower's side (lender-agent/borrower.cpp) on a fake kernel port, talking to a real lender core
// through authenticated peer sessions: devices announced with stable ids, withdrawn when their lender
// stops lending, upcalls served by the lender, leases renewed by heartbeat, state kept across restarts.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "borrower.hpp"
#include "client.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

using namespace farpass::agent;
using namespace farpass::agent::testing;
using nlohmann::json;

namespace {

constexpr const char *ntb = "0000:00:0a.0";
constexpr const char *ntb2 = "0000:00:0b.0";

// The fake kernel, one call at a time, as the real port is (its own lock): the borrower's workers and a
// test's own threads share it. A completion wakes whoever waits for it.
class SerializedPort final : public KernelPort {
public:
	SerializedPort(KernelPort &port, std::mutex &lock, std::condition_variable &changed)
		: port_(port), lock_(lock), changed_(changed) {}
	bool available() override { return locked([&] { return port_.available(); }); }
	std::string unavailable_reason() const override { return locked([&] { return port_.unavailable_reason(); }); }
	void announce(const RemoteDevice &device) override { locked([&] { port_.announce(device); }); }
	void withdraw(std::uint32_t id) override { locked([&] { port_.withdraw(id); }); }
	std::vector<DmaSlot> dma_layout(std::uint32_t id) override { return locked([&] { return port_.dma_layout(id); }); }
	bool revoke(std::uint32_t id) override { return locked([&] { return port_.revoke(id); }); }
	int upcall_fd() const override { return locked([&] { return port_.upcall_fd(); }); }
	std::optional<Upcall> next_upcall() override { return locked([&] { return port_.next_upcall(); }); }
	void complete(std::uint64_t seq, const UpcallReply &reply) override
	{
		locked([&] { port_.complete(seq, reply); });
		changed_.notify_all();
	}
	std::span<std::byte> outbound_window(const std::string &host) override
	{
		return locked([&] { return port_.outbound_window(host); });
	}
	void bar_map(const std::string &ntb, const std::string &pci, unsigned bar, std::uint64_t win_offset,
		     std::uint64_t size, bool unmap) override
	{
		locked([&] { port_.bar_map(ntb, pci, bar, win_offset, size, unmap); });
	}
	void irq_bridge(const std::string &ntb, std::uint32_t slot, std::uint32_t start, std::span<const int> fds) override
	{
		locked([&] { port_.irq_bridge(ntb, slot, start, fds); });
	}
	void irq_bridge_unmask(const std::string &ntb, std::uint32_t slot, int fd) override
	{
		locked([&] { port_.irq_bridge_unmask(ntb, slot, fd); });
	}
	std::optional<std::uint64_t> link_down_ms(const std::string &ntb) override
	{
		return locked([&] { return port_.link_down_ms(ntb); });
	}

private:
	template <typename F> auto locked(F f) const -> decltype(f())
	{
		const std::lock_guard<std::mutex> guard(lock_);
		return f();
	}

	KernelPort &port_;
	std::mutex &lock_;
	std::condition_variable &changed_;
};

// Host "borrower-b" borrows from lender-a (an AgentFixture lending its NVMe) over NTB 0000:00:0a.0, and
// with a second lender also from lender-d (lending its NVMe, at the same address) over NTB 0000:00:0b.0.
// hold() makes one lender's calls hang until release(), as a lender that accepts and never answers.
struct BorrowerFixture {
	explicit BorrowerFixture(std::string host = "borrower-b", bool second_lender = false)
		: host(std::move(host)), store(dir.path(), "borrower.json")
	{
		lender.lender->lend(nvme_address);
		if (second_lender) {
			lender2 = std::make_unique<AgentFixture>(10'000, "lender-d");
			lender2->lender->lend(nvme_address);
		}
		make_borrower();
	}

	~BorrowerFixture()
	{
		release();
		for (std::thread &thread : threads)
			thread.join();
		borrower.reset(); // its workers' jobs use the members below
	}

	void make_borrower()
	{
		std::vector<PeerAddress> peers{{"lender-a", "10.0.0.1:7450", ntb}};
		if (lender2)
			peers.push_back({"lender-d", "10.0.0.4:7450", ntb2});
		borrower = std::make_unique<Borrower>(
			port, clock, store, peers,
			[this](const PeerAddress &peer, std::string_view method, const json &params, int timeout_ms) {
				{
					std::unique_lock<std::mutex> lock(sync);
					calls.push_back(std::string(method));
					timeouts.push_back(timeout_ms);
					if (peer.host == hung_lender) {
						hung_calls++;
						changed.notify_all();
						changed.wait(lock, [&] { return hung_lender != peer.host; });
					}
				}
				if (call_ms > timeout_ms) { // the lender answers too late
					advance(timeout_ms);
					throw AgentError(ErrorCode::timed_out, ETIMEDOUT, std::string(method) + ": no answer in time");
				}
				advance(call_ms);
				if (lender_down)
					throw AgentError(ErrorCode::peer_unreachable, EHOSTUNREACH,
							 "connecting to " + peer.address + ": No route to host");
				AgentFixture &called = peer.host == "lender-d" ? *lender2 : lender;
				Session session(*called.dispatcher, {Principal::peer, peer.host, peer.address, nullptr, host},
						[](LogLevel, const std::string &) {});
				LoopbackTransport pipe(session);
				RpcClient client(pipe, host);
				client.hello();
				json result = client.call(method, params);
				if (tamper_reply)
					tamper_reply(method, result);
				const std::lock_guard<std::mutex> lock(sync);
				answered.push_back(peer.host + " " + std::string(method));
				changed.notify_all();
				return result;
			},
			[this](LogLevel, const std::string &line) {
				const std::lock_guard<std::mutex> lock(sync);
				log.push_back(line);
			},
			5'000);
	}

	void hold(const std::string &lender)
	{
		const std::lock_guard<std::mutex> lock(sync);
		hung_lender = lender;
	}
	void release()
	{
		hold("");
		changed.notify_all();
	}
	// Runs f on a thread of its own (joined when the fixture goes), as the daemon's borrower loop.
	void in_background(std::function<void()> f) { threads.emplace_back(std::move(f)); }
	// Whether done() (read under the fixture's lock) came true within 10 s.
	bool wait_for(const std::function<bool()> &done)
	{
		std::unique_lock<std::mutex> lock(sync);
		return changed.wait_for(lock, std::chrono::seconds(10), done);
	}
	long answered_by(const std::string &lender, std::string_view method) const
	{
		return std::count(answered.begin(), answered.end(), lender + " " + std::string(method));
	}
	template <typename F> auto under_lock(F f) -> decltype(f())
	{
		const std::lock_guard<std::mutex> lock(sync);
		return f();
	}

	// All hosts' clocks move together.
	void advance(std::int64_t ms)
	{
		clock.now += ms;
		lender.clock.now += ms;
		if (lender2)
			lender2->clock.now += ms;
	}

	// Queues an upcall in the kernel; returns its seq.
	std::uint64_t queue_upcall(UpcallOp op, std::uint32_t id, std::array<std::uint64_t, 6> args = {},
				   std::uint32_t timeout_ms = 5000)
	{
		Upcall request;
		request.seq = ++seq;
		request.op = static_cast<std::uint32_t>(op);
		request.device_id = id;
		request.timeout_ms = timeout_ms;
		request.args = args;
		const std::lock_guard<std::mutex> lock(sync);
		kernel.upcalls.push_back(request);
		return request.seq;
	}

	UpcallReply upcall(UpcallOp op, std::uint32_t id, std::array<std::uint64_t, 6> args = {},
			   std::uint32_t timeout_ms = 5000)
	{
		const std::uint64_t n = queue_upcall(op, id, args, timeout_ms);
		borrower->serve_upcalls();
		REQUIRE(kernel.replies.count(n));
		return kernel.replies[n];
	}

	std::uint32_t nvme_id() const { return stable_device_id("lender-a", nvme_address); }
	AnnouncedDevice nvme() const { return borrower->devices().at("lender-a/" + std::string(nvme_address)); }
	long count(std::string_view method) const { return std::count(calls.begin(), calls.end(), method); }

	std::string host;
	AgentFixture lender;
	std::unique_ptr<AgentFixture> lender2;
	TempDir dir;
	StateStore store;
	FakeKernelPort kernel;
	std::mutex sync; // guards what the borrower's threads and the test share: kernel (through port), calls,
			 // timeouts, answered, log, hung_lender, hung_calls
	std::condition_variable changed; // a call answered or held, an upcall completed, release()
	SerializedPort port{kernel, sync, changed};
	FakeClock clock;
	std::unique_ptr<Borrower> borrower;
	std::vector<std::string> calls;
	std::vector<int> timeouts; // of each call
	std::int64_t call_ms = 0;
	std::vector<std::string> log;
	bool lender_down = false;
	std::vector<std::string> answered; // "lender method" of each call answered
	std::string hung_lender;	   // whose calls hang until release()
	int hung_calls = 0;
	std::vector<std::thread> threads;
	std::function<void(std::string_view method, json &result)> tamper_reply; // a hostile lender
	std::uint64_t seq = 0;
};

bool logged(const std::vector<std::string> &log, const std::string &line)
{
	return std::find(log.begin(), log.end(), line) != log.end();
}

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

TEST_CASE("two lenders: each one's devices announced on the NTB towards it, borrowed from it, withdrawn alone")
{
	BorrowerFixture f("borrower-b", true);
	f.borrower->refresh();
	const std::uint32_t a = f.nvme_id(), d = stable_device_id("lender-d", nvme_address);
	REQUIRE(f.kernel.announced.size() == 2);
	CHECK(a != d);
	CHECK(f.kernel.announced.at(a).lender_host == "lender-a");
	CHECK(f.kernel.announced.at(a).ntb == ntb);
	CHECK(f.kernel.announced.at(d).lender_host == "lender-d");
	CHECK(f.kernel.announced.at(d).ntb == ntb2);

	// Each borrow leases the device of its own lender, and only that one.
	CHECK(f.upcall(UpcallOp::borrow, d).error == 0);
	CHECK(f.lender2->lender->devices().at(nvme_address).lease);
	CHECK_FALSE(f.lender.lender->devices().at(nvme_address).lease);
	CHECK(f.upcall(UpcallOp::borrow, a).error == 0);
	CHECK(f.lender.lender->devices().at(nvme_address).lease);
	for (int i = 0; i < 15; i++) { // each lease renewed with its own lender, past its lease time
		f.advance(1000);
		f.borrower->tick();
		CHECK(f.lender.lender->expire_due().empty());
		CHECK(f.lender2->lender->expire_due().empty());
	}
	CHECK(f.upcall(UpcallOp::give_back, d).error == 0);
	CHECK_FALSE(f.lender2->lender->devices().at(nvme_address).lease);
	CHECK(f.lender.lender->devices().at(nvme_address).lease);

	// lender-d no longer lends its NVMe: lender-a's stays announced.
	f.lender2->lender->unlend(nvme_address, false);
	f.borrower->refresh();
	CHECK(f.kernel.withdrawn == std::vector<std::uint32_t>{d});
	CHECK(f.kernel.announced.count(a));
}

// lender-d accepts and never answers (a dead or hostile agent). The workers run as in the daemon, and a
// thread of the test plays the daemon's borrower loop; every wait is bounded (10 s) and fails by name.
TEST_CASE("two lenders: one that never answers holds up no upcall for the other's devices")
{
	BorrowerFixture f("borrower-b", true);
	f.borrower->refresh();
	f.borrower->start_workers();
	f.hold("lender-d");
	const std::uint64_t borrow = f.queue_upcall(UpcallOp::borrow, f.nvme_id());
	f.in_background([&f] { // the loop's tick (both lenders' device.list due), then the upcalls
		f.borrower->tick();
		f.borrower->serve_upcalls();
	});
	REQUIRE_MESSAGE(f.wait_for([&] { return f.hung_calls == 1; }), "lender-d was never called");
	REQUIRE_MESSAGE(f.wait_for([&] { return f.kernel.replies.count(borrow) == 1; }),
			"lender-a's BORROW unanswered while lender-d hangs");
	CHECK(f.under_lock([&] { return f.kernel.replies.at(borrow).error; }) == 0);
	CHECK(f.lender.lender->devices().at(nvme_address).lease);
}

TEST_CASE("two lenders: one that never answers holds up no renewal of the other's lease")
{
	BorrowerFixture f("borrower-b", true);
	f.borrower->refresh();
	REQUIRE(f.upcall(UpcallOp::borrow, f.nvme_id()).error == 0);
	REQUIRE(f.upcall(UpcallOp::borrow, stable_device_id("lender-d", nvme_address)).error == 0);
	f.borrower->start_workers();
	f.hold("lender-d");
	for (int renewals = 1; renewals <= 4; renewals++) { // 16 s: past lender-a's lease time (10 s)
		f.advance(4000);
		f.in_background([&f] { f.borrower->tick(); });
		REQUIRE_MESSAGE(f.wait_for([&] { return f.answered_by("lender-a", "lease.renew") == renewals; }),
				"lender-a's lease not renewed while lender-d hangs (renewal " << renewals << ")");
		CHECK(f.lender.lender->expire_due().empty());
	}
	CHECK(f.lender.lender->devices().at(nvme_address).lease);
	CHECK(f.under_lock([&] { return f.hung_calls; }) == 1); // lender-d's worker hung all along on its first call
}

TEST_CASE("two lenders: upcalls waiting for a hung lender's worker are bounded; beyond, EAGAIN at once")
{
	BorrowerFixture f("borrower-b", true);
	f.borrower->refresh();
	const std::uint32_t d = stable_device_id("lender-d", nvme_address);
	f.borrower->start_workers();
	f.hold("lender-d");
	f.queue_upcall(UpcallOp::config_read, d, {0, 2});
	f.borrower->serve_upcalls();
	REQUIRE_MESSAGE(f.wait_for([&] { return f.hung_calls == 1; }), "lender-d's worker never took the first upcall");
	const std::uint64_t first = f.seq + 1;
	for (std::size_t i = 0; i <= Borrower::max_queued; i++)
		f.queue_upcall(UpcallOp::config_read, d, {0, 2});
	f.borrower->serve_upcalls(); // never waits: what does not fit is answered here
	f.under_lock([&] {
		CHECK(f.kernel.replies.size() == 1);
		REQUIRE(f.kernel.replies.count(f.seq));
		CHECK(f.kernel.replies.at(f.seq).error == -EAGAIN);
		CHECK(logged(f.log, "borrower: upcall 3 on id " + std::to_string(d) + ": 64 upcalls already wait for lender-d"));
	});
	f.release(); // the queued ones are served, in order, within their deadlines
	REQUIRE_MESSAGE(f.wait_for([&] { return f.kernel.replies.size() == Borrower::max_queued + 2; }),
			"the queued upcalls were not answered once lender-d answered");
	f.under_lock([&] {
		for (std::uint64_t seq = first - 1; seq < first + Borrower::max_queued; seq++)
			CHECK(f.kernel.replies.at(seq).error == 0);
	});
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

TEST_CASE("a device lent at the slot of one the lender stopped lending: that one withdrawn first, both in one refresh")
{
	BorrowerFixture f;
	f.borrower->refresh(); // the NVMe in slot 0
	// Sorted before the NVMe in the agent's table: announced first unless withdrawals go first.
	constexpr const char *other = "0000:00:05.0";
	f.lender.tree.add_device(other, 0x1b36, 0x0010, {0x4000, 0, 0, 0, 0, 0}, 9, "nvme");
	f.lender.lender->unlend(nvme_address, false);
	f.lender.lender->lend(other); // slot 0 again
	f.borrower->refresh();
	const std::uint32_t id = stable_device_id("lender-a", other);
	REQUIRE(f.kernel.announced.count(id));
	CHECK(f.kernel.announced.at(id).irq_slot == 0);
	CHECK(f.kernel.withdrawn == std::vector<std::uint32_t>{f.nvme_id()});
	CHECK(std::none_of(f.log.begin(), f.log.end(),
			   [](const std::string &line) { return line.find("EADDRINUSE") != std::string::npos; }));
}

TEST_CASE("a device whose slot still holds a device with an instance waits for it (EADDRINUSE), then is announced")
{
	BorrowerFixture f;
	f.borrower->refresh();
	f.lender.lender->unlend(nvme_address, false);
	f.lender.lender->lend(nic_address); // slot 0, which the NVMe's instance still holds here
	f.kernel.busy.insert(f.nvme_id());
	f.borrower->refresh();
	const std::uint32_t nic = stable_device_id("lender-a", nic_address);
	CHECK_FALSE(f.kernel.announced.count(nic));
	CHECK_FALSE(f.borrower->devices().at("lender-a/" + std::string(nic_address)).announced);
	f.advance(1000);
	f.borrower->tick(); // still busy: the NIC still waits
	CHECK_FALSE(f.kernel.announced.count(nic));
	f.kernel.busy.clear(); // the instance removed
	f.advance(1000);
	f.borrower->tick();
	REQUIRE(f.kernel.announced.count(nic));
	CHECK(f.kernel.announced.at(nic).irq_slot == 0);
	CHECK_FALSE(f.kernel.announced.count(f.nvme_id()));
	// The view names each device's slot (the libvirt hook finds a type's device by lender and slot).
	const json view = f.borrower->view();
	REQUIRE(view.size() == 1);
	CHECK(view[0].at("slot") == 0);
	CHECK(view[0].at("announced") == true);
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

TEST_CASE("a lease the lender ended while renewed (its link down) revokes the device's instance, once")
{
	BorrowerFixture f;
	f.borrower->refresh();
	REQUIRE(f.upcall(UpcallOp::borrow, f.nvme_id()).error == 0);
	f.kernel.instances.insert(f.nvme_id());
	const std::string ntb = f.lender.lender->devices().at(nvme_address).data_path_ntb;
	REQUIRE_FALSE(ntb.empty());
	f.lender.kernel.links_down_ms[ntb] = 10'000;
	REQUIRE(f.lender.lender->expire_due().size() == 1);
	for (int i = 0; i < 5; i++) { // the next renewal finds the lease gone; later ticks renew nothing
		f.advance(1000);
		f.borrower->tick();
	}
	CHECK_FALSE(f.borrower->devices().begin()->second.lease);
	CHECK(f.kernel.revoked == std::vector<std::uint32_t>{f.nvme_id()});
	CHECK(std::count_if(f.log.begin(), f.log.end(), [](const std::string &line) {
		      return line.find("is lost: ") != std::string::npos &&
			     line.ends_with("; its instance revoked: the VFIO user is asked to release it");
	      }) == 1);
}

TEST_CASE("a lost lease of a device without an instance revokes nothing, and says so")
{
	BorrowerFixture f;
	f.borrower->refresh();
	REQUIRE(f.upcall(UpcallOp::borrow, f.nvme_id()).error == 0);
	f.advance(10'000); // no renewal: lost at the lender
	REQUIRE(f.lender.lender->expire_due().size() == 1);
	f.advance(1000);
	f.borrower->tick();
	CHECK(f.kernel.revoked.empty());
	CHECK(std::count_if(f.log.begin(), f.log.end(),
			    [](const std::string &line) { return line.ends_with("is lost: ") || line.ends_with("; no instance to revoke"); }) == 1);
}

TEST_CASE("a borrower whose wall clock steps back 60 s goes on renewing on time (monotonic clock)")
{
	BorrowerFixture f; // lease_ms 10 000: a renewal every 3333 ms
	f.borrower->refresh();
	REQUIRE(f.upcall(UpcallOp::borrow, f.nvme_id()).error == 0);
	f.clock.wall_offset -= 60'000;
	for (int i = 0; i < 30; i++) {
		f.advance(1000);
		f.borrower->tick();
		CHECK(f.lender.lender->expire_due().empty());
	}
	CHECK(std::count(f.calls.begin(), f.calls.end(), "lease.renew") == 7); // every 4 s at 1 s ticks
}

TEST_CASE("a lender whose wall clock steps keeps each lease for lease_ms of monotonic time")
{
	BorrowerFixture f;
	f.borrower->refresh();
	REQUIRE(f.upcall(UpcallOp::borrow, f.nvme_id()).error == 0);
	f.lender.clock.wall_offset += 3'600'000; // forward: no early expiry
	CHECK(f.lender.lender->expire_due().empty());
	f.lender.clock.wall_offset -= 7'200'000; // back: no longer lease either
	f.lender.clock.now += 10'000;
	CHECK(f.lender.lender->expire_due().size() == 1);
}

TEST_CASE("a lender's numbers out of their range are refused, never narrowed")
{
	BorrowerFixture f;
	f.tamper_reply = [](std::string_view method, json &result) {
		if (method == "device.list")
			result["devices"][0]["vendor"] = 0x10000; // was vendor 0 once narrowed to 16 bits
	};
	f.borrower->refresh();
	CHECK(f.kernel.announced.empty());

	for (const json &lease_ms : {json(0), json(999), json(3'600'001), json(~0ull), json(-1)}) {
		CAPTURE(lease_ms);
		BorrowerFixture g;
		g.borrower->refresh();
		g.tamper_reply = [&](std::string_view method, json &result) {
			if (method == "lease.acquire")
				result["lease_ms"] = lease_ms;
		};
		CHECK(g.upcall(UpcallOp::borrow, g.nvme_id()).error == -EINVAL);
		CHECK_FALSE(g.borrower->devices().begin()->second.lease);
	}

	BorrowerFixture h;
	h.borrower->refresh();
	h.tamper_reply = [](std::string_view method, json &result) {
		if (method == "device.read_config")
			result["value"] = 1ull << 32;
	};
	CHECK(h.upcall(UpcallOp::config_read, h.nvme_id(), {0, 4}).error == -EINVAL);
}

// ---- the data path

TEST_CASE("devices are announced with the lender's BAR window offsets and slot")
{
	BorrowerFixture f;
	f.lender.lender->lend(nic_address); // slot 1: BARs at 4 MiB, 4 MiB + 4 KiB and (BAR 4) 4 MiB + 16 KiB
	f.borrower->refresh();
	const RemoteDevice &nic = f.kernel.announced.at(stable_device_id("lender-a", nic_address));
	CHECK(nic.irq_slot == 1);
	CHECK(nic.bar_offsets == std::array<std::uint64_t, 6>{0x400000, 0x401000, 0, 0, 0x404000, 0});
	CHECK(nic.bar_flags == std::array<std::uint32_t, 6>{bar_mapped, bar_mapped, 0, 0, bar_mapped, 0});
	const RemoteDevice &nvme = f.kernel.announced.at(f.nvme_id());
	CHECK(nvme.irq_slot == 0);
	CHECK(nvme.bar_flags[0] == bar_mapped);
	// Kept in borrower.json: a restarted agent announces the same.
	f.make_borrower();
	f.borrower->restore();
	f.kernel.announced.clear();
	f.lender_down = true;
	f.borrower->tick();
	CHECK(f.kernel.announced.at(stable_device_id("lender-a", nic_address)).bar_offsets[4] == 0x404000);
	CHECK(f.kernel.announced.at(stable_device_id("lender-a", nic_address)).irq_slot == 1);
}

TEST_CASE("BORROW: lease.acquire, then this host's DMA layout, then dma.map of each slot at IOVA = GPA")
{
	BorrowerFixture f;
	f.borrower->refresh();
	const std::uint32_t id = f.nvme_id();
	f.kernel.layouts[id] = {{0, 0xa0000, 0}, {0x100000, 0x40000, 0xa0000}};
	f.calls.clear();
	CHECK(f.upcall(UpcallOp::borrow, id).error == 0);
	CHECK(f.calls == std::vector<std::string>{"lease.acquire", "dma.map", "dma.map"});
	const auto &mappings = f.lender.vfio.records.at(nvme_address)->mappings;
	REQUIRE(mappings.size() == 2);
	const auto window = reinterpret_cast<std::uint64_t>(f.lender.kernel.window.data());
	CHECK(mappings.at(0) == std::make_pair(std::uint64_t{0xa0000}, window));
	CHECK(mappings.at(0x100000) == std::make_pair(std::uint64_t{0x40000}, window + 0xa0000));
	CHECK(f.borrower->devices().begin()->second.lease);

	// RETURN: the lender tears the data path down.
	f.calls.clear();
	CHECK(f.upcall(UpcallOp::give_back, id).error == 0);
	CHECK(f.calls == std::vector<std::string>{"lease.release"});
	CHECK(mappings.empty());
	CHECK(f.lender.kernel.bars.empty());
}

TEST_CASE("BORROW of two devices of one lender listing each other as lender peers: the second maps both ways, under both leases")
{
	BorrowerFixture f;
	f.lender.lender->lend(nic_address);
	f.borrower->refresh();
	const std::uint32_t nvme = f.nvme_id(), nic = stable_device_id("lender-a", nic_address);
	f.kernel.layouts[nvme] = {{0, 0x1000, 0}, {0x800000000, 0x4000, 0, true, nic, 4}};
	f.kernel.layouts[nic] = {{0, 0x1000, 0x1000}, {0x900000000, 0x4000, 0, true, nvme, 0}};
	f.calls.clear();
	CHECK(f.upcall(UpcallOp::borrow, nvme).error == 0); // its peer is not borrowed yet
	CHECK(f.calls == std::vector<std::string>{"lease.acquire", "dma.map"});
	f.calls.clear();
	CHECK(f.upcall(UpcallOp::borrow, nic).error == 0);
	CHECK(f.calls == std::vector<std::string>{"lease.acquire", "dma.map", "dma.map_peer", "dma.map_peer"});
	CHECK(logged(f.log, "borrower: borrowed lender-a/0000:02:00.0 (1 DMA slot(s) mapped, 2 peer BAR(s) on the lender)"));
	const auto &nvme_mappings = f.lender.vfio.records.at(nvme_address)->mappings;
	const auto &nic_mappings = f.lender.vfio.records.at(nic_address)->mappings;
	CHECK(nvme_mappings.count(0x800000000) == 1);
	CHECK(nic_mappings.count(0x900000000) == 1);
	CHECK(f.lender.lender->devices().at(nvme_address).peer_dma_mappings.at(0).peer_pci == nic_address);
	CHECK(f.lender.lender->devices().at(nic_address).peer_dma_mappings.at(0).peer_pci == nvme_address);

	// The NVMe's RETURN: the NIC no longer reaches its BAR.
	CHECK(f.upcall(UpcallOp::give_back, nvme).error == 0);
	CHECK(nic_mappings.count(0x900000000) == 0);
	CHECK(f.lender.lender->devices().at(nic_address).peer_dma_mappings.empty());
}

TEST_CASE("BORROW fails, and releases the lease, when a slot cannot be mapped or there is no layout")
{
	BorrowerFixture f;
	f.borrower->refresh();
	const std::uint32_t id = f.nvme_id();
	// The lender's fake outbound window is 1 MiB: the second slot lies outside it.
	f.kernel.layouts[id] = {{0, 0x1000, 0}, {0x100000, 0x1000, 2 << 20}};
	f.calls.clear();
	CHECK(f.upcall(UpcallOp::borrow, id).error == -EINVAL);
	CHECK(f.calls == std::vector<std::string>{"lease.acquire", "dma.map", "dma.map", "lease.release"});
	CHECK_FALSE(f.lender.lender->devices().at(nvme_address).lease);
	CHECK(f.lender.vfio.records.at(nvme_address)->mappings.empty());
	CHECK_FALSE(f.borrower->devices().begin()->second.lease);

	f.kernel.fail_dma_layout = ENODATA; // the kernel has no borrowing instance of it
	f.calls.clear();
	CHECK(f.upcall(UpcallOp::borrow, id).error == -ENODATA);
	CHECK(f.calls == std::vector<std::string>{"lease.acquire", "lease.release"});
	CHECK_FALSE(f.lender.lender->devices().at(nvme_address).lease);
}

TEST_CASE("BORROW without a data path: a kernel without DMA_LAYOUT, or a lender that maps no BARs towards us")
{
	BorrowerFixture f;
	f.borrower->refresh();
	f.kernel.fail_dma_layout = ENOTTY;
	f.calls.clear();
	CHECK(f.upcall(UpcallOp::borrow, f.nvme_id()).error == 0);
	CHECK(f.calls == std::vector<std::string>{"lease.acquire"});
	CHECK(f.borrower->devices().begin()->second.lease);
	CHECK(logged(f.log, "borrower: borrowed lender-a/0000:01:00.0 without DMA window: DMA_LAYOUT failed"));

	BorrowerFixture other("borrower-c"); // the lender has no "ntb" towards borrower-c
	other.borrower->refresh();
	other.kernel.layouts[other.nvme_id()] = {{0, 0x1000, 0}};
	other.calls.clear();
	CHECK(other.upcall(UpcallOp::borrow, other.nvme_id()).error == 0);
	CHECK(other.calls == std::vector<std::string>{"lease.acquire"});
	CHECK(logged(other.log, "borrower: borrowed lender-a/0000:01:00.0 without data path (the lender maps no BARs towards us)"));
}

TEST_CASE("SET_IRQS: irq.set on the lender with the index and vector count; it needs the lease")
{
	BorrowerFixture f;
	f.borrower->refresh();
	const std::uint32_t id = f.nvme_id();
	CHECK(f.upcall(UpcallOp::set_irqs, id, {0, 2, 4}).error == -ENOENT); // not borrowed
	REQUIRE(f.upcall(UpcallOp::borrow, id).error == 0);
	f.calls.clear();
	CHECK(f.upcall(UpcallOp::set_irqs, id, {0, 2, 4}).error == 0);
	CHECK(f.calls == std::vector<std::string>{"irq.set"});
	CHECK(f.lender.vfio.records.at(nvme_address)->irqs.at(2) == 4);
	CHECK(f.lender.kernel.relays.at({lender_ntb, 0}) == 4);
	CHECK(f.upcall(UpcallOp::set_irqs, id, {0, 2, 0}).error == 0);
	CHECK(f.lender.kernel.relays.empty());
	CHECK(f.upcall(UpcallOp::set_irqs, id, {0, 7, 1}).error == -EINVAL); // not INTx, MSI or MSI-X
}

TEST_CASE("a borrower.json that is not a version-1 state object is refused with an error naming it, not a crash")
{
	// The fuzzer's first find: "\"\"" made restore call value() on a string, and the agent die in std::terminate.
	for (const json &bad : {json(""), json::array(), json{{"version", "1"}}, json{{"ids", json::object()}}}) {
		BorrowerFixture f;
		f.store.save(bad);
		std::string message = "no AgentError thrown";
		try {
			f.borrower->restore();
		} catch (const AgentError &e) {
			message = e.what();
		}
		CHECK(message.find("is not a version 1 state object") != std::string::npos);
	}
}

TEST_CASE("RETURN is answered 0 only once the lender confirms; unconfirmed, EINPROGRESS and the release goes on in the background, across a restart")
{
	BorrowerFixture f;
	f.borrower->refresh();
	const std::uint32_t id = f.nvme_id();
	REQUIRE(f.upcall(UpcallOp::borrow, id).error == 0);
	f.lender_down = true;
	// Not 0: the kernel keeps the borrow's DMA window range quarantined; not ETIMEDOUT (which would
	// make the kernel take the instance for dead): EINPROGRESS.
	CHECK(f.upcall(UpcallOp::give_back, id).error == -EINPROGRESS);
	REQUIRE(f.nvme().lease);
	CHECK(f.nvme().lease->releasing);
	CHECK(f.upcall(UpcallOp::config_write, id, {4, 2, 0x0406}).error == -ENOENT); // the lease is not used again
	CHECK(logged(f.log, "borrower: releasing the lease on lender-a/0000:01:00.0: connecting to 10.0.0.1:7450: No route to host; trying again in 1000 ms"));

	// Tried again 1 s later, then 2 s after that (backoff), never renewed meanwhile.
	f.calls.clear();
	f.advance(999);
	f.borrower->tick();
	CHECK(f.count("lease.release") == 0);
	f.advance(1);
	f.borrower->tick();
	CHECK(f.count("lease.release") == 1);
	f.advance(1999);
	f.borrower->tick();
	CHECK(f.count("lease.release") == 1);
	f.advance(1);
	f.borrower->tick();
	CHECK(f.count("lease.release") == 2);
	CHECK(f.count("lease.renew") == 0);
	CHECK(f.lender.lender->devices().at(nvme_address).lease); // the lender still holds it

	// A restarted agent goes on releasing (borrower.json), and forgets the lease once the lender confirms.
	f.make_borrower();
	f.borrower->restore();
	REQUIRE(f.nvme().lease);
	CHECK(f.nvme().lease->releasing);
	f.lender_down = false;
	f.calls.clear();
	f.borrower->tick();
	CHECK(f.count("lease.release") == 1);
	CHECK_FALSE(f.nvme().lease);
	CHECK_FALSE(f.lender.lender->devices().at(nvme_address).lease);
	CHECK(f.lender.lender->expire_due().empty()); // released, not expired
}

TEST_CASE("a BORROW while the last lease's release is unconfirmed releases it first, or fails without acquiring")
{
	BorrowerFixture f;
	f.borrower->refresh();
	const std::uint32_t id = f.nvme_id();
	REQUIRE(f.upcall(UpcallOp::borrow, id).error == 0);
	f.lender_down = true;
	REQUIRE(f.upcall(UpcallOp::give_back, id).error == -EINPROGRESS);
	f.calls.clear();
	CHECK(f.upcall(UpcallOp::borrow, id).error == -EHOSTUNREACH);
	CHECK(f.calls == std::vector<std::string>{"lease.release"});
	f.lender_down = false;
	f.calls.clear();
	CHECK(f.upcall(UpcallOp::borrow, id).error == 0);
	CHECK(f.calls == std::vector<std::string>{"lease.release", "lease.acquire"});
	REQUIRE(f.nvme().lease);
	CHECK_FALSE(f.nvme().lease->releasing);
}

TEST_CASE("an upcall's calls get only what is left of its timeout_ms; a borrow that cannot finish in time is undone")
{
	BorrowerFixture f;
	f.borrower->refresh();
	const std::uint32_t id = f.nvme_id();
	f.kernel.layouts[id] = {{0, 0x1000, 0}, {0x100000, 0x1000, 0x1000}};
	f.call_ms = 1000; // each answer of the lender takes 1 s
	f.calls.clear();
	f.timeouts.clear();
	// 2300 ms of it for the calls (a quarter, at most 500 ms, kept for answering).
	CHECK(f.upcall(UpcallOp::borrow, id, {}, 2800).error == -ETIMEDOUT);
	CHECK(f.calls == std::vector<std::string>{"lease.acquire", "dma.map", "dma.map"});
	CHECK(f.timeouts == std::vector<int>{2300, 1300, 300});
	// No time was left to release it: that goes on in the background, and the lease is not held.
	REQUIRE(f.nvme().lease);
	CHECK(f.nvme().lease->releasing);
	f.call_ms = 0;
	f.advance(1000);
	f.borrower->tick();
	CHECK_FALSE(f.nvme().lease);
	CHECK_FALSE(f.lender.lender->devices().at(nvme_address).lease);
	CHECK(f.lender.vfio.records.at(nvme_address)->mappings.empty());

	// A lease acquired just as the time is up is released, not kept.
	f.kernel.layouts[id] = {};
	f.call_ms = 1500;
	CHECK(f.upcall(UpcallOp::borrow, id, {}, 2000).error == -ETIMEDOUT); // 1500 ms for the calls
	CHECK(logged(f.log, "borrower: upcall 1 on id " + std::to_string(id) + ": borrowed 0000:01:00.0 after the upcall's deadline"));
	f.call_ms = 0;
	f.advance(1000);
	f.borrower->tick();
	CHECK_FALSE(f.nvme().lease);
	CHECK_FALSE(f.lender.lender->devices().at(nvme_address).lease);
}

TEST_CASE("a held lease the kernel has no borrow for (DMA_LAYOUT: ENODATA) is released, after a restart and at any tick")
{
	BorrowerFixture f;
	f.borrower->refresh();
	const std::uint32_t id = f.nvme_id();
	REQUIRE(f.upcall(UpcallOp::borrow, id).error == 0);
	f.borrower->tick();
	CHECK(f.nvme().lease); // borrowed in the kernel: kept

	// E.g. the agent was down when the guest let the device go: its RETURN went unanswered.
	f.kernel.fail_dma_layout = ENODATA;
	f.make_borrower();
	f.borrower->restore();
	f.calls.clear();
	f.borrower->tick();
	CHECK(f.count("lease.release") == 1);
	CHECK_FALSE(f.nvme().lease);
	CHECK_FALSE(f.lender.lender->devices().at(nvme_address).lease);
	CHECK(logged(f.log, "borrower: lender-a/0000:01:00.0 is leased but not borrowed here (DMA_LAYOUT failed); releasing the lease"));

	// Without a restart too; a kernel that cannot tell (ENOTTY) keeps the lease.
	f.kernel.fail_dma_layout = 0;
	REQUIRE(f.upcall(UpcallOp::borrow, id).error == 0);
	f.kernel.fail_dma_layout = ENOTTY;
	f.advance(1000);
	f.borrower->tick();
	CHECK(f.nvme().lease);
	f.kernel.fail_dma_layout = ENODATA;
	f.advance(1000);
	f.borrower->tick();
	CHECK_FALSE(f.nvme().lease);
	CHECK_FALSE(f.lender.lender->devices().at(nvme_address).lease);
}

TEST_CASE("a device lent again with another view (slot, BARs, interrupt slot) is withdrawn and announced again")
{
	BorrowerFixture f;
	f.borrower->refresh();
	REQUIRE(f.kernel.announced.at(f.nvme_id()).irq_slot == 0);
	REQUIRE(f.upcall(UpcallOp::borrow, f.nvme_id()).error == 0);
	// Unlent and lent again after another device took its slot: slot 1, BARs at 4 MiB.
	f.lender.lender->unlend(nvme_address, true);
	f.lender.lender->lend(nic_address);
	f.lender.lender->lend(nvme_address);
	f.kernel.busy.insert(f.nvme_id()); // an instance still exists: the withdrawal waits for it
	f.borrower->refresh();
	CHECK(logged(f.log, "borrower: lender-a lends 0000:01:00.0 with another view; withdrawing id " +
				    std::to_string(f.nvme_id())));
	CHECK(f.nvme().withdrawing);
	CHECK_FALSE(f.nvme().lease); // the lender ended it when it unlent the device
	CHECK(f.upcall(UpcallOp::config_read, f.nvme_id(), {0, 2}).error == -ENODEV);
	f.kernel.busy.clear();
	f.borrower->refresh();
	CHECK(f.kernel.withdrawn == std::vector<std::uint32_t>{f.nvme_id()});
	f.borrower->refresh();
	const RemoteDevice &nvme = f.kernel.announced.at(f.nvme_id());
	CHECK(nvme.irq_slot == 1);
	CHECK(nvme.bar_offsets[0] == 0x400000);
	CHECK(nvme.bar_flags[0] == bar_mapped);
	CHECK_FALSE(f.nvme().withdrawing);
	// The same view again changes nothing.
	f.borrower->refresh();
	CHECK(f.kernel.withdrawn.size() == 1);
}
