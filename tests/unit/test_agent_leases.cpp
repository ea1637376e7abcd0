// The lender's devices and leases (lender-agent/lender.cpp) on fake sysfs, VFIO and clock: lending binds
// through driver_override, one borrower at a time, expiry unmaps and resets, state survives restarts.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "errors.hpp"

#include <sys/eventfd.h>

#include <algorithm>

using namespace farpass::agent;
using namespace farpass::agent::testing;
using nlohmann::json;

namespace {

ErrorCode code_of(const std::function<void()> &operation)
{
	try {
		operation();
	} catch (const AgentError &e) {
		return e.code();
	}
	FAIL("no AgentError thrown");
	return ErrorCode::internal_error;
}

// The fixture's NVMe and NIC lent and leased by borrower-b, the NVMe's DMA to IOVA 32 GiB reaching the
// NIC's BAR 4 (dma.map_peer): their leases.
std::pair<Lease, Lease> peer_pair(AgentFixture &agent)
{
	agent.lender->lend(nvme_address);
	agent.lender->lend(nic_address);
	const Lease nvme = agent.lender->acquire(nvme_address, "borrower-b");
	const Lease nic = agent.lender->acquire(nic_address, "borrower-b");
	agent.lender->map_peer_dma(nvme_address, "borrower-b", nvme.id, 0x800000000, 0x4000, nic_address, nic.id, 4);
	return {nvme, nic};
}

std::string message_of(const std::function<void()> &operation)
{
	try {
		operation();
	} catch (const AgentError &e) {
		return e.what();
	}
	FAIL("no AgentError thrown");
	return {};
}

} // namespace

TEST_CASE("lend binds the device to vfio-pci through driver_override, unbind and reprobe")
{
	AgentFixture agent;
	const LentDevice &device = agent.lender->lend(nvme_address);
	CHECK(device.info.vendor == 0x8086);
	CHECK(device.info.device == 0x5845);
	CHECK(device.info.bar_sizes == std::vector<std::uint64_t>{0x4000, 0, 0, 0, 0, 0});
	CHECK(device.info.iommu_group == 7);
	CHECK(agent.tree.read("sys/bus/pci/devices/0000:01:00.0/driver_override") == "vfio-pci");
	CHECK(agent.tree.read("sys/bus/pci/drivers/nvme/unbind") == nvme_address);
	CHECK(agent.tree.read("sys/bus/pci/drivers_probe") == nvme_address);
	CHECK(agent.vfio.records.at(nvme_address)->open);
}

TEST_CASE("lend of an unbound device skips the unbind")
{
	AgentFixture agent;
	agent.lender->lend(nic_address);
	CHECK(agent.tree.read("sys/bus/pci/devices/0000:02:00.0/driver_override") == "vfio-pci");
	CHECK(agent.tree.read("sys/bus/pci/drivers_probe") == nic_address);
}

TEST_CASE("lend refuses a device that is already lent, or absent")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	CHECK(code_of([&] { agent.lender->lend(nvme_address); }) == ErrorCode::already_lent);
	CHECK(code_of([&] { agent.lender->lend("0000:09:00.0"); }) == ErrorCode::no_such_device);
}

TEST_CASE("lend gives the device back to the host when VFIO cannot open it")
{
	AgentFixture agent;
	agent.vfio.failing.insert(nvme_address);
	agent.tree.set_driver(nvme_address, "vfio-pci"); // as the kernel would have done after the reprobe
	CHECK(code_of([&] { agent.lender->lend(nvme_address); }) == ErrorCode::system_error);
	CHECK(agent.tree.read("sys/bus/pci/devices/0000:01:00.0/driver_override") == "\n");
	CHECK(agent.tree.read("sys/bus/pci/drivers/vfio-pci/unbind") == nvme_address);
	CHECK(agent.lender->devices().empty());
}

TEST_CASE("a second borrower gets device_busy with EBUSY and a message naming the holder")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	agent.lender->acquire(nvme_address, "borrower-b");
	try {
		agent.lender->acquire(nvme_address, "borrower-c");
		FAIL("second acquire succeeded");
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::device_busy);
		CHECK(e.error_number() == EBUSY);
		CHECK(std::string(e.what()) == "0000:01:00.0 is borrowed by borrower-b");
	}
}

TEST_CASE("the holder acquiring again gets its own lease back, renewed")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	const Lease first = agent.lender->acquire(nvme_address, "borrower-b");
	agent.clock.now += 4000;
	const Lease again = agent.lender->acquire(nvme_address, "borrower-b");
	CHECK(again.id == first.id);
	CHECK(again.expires_at_ms == first.expires_at_ms + 4000);
}

TEST_CASE("unlend refuses a borrowed device unless forced")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	agent.lender->acquire(nvme_address, "borrower-b");
	CHECK(message_of([&] { agent.lender->unlend(nvme_address, false); }) ==
	      "0000:01:00.0 is borrowed by borrower-b (unlend --force ends the lease)");
	CHECK(agent.lender->devices().count(nvme_address) == 1);

	agent.tree.set_driver(nvme_address, "vfio-pci");
	agent.lender->unlend(nvme_address, true);
	CHECK(agent.lender->devices().empty());
	CHECK(agent.vfio.records.at(nvme_address)->resets == 1);
	CHECK_FALSE(agent.vfio.records.at(nvme_address)->open);
	CHECK(agent.tree.read("sys/bus/pci/devices/0000:01:00.0/driver_override") == "\n");
	CHECK(agent.tree.read("sys/bus/pci/drivers/vfio-pci/unbind") == nvme_address);
}

TEST_CASE("unlend of a device that is not lent is no_such_device")
{
	AgentFixture agent;
	CHECK(code_of([&] { agent.lender->unlend(nvme_address, false); }) == ErrorCode::no_such_device);
}

TEST_CASE("a lease renewed by heartbeat outlives the lease time")
{
	AgentFixture agent(10'000);
	agent.lender->lend(nvme_address);
	const Lease lease = agent.lender->acquire(nvme_address, "borrower-b");
	for (int beat = 0; beat < 5; beat++) {
		agent.clock.now += 4000;
		agent.lender->renew(nvme_address, "borrower-b", lease.id);
		CHECK(agent.lender->expire_due().empty());
	}
	CHECK(agent.lender->devices().at(nvme_address).lease->id == lease.id);
}

TEST_CASE("an unrenewed lease expires after the lease time: DMA unmapped, device reset, free again")
{
	AgentFixture agent(10'000);
	agent.lender->lend(nvme_address);
	const Lease lease = agent.lender->acquire(nvme_address, "borrower-b");
	agent.lender->map_dma(nvme_address, "borrower-b", lease.id, 0x100000, 0x2000, 0x4000);
	const auto &record = *agent.vfio.records.at(nvme_address);
	REQUIRE(record.mappings.size() == 1);

	agent.clock.now += 9999;
	CHECK(agent.lender->expire_due().empty());
	agent.clock.now += 1;
	const auto expired = agent.lender->expire_due();
	REQUIRE(expired.size() == 1);
	CHECK(expired[0].pci_address == nvme_address);
	CHECK(expired[0].lease.borrower == "borrower-b");
	CHECK(record.mappings.empty());
	CHECK(record.resets == 1);
	CHECK_FALSE(agent.lender->devices().at(nvme_address).lease);
	CHECK(agent.lender->acquire(nvme_address, "borrower-c").borrower == "borrower-c");
}

TEST_CASE("an expired lease can no longer be used, even before it is reaped")
{
	AgentFixture agent(10'000);
	agent.lender->lend(nvme_address);
	const Lease lease = agent.lender->acquire(nvme_address, "borrower-b");
	agent.clock.now += 10'000;
	CHECK(code_of([&] { agent.lender->renew(nvme_address, "borrower-b", lease.id); }) == ErrorCode::no_such_lease);
	CHECK(code_of([&] { agent.lender->reset(nvme_address, "borrower-b", lease.id); }) == ErrorCode::no_such_lease);
}

TEST_CASE("lease operations check both the lease id and its holder")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	const Lease lease = agent.lender->acquire(nvme_address, "borrower-b");
	CHECK(code_of([&] { agent.lender->release(nvme_address, "borrower-b", "0000"); }) == ErrorCode::no_such_lease);
	CHECK(code_of([&] { agent.lender->release(nvme_address, "borrower-c", lease.id); }) == ErrorCode::no_such_lease);
	agent.lender->release(nvme_address, "borrower-b", lease.id);
	CHECK(agent.vfio.records.at(nvme_address)->resets == 1);
	CHECK_FALSE(agent.lender->devices().at(nvme_address).lease);
}

TEST_CASE("config space goes through the VFIO device, width- and bounds-checked")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	const Lease lease = agent.lender->acquire(nvme_address, "borrower-b");
	agent.lender->write_config(nvme_address, "borrower-b", lease.id, 0x04, 2, 0x0406);
	CHECK(agent.lender->read_config(nvme_address, "borrower-b", lease.id, 0x04, 2) == 0x0406);
	CHECK(agent.lender->read_config(nvme_address, "borrower-b", lease.id, 0x04, 1) == 0x06);
	CHECK(code_of([&] { agent.lender->read_config(nvme_address, "borrower-b", lease.id, 0x04, 3); }) ==
	      ErrorCode::invalid_params);
	CHECK(code_of([&] { agent.lender->read_config(nvme_address, "borrower-b", lease.id, 0x05, 2); }) ==
	      ErrorCode::invalid_params);
	CHECK(code_of([&] { agent.lender->read_config(nvme_address, "borrower-b", lease.id, 4096, 4); }) ==
	      ErrorCode::invalid_params);
	CHECK(code_of([&] { agent.lender->write_config(nvme_address, "borrower-b", lease.id, 0, 1, 0x100); }) ==
	      ErrorCode::invalid_params);
}

TEST_CASE("DMA is mapped onto the outbound window at the requested offset, never past its end")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	const Lease lease = agent.lender->acquire(nvme_address, "borrower-b");
	agent.lender->map_dma(nvme_address, "borrower-b", lease.id, 0x100000000, 0x1000, 0x3000);
	const auto window = reinterpret_cast<std::uint64_t>(agent.kernel.window.data());
	CHECK(agent.vfio.records.at(nvme_address)->mappings.at(0x100000000) ==
	      std::pair<std::uint64_t, std::uint64_t>{0x1000, window + 0x3000});
	const std::uint64_t window_size = agent.kernel.window.size();
	CHECK(code_of([&] {
		agent.lender->map_dma(nvme_address, "borrower-b", lease.id, 0, 0x2000, window_size - 0x1000);
	}) == ErrorCode::invalid_params);
	CHECK(code_of([&] { agent.lender->map_dma(nvme_address, "borrower-b", lease.id, 0, 0, 0); }) ==
	      ErrorCode::invalid_params);
	CHECK(code_of([&] { agent.lender->unmap_dma(nvme_address, "borrower-b", lease.id, 0x5000, 0x1000); }) ==
	      ErrorCode::invalid_params);
	agent.lender->unmap_dma(nvme_address, "borrower-b", lease.id, 0x100000000, 0x1000);
	CHECK(agent.vfio.records.at(nvme_address)->mappings.empty());
}

TEST_CASE("state is written atomically: a complete state.json and no temporary left behind")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	const auto state = nlohmann::json::parse(read_file(agent.dir.path() / "state/state.json"));
	CHECK(state.at("version") == 1);
	CHECK(state.at("devices").at(0).at("pci") == nvme_address);
	CHECK_FALSE(fs::exists(agent.dir.path() / "state/state.json.tmp"));
}

TEST_CASE("a restarted agent keeps its lent devices and leases, rebinding and reopening them")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	agent.lender->lend(nic_address);
	const Lease lease = agent.lender->acquire(nvme_address, "borrower-b");
	// After a reboot the NVMe is unbound with its override gone; the NIC is still on vfio-pci.
	agent.tree.set_driver(nvme_address, "");
	agent.tree.set_driver(nic_address, "vfio-pci");
	write_file(agent.dir.path() / "root/sys/bus/pci/devices/0000:01:00.0/driver_override", "(null)\n");
	write_file(agent.dir.path() / "root/sys/bus/pci/drivers_probe", "");

	agent.restart();
	CHECK(agent.lender->devices().empty());
	CHECK(agent.lender->restore().empty());
	REQUIRE(agent.lender->devices().size() == 2);
	const LentDevice &device = agent.lender->devices().at(nvme_address);
	REQUIRE(device.lease);
	CHECK(device.lease->id == lease.id);
	CHECK(device.lease->borrower == "borrower-b");
	CHECK(device.lease->expires_at_ms == lease.expires_at_ms);
	CHECK(agent.tree.read("sys/bus/pci/devices/0000:01:00.0/driver_override") == "vfio-pci");
	CHECK(agent.tree.read("sys/bus/pci/drivers_probe") == nvme_address);
	CHECK(agent.vfio.records.at(nvme_address)->open);
	agent.lender->renew(nvme_address, "borrower-b", lease.id);
}

TEST_CASE("a lease that ran out while the lender was down gets a full lease time, then expires unrenewed")
{
	AgentFixture agent(10'000);
	agent.lender->lend(nvme_address);
	const Lease lease = agent.lender->acquire(nvme_address, "borrower-b");
	agent.restart();
	agent.clock.now += 60'000;
	agent.lender->restore();
	CHECK(agent.lender->expire_due().empty());
	CHECK(code_of([&] { agent.lender->acquire(nvme_address, "borrower-c"); }) == ErrorCode::device_busy);
	agent.lender->renew(nvme_address, "borrower-b", lease.id);

	agent.clock.now += 10'001;
	CHECK(agent.lender->expire_due().size() == 1);
	CHECK(agent.vfio.records.at(nvme_address)->resets == 1);
	CHECK(agent.lender->acquire(nvme_address, "borrower-c").borrower == "borrower-c");
}

TEST_CASE("state.json holds wall-clock expiry times; restore turns them into monotonic time")
{
	AgentFixture agent(10'000);
	agent.lender->lend(nvme_address);
	agent.lender->acquire(nvme_address, "borrower-b");
	const auto state = agent.store.load(1);
	REQUIRE(state);
	CHECK(state->at("devices")[0]["lease"]["expires_at_ms"] == agent.clock.wall_ms() + 10'000);

	// The host rebooted (monotonic time starts again) and the agent is back 2 s after a save that had
	// 32 s of the lease left: it keeps the 30 s that remain, more than a fresh lease time.
	const std::int64_t saved_wall = agent.clock.wall_ms();
	auto saved = *state;
	saved["devices"][0]["lease"]["expires_at_ms"] = saved_wall + 32'000;
	agent.store.save(saved);
	agent.restart();
	agent.clock.now = 5'000;
	agent.clock.wall_offset = saved_wall + 2'000 - agent.clock.now;
	agent.lender->restore();
	CHECK(agent.lender->devices().at(nvme_address).lease->expires_at_ms == agent.clock.now + 30'000);
}

TEST_CASE("config accesses are checked in 64-bit arithmetic: an offset near 2^32 does not wrap")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	const Lease lease = agent.lender->acquire(nvme_address, "borrower-b");
	CHECK(code_of([&] { agent.lender->read_config(nvme_address, "borrower-b", lease.id, 0xffff'fffc, 4); }) ==
	      ErrorCode::invalid_params);
	CHECK(code_of([&] { agent.lender->write_config(nvme_address, "borrower-b", lease.id, 0xffff'fffc, 4, 0); }) ==
	      ErrorCode::invalid_params);
	CHECK(agent.lender->read_config(nvme_address, "borrower-b", lease.id, 4092, 4) == 0);
}

TEST_CASE("numbers in state.json are decoded with their ranges: a bad one stops the agent, naming it")
{
	const auto restored_with = [](const std::function<void(json &)> &corrupt) {
		AgentFixture agent;
		agent.lender->lend(nvme_address);
		const Lease lease = agent.lender->acquire(nvme_address, "borrower-b");
		agent.lender->map_dma(nvme_address, "borrower-b", lease.id, 0x100000, 0x2000, 0x4000);
		json state = *agent.store.load(1);
		corrupt(state["devices"][0]);
		agent.store.save(state);
		agent.restart();
		return message_of([&] { agent.lender->restore(); });
	};
	// 2^32 was slot 0 once narrowed to 32 bits.
	CHECK(restored_with([](json &d) { d["slot"] = 1ull << 32; }) ==
	      "malformed state file: \"slot\" must be an unsigned integer from 0 to 15, not 4294967296");
	CHECK(restored_with([](json &d) { d["slot"] = 16; }).find("\"slot\" must be") != std::string::npos);
	CHECK(restored_with([](json &d) { d["lease"]["dma"][0]["iova"] = -1; }) ==
	      "malformed state file: \"iova\" must be an unsigned integer from 0 to 18446744073709551615, not -1");
	CHECK(restored_with([](json &d) { d["lease"]["dma"][0]["size"] = 0; }).find("\"size\" must be") !=
	      std::string::npos);
	CHECK(restored_with([](json &d) { d["lease"]["expires_at_ms"] = ~0ull; }).find("\"expires_at_ms\" must be") !=
	      std::string::npos);
	CHECK(restored_with([](json &d) { d["lease"]["irqs"] = {{"index", 3}, {"count", 1}}; })
		      .find("\"index\" must be") != std::string::npos);
}

TEST_CASE("restore forgets devices that disappeared from the host and persists that")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	agent.lender->lend(nic_address);
	agent.tree.remove_device(nic_address);
	agent.restart();
	CHECK(agent.lender->restore() == std::vector<std::string>{nic_address});
	CHECK(agent.lender->devices().size() == 1);
	agent.restart();
	CHECK(agent.lender->restore().empty());
	CHECK(agent.lender->devices().size() == 1);
}

TEST_CASE("restore refuses a state file it cannot read rather than guessing")
{
	AgentFixture agent;
	write_file(agent.dir.path() / "state/state.json", "{\"version\": 1, \"devices\": [{\"pci\": 3}]}");
	CHECK(code_of([&] { agent.lender->restore(); }) == ErrorCode::internal_error);
	write_file(agent.dir.path() / "state/state.json", "{\"version\": 2, \"devices\": []}");
	CHECK(code_of([&] { agent.lender->restore(); }) == ErrorCode::internal_error);
	write_file(agent.dir.path() / "state/state.json", "{\"vers");
	CHECK(code_of([&] { agent.lender->restore(); }) == ErrorCode::internal_error);
	write_file(agent.dir.path() / "state/state.json",
		   "{\"version\": 1, \"devices\": [{\"pci\": \"0000:01:00.0\", \"slot\": 16, \"lease\": null}]}");
	CHECK(message_of([&] { agent.lender->restore(); }) == "malformed state file: \"slot\" must be an unsigned integer from 0 to 15, not 16");
}

// ---- the data path: slots, the BAR window, interrupts, teardown order

namespace {

constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB;
const std::vector<std::uint32_t> memory_bars(6, 0);

// The NIC's BARs (0x1000, 0x1000, -, -, 0x4000, -) in slot 0 of lender_ntb's window.
const std::vector<std::string> nic_bars_mapped = {
	"kernel bar_map 0000:00:0b.0 0000:02:00.0 0 0x0 +0x1000",
	"kernel bar_map 0000:00:0b.0 0000:02:00.0 1 0x1000 +0x1000",
	"kernel bar_map 0000:00:0b.0 0000:02:00.0 4 0x4000 +0x4000",
};

std::vector<std::string> since(const Journal &journal, std::size_t from)
{
	return {journal.begin() + static_cast<std::ptrdiff_t>(from), journal.end()};
}

} // namespace

TEST_CASE("place_bars: in BAR order, each aligned to min(size, 2 MiB), inside the slot; what does not fit is left out")
{
	const BarWindow window; // 4 MiB slots, 64 MiB - 4 KiB window
	BarPlacement p = place_bars(1, {4 * KiB, MiB, 4 * MiB, 2 * MiB, 0, 0}, memory_bars, window);
	CHECK(p.placed == std::array<bool, 6>{true, true, false, true, false, false});
	CHECK(p.offsets[0] == 4 * MiB);
	CHECK(p.offsets[1] == 5 * MiB);	     // 1 MiB-aligned, after BAR 0
	CHECK(p.offsets[3] == 6 * MiB);	     // 4 MiB does not fit behind BAR 1; 2 MiB still does
	// I/O BARs and BARs below a page cannot be mapped; a 64-bit BAR's upper half has size 0.
	p = place_bars(0, {0x100, 256, 16 * KiB, 0, 0, 0}, {bar_io, 0, bar_mem64, 0, 0, 0}, window);
	CHECK(p.placed == std::array<bool, 6>{false, false, true, false, false, false});
	CHECK(p.offsets[2] == 0);
	// The last slot ends below the window's last page (the kernel's).
	p = place_bars(15, {2 * MiB, 2 * MiB, 4 * KiB, 0, 0, 0}, memory_bars, window);
	CHECK(p.placed == std::array<bool, 6>{true, false, true, false, false, false});
	CHECK(p.offsets[0] == 60 * MiB);
	CHECK(p.offsets[2] == 62 * MiB);
	// Another slot size moves everything.
	p = place_bars(2, {8 * KiB, 0, 0, 0, 0, 0}, memory_bars, BarWindow{MiB, 64 * MiB - 4 * KiB});
	CHECK(p.offsets[0] == 2 * MiB);
}

TEST_CASE("slots: the lowest free at lend, freed at unlend, kept across a restart; a BAR too big for its slot is a notice")
{
	AgentFixture agent;
	CHECK(agent.lender->lend(nvme_address).slot == 0);
	CHECK(agent.lender->lend(nic_address).slot == 1);
	agent.lender->unlend(nvme_address, false);
	agent.restart();
	agent.lender->restore();
	CHECK(agent.lender->devices().at(nic_address).slot == 1);
	CHECK(agent.lender->devices().at(nic_address).bars.offsets[4] == 4 * MiB + 16 * KiB);
	CHECK(agent.lender->lend(nvme_address).slot == 0);

	agent.tree.add_device("0000:03:00.0", 0x10de, 0x1eb8, {16 * MiB, 0, 64 * KiB, 0, 0, 0}, 9, "");
	const LentDevice &gpu = agent.lender->lend("0000:03:00.0");
	CHECK(gpu.slot == 2);
	CHECK(gpu.bars.placed == std::array<bool, 6>{false, false, true, false, false, false});
	CHECK(agent.lender->take_notices() ==
	      std::vector<std::string>{"0000:03:00.0: BAR 0 (16777216 bytes) does not fit in slot 2 of the BAR window: not mapped"});
	CHECK(agent.lender->take_notices().empty());
	const json view = agent.call("device.list", json::object()).at("result").at("devices").at(0);
	CHECK(view.at("pci") == nvme_address);
	CHECK(view.at("irq_slot") == 0);
	CHECK(view.at("bar_offsets") == json{0, 0, 0, 0, 0, 0});
	CHECK(view.at("bar_mapped") == json{true, false, false, false, false, false});
}

TEST_CASE("all 16 slots taken: lend fails with system_error ENOSPC before touching the device")
{
	AgentFixture agent;
	for (int i = 0; i < 16; i++) {
		char address[16];
		std::snprintf(address, sizeof(address), "0000:1%x:00.0", i);
		agent.tree.add_device(address, 0x1af4, 0x1041, {0x1000, 0, 0, 0, 0, 0}, 20 + i, "");
		agent.lender->lend(address);
	}
	try {
		agent.lender->lend(nvme_address);
		FAIL("a 17th device has no slot");
	} catch (const AgentError &e) {
		CHECK(e.code() == ErrorCode::system_error);
		CHECK(e.error_number() == ENOSPC);
	}
	CHECK(agent.tree.read("sys/bus/pci/devices/0000:01:00.0/driver_override") == "(null)\n");
}

TEST_CASE("lease.acquire maps every placed BAR towards the borrower's NTB; the lease says it has a data path")
{
	AgentFixture agent;
	agent.lender->lend(nic_address);
	const std::size_t from = agent.journal.size();
	const json reply = agent.call("lease.acquire", {{"pci", nic_address}}, Principal::peer, "borrower-b");
	CHECK(reply.at("result").at("data_path") == true);
	std::vector<std::string> expected = nic_bars_mapped;
	expected.push_back("vfio 0000:02:00.0 write_config 0x4 0x6");
	CHECK(since(agent.journal, from) == expected);
	CHECK(agent.kernel.bars.size() == 3);
	// The holder's repeated acquire maps nothing again.
	CHECK(agent.call("lease.acquire", {{"pci", nic_address}}, Principal::peer, "borrower-b").at("result").at("data_path") == true);
	CHECK(agent.journal.size() == from + 4);
}

TEST_CASE("a BAR_MAP failure means no lease: what was mapped is unmapped, the error comes back")
{
	AgentFixture agent;
	agent.lender->lend(nic_address);
	agent.kernel.fail_bar_map[4] = ERANGE;
	const std::size_t from = agent.journal.size();
	const json reply = agent.call("lease.acquire", {{"pci", nic_address}}, Principal::peer, "borrower-b");
	CHECK(reply.at("error").at("code") == static_cast<int>(ErrorCode::system_error));
	CHECK(reply.at("error").at("errno") == ERANGE);
	CHECK(since(agent.journal, from) == std::vector<std::string>{
						    nic_bars_mapped[0], nic_bars_mapped[1], nic_bars_mapped[2],
						    "kernel bar_unmap 0000:00:0b.0 0000:02:00.0 0 0x0 +0x1000",
						    "kernel bar_unmap 0000:00:0b.0 0000:02:00.0 1 0x1000 +0x1000"});
	CHECK(agent.kernel.bars.empty());
	CHECK_FALSE(agent.lender->devices().at(nic_address).lease);
}

TEST_CASE("no data path (older kernel, or no NTB configured towards the borrower): the lease is granted, a notice says so")
{
	AgentFixture agent;
	agent.lender->lend(nic_address);
	agent.kernel.fail_bar_map[0] = ENOTTY;
	json reply = agent.call("lease.acquire", {{"pci", nic_address}}, Principal::peer, "borrower-b");
	CHECK(reply.at("result").at("data_path") == false);
	const std::vector<std::string> notices = agent.lender->take_notices();
	REQUIRE(notices.size() == 1);
	CHECK(notices[0] == "lease of 0000:02:00.0 by borrower-b has no data path: BAR_MAP failed");
	const std::string lease = reply.at("result").at("lease");
	// irq.set needs the data path.
	reply = agent.call("irq.set", {{"pci", nic_address}, {"lease", lease}, {"index", 2}, {"count", 1}}, Principal::peer,
			   "borrower-b");
	CHECK(reply.at("error").at("code") == static_cast<int>(ErrorCode::system_error));
	CHECK(reply.at("error").at("errno") == EOPNOTSUPP);
	CHECK(agent.call("lease.release", {{"pci", nic_address}, {"lease", lease}}, Principal::peer, "borrower-b").contains("result"));

	agent.kernel.fail_bar_map.clear();
	const std::size_t from = agent.journal.size();
	reply = agent.call("lease.acquire", {{"pci", nic_address}}, Principal::peer, "borrower-c");
	CHECK(reply.at("result").at("data_path") == false);
	CHECK(agent.lender->take_notices() ==
	      std::vector<std::string>{"lease of 0000:02:00.0 by borrower-c has no data path: no \"ntb\" configured towards borrower-c"});
	CHECK(since(agent.journal, from).empty());
}

TEST_CASE("a lease whose link has been down for a lease time ends, renewed or not; shorter outages and unknown links do not")
{
	AgentFixture agent(10'000);
	agent.lender->lend(nic_address);
	const Lease lease = agent.lender->acquire(nic_address, "borrower-b");
	REQUIRE(agent.lender->devices().at(nic_address).data_path_ntb == lender_ntb);
	agent.lender->map_dma(nic_address, "borrower-b", lease.id, 0x100000, 0x2000, 0x1000);

	// Down for less than a lease time: kept (the guest's driver may ride it out).
	agent.kernel.links_down_ms[lender_ntb] = 9'999;
	CHECK(agent.lender->expire_due().empty());
	// The kernel cannot tell (old kernel, NTB gone): only the lease time counts.
	agent.kernel.links_down_ms[lender_ntb] = std::nullopt;
	CHECK(agent.lender->expire_due().empty());
	// Renewed over the management network all along, but the link down for a lease time: it ends.
	agent.clock.now += 5'000;
	agent.lender->renew(nic_address, "borrower-b", lease.id);
	agent.kernel.links_down_ms[lender_ntb] = 10'000;
	const auto expired = agent.lender->expire_due();
	REQUIRE(expired.size() == 1);
	CHECK(expired[0].lease.id == lease.id);
	CHECK(expired[0].link_down_ms == 10'000);
	CHECK(agent.vfio.records.at(nic_address)->mappings.empty());
	CHECK(agent.vfio.records.at(nic_address)->resets == 1);
	CHECK(agent.kernel.bars.empty());
	CHECK_FALSE(agent.lender->devices().at(nic_address).lease);
	CHECK(code_of([&] { agent.lender->renew(nic_address, "borrower-b", lease.id); }) == ErrorCode::no_such_lease);
	// A lease ending by its time says so (link_down_ms 0), link up or not.
	agent.kernel.links_down_ms.erase(lender_ntb);
	const Lease second = agent.lender->acquire(nic_address, "borrower-b");
	agent.clock.now += 10'000;
	const auto timed_out = agent.lender->expire_due();
	REQUIRE(timed_out.size() == 1);
	CHECK(timed_out[0].lease.id == second.id);
	CHECK(timed_out[0].link_down_ms == 0);
}

TEST_CASE("irq.set: eventfds to VFIO, then the same to IRQ_BRIDGE on the holder's slot; count 0 disarms both")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	agent.lender->lend(nic_address); // slot 1
	const Lease lease = agent.lender->acquire(nic_address, "borrower-b");
	const auto irq_set = [&](json index, json count, std::string id = "") {
		return agent.call("irq.set", {{"pci", nic_address}, {"lease", id.empty() ? lease.id : id}, {"index", index}, {"count", count}},
				  Principal::peer, "borrower-b");
	};
	std::size_t from = agent.journal.size();
	CHECK(irq_set(2, 3).at("result") == json::object());
	CHECK(since(agent.journal, from) ==
	      std::vector<std::string>{"vfio 0000:02:00.0 set_irqs 2 3", "kernel irq_bridge 0000:00:0b.0 1 0 3"});
	CHECK(agent.vfio.records.at(nic_address)->irqs.at(2) == 3);
	CHECK(agent.kernel.relays.at({lender_ntb, 1}) == 3);

	// Another vector count: disarmed first (VFIO resizes only from disarmed), then armed again.
	from = agent.journal.size();
	CHECK(irq_set(2, 5).contains("result"));
	CHECK(since(agent.journal, from) ==
	      std::vector<std::string>{"vfio 0000:02:00.0 set_irqs 2 0", "kernel irq_bridge 0000:00:0b.0 1 0 clear",
				       "vfio 0000:02:00.0 set_irqs 2 5", "kernel irq_bridge 0000:00:0b.0 1 0 5"});

	from = agent.journal.size();
	CHECK(irq_set(2, 0).contains("result"));
	CHECK(since(agent.journal, from) ==
	      std::vector<std::string>{"vfio 0000:02:00.0 set_irqs 2 0", "kernel irq_bridge 0000:00:0b.0 1 0 clear"});
	CHECK(agent.vfio.records.at(nic_address)->irqs.empty());
	CHECK(agent.kernel.relays.empty());

	const auto code = [](const json &reply) { return reply.at("error").at("code").get<int>(); };
	CHECK(code(irq_set(3, 1)) == static_cast<int>(ErrorCode::invalid_params));    // ERR/REQ are not relayed
	CHECK(code(irq_set(0, 2)) == static_cast<int>(ErrorCode::invalid_params));    // INTx has one vector
	CHECK(code(irq_set(2, 2049)) == static_cast<int>(ErrorCode::invalid_params)); // above FARPASS_IRQ_VECTORS
	CHECK(code(irq_set(2, 1ull << 32)) == static_cast<int>(ErrorCode::invalid_params));
	CHECK(code(irq_set(2, 1, "0000")) == static_cast<int>(ErrorCode::no_such_lease));

	// The relay refused: VFIO is disarmed again, the error comes back.
	agent.kernel.fail_irq_bridge = EBADF;
	const json refused = irq_set(1, 1);
	CHECK(code(refused) == static_cast<int>(ErrorCode::system_error));
	CHECK(refused.at("error").at("errno") == EBADF);
	CHECK(agent.vfio.records.at(nic_address)->irqs.empty());
}

TEST_CASE("irq.set of INTx: its one eventfd relayed, and an unmask eventfd to VFIO and to IRQ_BRIDGE's F_UNMASK")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	agent.lender->lend(nic_address); // slot 1
	const Lease lease = agent.lender->acquire(nic_address, "borrower-b");
	std::size_t from = agent.journal.size();
	agent.lender->set_irqs(nic_address, "borrower-b", lease.id, 0, 1);
	CHECK(since(agent.journal, from) ==
	      std::vector<std::string>{"vfio 0000:02:00.0 set_irqs 0 1", "kernel irq_bridge 0000:00:0b.0 1 0 1",
				       "vfio 0000:02:00.0 set_intx_unmask", "kernel irq_bridge_unmask 0000:00:0b.0 1"});
	CHECK(agent.kernel.unmasks.count({lender_ntb, 1}) == 1);

	// Disarming clears the slot, its unmask eventfd with it.
	agent.lender->set_irqs(nic_address, "borrower-b", lease.id, 0, 0);
	CHECK(agent.kernel.relays.empty());
	CHECK(agent.kernel.unmasks.empty());

	// The unmask relay refused: the vectors' relay and VFIO's INTx are undone, the error comes back.
	agent.kernel.fail_irq_bridge_unmask = EBADF;
	from = agent.journal.size();
	CHECK_THROWS_AS(agent.lender->set_irqs(nic_address, "borrower-b", lease.id, 0, 1), AgentError);
	CHECK(since(agent.journal, from) ==
	      std::vector<std::string>{"vfio 0000:02:00.0 set_irqs 0 1", "kernel irq_bridge 0000:00:0b.0 1 0 1",
				       "vfio 0000:02:00.0 set_intx_unmask", "kernel irq_bridge_unmask 0000:00:0b.0 1",
				       "kernel irq_bridge 0000:00:0b.0 1 0 clear", "vfio 0000:02:00.0 set_irqs 0 0"});
	CHECK(agent.kernel.relays.empty());
	CHECK(agent.vfio.records.at(nic_address)->irqs.empty());
}

TEST_CASE("a lease turns the device's memory space and bus master on; its end turns bus master off first")
{
	AgentFixture agent;
	agent.lender->lend(nic_address);
	const std::size_t from = agent.journal.size();
	const Lease lease = agent.lender->acquire(nic_address, "borrower-b");
	CHECK(since(agent.journal, from).back() == "vfio 0000:02:00.0 write_config 0x4 0x6");
	CHECK(agent.lender->read_config(nic_address, "borrower-b", lease.id, 4, 2) == 0x6);
	agent.lender->release(nic_address, "borrower-b", lease.id);
	CHECK(agent.vfio.records.at(nic_address)->config[4] == 0x2);
}

TEST_CASE("release tears down in order: bus master off, interrupts off, DMA unmapped, BARs unmapped, reset, free")
{
	AgentFixture agent;
	agent.lender->lend(nic_address);
	const Lease lease = agent.lender->acquire(nic_address, "borrower-b");
	agent.lender->set_irqs(nic_address, "borrower-b", lease.id, 2, 2);
	agent.lender->map_dma(nic_address, "borrower-b", lease.id, 0x100000, 0x2000, 0);
	const std::size_t from = agent.journal.size();
	agent.lender->release(nic_address, "borrower-b", lease.id);
	CHECK(since(agent.journal, from) == std::vector<std::string>{
						    "vfio 0000:02:00.0 write_config 0x4 0x2",
						    "vfio 0000:02:00.0 set_irqs 2 0",
						    "kernel irq_bridge 0000:00:0b.0 0 0 clear",
						    "vfio 0000:02:00.0 unmap_dma 0x100000 +0x2000",
						    "kernel bar_unmap 0000:00:0b.0 0000:02:00.0 0 0x0 +0x1000",
						    "kernel bar_unmap 0000:00:0b.0 0000:02:00.0 1 0x1000 +0x1000",
						    "kernel bar_unmap 0000:00:0b.0 0000:02:00.0 4 0x4000 +0x4000",
						    "vfio 0000:02:00.0 reset"});
	CHECK(agent.kernel.bars.empty());
	CHECK(agent.kernel.relays.empty());
	CHECK_FALSE(agent.lender->devices().at(nic_address).lease);
	CHECK(agent.lender->take_notices().empty());
}

TEST_CASE("expiry tears down the same way; a step that fails is a notice and the rest still runs")
{
	AgentFixture agent;
	agent.lender->lend(nic_address);
	const Lease lease = agent.lender->acquire(nic_address, "borrower-b");
	agent.lender->set_irqs(nic_address, "borrower-b", lease.id, 1, 1);
	agent.kernel.bars.erase({lender_ntb, nic_address, 1}); // as if the kernel had lost it: its unmap fails
	agent.clock.now += agent.lender->lease_ms();
	CHECK(agent.lender->expire_due().size() == 1);
	CHECK(agent.kernel.bars.empty());
	CHECK(agent.kernel.relays.empty());
	CHECK(agent.vfio.records.at(nic_address)->irqs.empty());
	CHECK(agent.vfio.records.at(nic_address)->resets == 1);
	CHECK(agent.lender->take_notices() ==
	      std::vector<std::string>{"unmapping BAR 1 of 0000:02:00.0: BAR_MAP: ENOENT"});
	CHECK_FALSE(agent.lender->devices().at(nic_address).lease);
}

TEST_CASE("a device not reset after its lease takes no new lease until a reset succeeds, across a restart too")
{
	AgentFixture agent;
	agent.lender->lend(nic_address);
	VfioRecord &record = *agent.vfio.records.at(nic_address);
	Lease lease = agent.lender->acquire(nic_address, "borrower-b");
	record.fail_resets = 2; // the reset at the lease's end and the one the next acquire tries
	agent.lender->release(nic_address, "borrower-b", lease.id);
	CHECK(agent.lender->take_notices() ==
	      std::vector<std::string>{"resetting 0000:02:00.0 after its last lease: VFIO_DEVICE_RESET failed; "
				       "no new lease until a reset succeeds"});
	CHECK(agent.lender->devices().at(nic_address).reset_failed);
	CHECK(agent.call("device.list", nlohmann::json::object()).at("result").at("devices").at(0).at("reset_failed") == true);

	agent.restart();
	agent.lender->restore();
	REQUIRE(agent.lender->devices().at(nic_address).reset_failed);
	const std::size_t from = agent.journal.size();
	CHECK(code_of([&] { agent.lender->acquire(nic_address, "borrower-b"); }) == ErrorCode::system_error);
	CHECK(since(agent.journal, from).empty()); // no BAR mapped, bus master not turned on
	CHECK_FALSE(agent.lender->devices().at(nic_address).lease);

	lease = agent.lender->acquire(nic_address, "borrower-b"); // this time the reset works
	CHECK(since(agent.journal, from).front() == "vfio 0000:02:00.0 reset");
	CHECK_FALSE(agent.lender->devices().at(nic_address).reset_failed);
	agent.lender->release(nic_address, "borrower-b", lease.id);
	CHECK_FALSE(agent.lender->devices().at(nic_address).reset_failed);
	CHECK(agent.lender->take_notices().empty());
}

TEST_CASE("a restart restores a lease's data path: BARs (still mapped: EEXIST counts), DMA, interrupts with new eventfds")
{
	AgentFixture agent;
	agent.lender->lend(nic_address);
	const Lease lease = agent.lender->acquire(nic_address, "borrower-b");
	agent.lender->map_dma(nic_address, "borrower-b", lease.id, 0x100000, 0x2000, 0x1000);
	agent.lender->set_irqs(nic_address, "borrower-b", lease.id, 2, 4);
	agent.restart(); // the fake kernel keeps its BAR mappings and relays, as farpass.ko does
	const std::size_t from = agent.journal.size();
	agent.lender->restore();
	CHECK(since(agent.journal, from) == std::vector<std::string>{nic_bars_mapped[0], nic_bars_mapped[1], nic_bars_mapped[2],
								     "vfio 0000:02:00.0 write_config 0x4 0x6",
								     "vfio 0000:02:00.0 map_dma 0x100000 +0x2000",
								     "vfio 0000:02:00.0 set_irqs 2 4",
								     "kernel irq_bridge 0000:00:0b.0 0 0 4"});
	CHECK(agent.lender->take_notices().empty());
	const LentDevice &device = agent.lender->devices().at(nic_address);
	CHECK(device.data_path_ntb == lender_ntb);
	CHECK(agent.vfio.records.at(nic_address)->mappings.at(0x100000) ==
	      std::make_pair(std::uint64_t{0x2000}, reinterpret_cast<std::uint64_t>(agent.kernel.window.data()) + 0x1000));
	CHECK(agent.kernel.relays.at({lender_ntb, 0}) == 4);
	// The lease ends as any other: everything goes.
	agent.lender->release(nic_address, "borrower-b", lease.id);
	CHECK(agent.kernel.bars.empty());
	CHECK(agent.kernel.relays.empty());
	CHECK(agent.vfio.records.at(nic_address)->mappings.empty());
}

TEST_CASE("peer-to-peer on the lender: a device's DMA reaches another's BAR under both leases of one borrower; the peer's end unmaps it first")
{
	AgentFixture agent;
	agent.lender->lend(nvme_address);
	agent.lender->lend(nic_address);
	const Lease nvme = agent.lender->acquire(nvme_address, "borrower-b");
	Lease nic = agent.lender->acquire(nic_address, "borrower-b");
	const auto map_peer = [&](const std::string &borrower, std::uint64_t iova, std::uint64_t size,
				  const std::string &peer, const std::string &peer_lease, std::uint64_t bar) {
		agent.lender->map_peer_dma(nvme_address, borrower, nvme.id, iova, size, peer, peer_lease, bar);
	};
	const std::size_t from = agent.journal.size();
	map_peer("borrower-b", 0x800000000, 0x4000, nic_address, nic.id, 4);
	CHECK(since(agent.journal, from) ==
	      std::vector<std::string>{"vfio 0000:01:00.0 map_dma_to_bar 0x800000000 +0x4000 0000:02:00.0 BAR 4"});
	CHECK(agent.store.load(1)->at("devices")[0]["lease"]["peer_dma"] ==
	      json::parse(R"([{"iova":34359738368,"size":16384,"peer_pci":"0000:02:00.0","peer_lease":")" + nic.id +
			  R"(","bar":4}])"));

	// Refused: another borrower, a lease of the peer that is not its current one, a BAR not lent or
	// smaller, no whole pages, the device itself.
	CHECK(code_of([&] { map_peer("borrower-c", 0x900000000, 0x1000, nic_address, nic.id, 0); }) ==
	      ErrorCode::no_such_lease);
	CHECK(code_of([&] { map_peer("borrower-b", 0x900000000, 0x1000, nic_address, "0123456789abcdef", 0); }) ==
	      ErrorCode::no_such_lease);
	CHECK(message_of([&] { map_peer("borrower-b", 0x900000000, 0x1000, nic_address, nic.id, 2); }) ==
	      "BAR 2 of 0000:02:00.0 is not a memory BAR lent with it of at least 4096 bytes");
	CHECK(code_of([&] { map_peer("borrower-b", 0x900000000, 0x8000, nic_address, nic.id, 4); }) ==
	      ErrorCode::invalid_params);
	CHECK(code_of([&] { map_peer("borrower-b", 0x900000800, 0x1000, nic_address, nic.id, 4); }) ==
	      ErrorCode::invalid_params);
	CHECK(code_of([&] { map_peer("borrower-b", ~0ull - 0xfff, 0x2000, nic_address, nic.id, 4); }) ==
	      ErrorCode::invalid_params);
	CHECK(code_of([&] { map_peer("borrower-b", 0x900000000, 0x1000, nvme_address, nvme.id, 0); }) ==
	      ErrorCode::invalid_params);
	CHECK(code_of([&] { map_peer("borrower-b", 0x900000000, 0x1000, nic_address, nic.id, 6); }) ==
	      ErrorCode::invalid_params);
	CHECK(agent.vfio.records.at(nvme_address)->mappings.size() == 1);

	// The peer's lease ends: nothing reaches its BAR any more before anything else of its teardown.
	const std::size_t release = agent.journal.size();
	agent.lender->release(nic_address, "borrower-b", nic.id);
	CHECK(since(agent.journal, release).front() == "vfio 0000:01:00.0 unmap_dma 0x800000000 +0x4000");
	CHECK(agent.vfio.records.at(nvme_address)->mappings.empty());
	CHECK(agent.lender->devices().at(nvme_address).peer_dma_mappings.empty());
	CHECK(agent.lender->take_notices().empty());
	// Borrowed by another host now: out of reach.
	nic = agent.lender->acquire(nic_address, "borrower-c");
	CHECK(code_of([&] { map_peer("borrower-b", 0x800000000, 0x4000, nic_address, nic.id, 4); }) ==
	      ErrorCode::no_such_lease);
}

TEST_CASE("a peer mapping that cannot be unmapped at the peer's lease end takes all of its device's DMA with it")
{
	AgentFixture agent;
	const auto [nvme, nic] = peer_pair(agent);
	agent.lender->map_dma(nvme_address, "borrower-b", nvme.id, 0x100000, 0x2000, 0);
	agent.vfio.records.at(nvme_address)->fail_unmap_dma = EIO;
	agent.lender->release(nic_address, "borrower-b", nic.id);
	CHECK(agent.vfio.records.at(nvme_address)->mappings.empty());
	const LentDevice &device = agent.lender->devices().at(nvme_address);
	CHECK(device.dma_mappings.empty());
	CHECK(device.peer_dma_mappings.empty());
	CHECK(device.lease);
	CHECK(agent.lender->take_notices() ==
	      std::vector<std::string>{"unmapping the peer DMA of 0000:01:00.0 at IOVA 34359738368 onto 0000:02:00.0: "
				       "VFIO_IOMMU_UNMAP_DMA failed; all DMA of 0000:01:00.0 unmapped instead"});
}

TEST_CASE("a restart maps a peer-to-peer DMA again onto the peer lease it was made for, and drops one whose peer lease is gone")
{
	AgentFixture agent;
	peer_pair(agent);
	agent.restart();
	std::size_t from = agent.journal.size();
	agent.lender->restore();
	const std::vector<std::string> after = since(agent.journal, from);
	CHECK(std::count(after.begin(), after.end(),
			 "vfio 0000:01:00.0 map_dma_to_bar 0x800000000 +0x4000 0000:02:00.0 BAR 4") == 1);
	CHECK(agent.lender->devices().at(nvme_address).peer_dma_mappings.size() == 1);
	CHECK(agent.lender->take_notices().empty());

	// The saved peer lease is not the peer's: not mapped, a notice, forgotten.
	json state = *agent.store.load(1);
	state["devices"][0]["lease"]["peer_dma"][0]["peer_lease"] = "0123456789abcdef";
	agent.store.save(state);
	agent.restart();
	from = agent.journal.size();
	agent.lender->restore();
	for (const std::string &line : since(agent.journal, from))
		CHECK(line.find("map_dma_to_bar") == std::string::npos);
	CHECK(agent.vfio.records.at(nvme_address)->mappings.empty());
	CHECK(agent.lender->take_notices() ==
	      std::vector<std::string>{"restoring the peer DMA of 0000:01:00.0 at IOVA 34359738368 onto 0000:02:00.0: "
				       "no live lease 0123456789abcdef of borrower-b on 0000:02:00.0"});
	CHECK(agent.store.load(1)->at("devices")[0]["lease"]["peer_dma"].empty());
}

TEST_CASE("a restart without the interrupts armed clears the slot's relay; what cannot be restored is a notice and forgotten")
{
	AgentFixture agent;
	agent.lender->lend(nic_address);
	const Lease lease = agent.lender->acquire(nic_address, "borrower-b");
	agent.lender->map_dma(nic_address, "borrower-b", lease.id, 0x100000, 0x2000, 0);
	agent.kernel.window.resize(0x1000); // the window shrank under the restart: the mapping no longer fits
	agent.restart();
	const std::size_t from = agent.journal.size();
	agent.lender->restore();
	CHECK(since(agent.journal, from) == std::vector<std::string>{nic_bars_mapped[0], nic_bars_mapped[1], nic_bars_mapped[2],
								     "vfio 0000:02:00.0 write_config 0x4 0x6",
								     "kernel irq_bridge 0000:00:0b.0 0 0 clear"});
	CHECK(agent.lender->take_notices() ==
	      std::vector<std::string>{"restoring the lease of 0000:02:00.0 by borrower-b: DMA at IOVA 1048576: DMA window "
				       "range [0, +8192) is empty or outside the 4096-byte window"});
	agent.restart();
	agent.lender->restore();
	CHECK(agent.lender->devices().at(nic_address).dma_mappings.empty());
}

TEST_CASE("an agent killed inside acquire, after its BAR_MAPs and before saving the lease: the restart unmaps them")
{
	AgentFixture agent;
	agent.lender->lend(nic_address);
	const fs::path state = agent.dir.path() / "state" / "state.json";
	const fs::path before = agent.dir.path() / "before-acquire.json";
	fs::copy_file(state, before);
	agent.lender->acquire(nic_address, "borrower-b");
	fs::copy_file(before, state, fs::copy_options::overwrite_existing); // the lease was never saved
	agent.restart();
	const std::size_t from = agent.journal.size();
	agent.lender->restore();
	CHECK(since(agent.journal, from) == std::vector<std::string>{
						    "kernel bar_unmap 0000:00:0b.0 0000:02:00.0 0 0x0 +0x1000",
						    "kernel bar_unmap 0000:00:0b.0 0000:02:00.0 1 0x1000 +0x1000",
						    "kernel bar_unmap 0000:00:0b.0 0000:02:00.0 4 0x4000 +0x4000"});
	CHECK(agent.kernel.bars.empty());
	CHECK(agent.lender->take_notices() ==
	      std::vector<std::string>{"BAR 0 of 0000:02:00.0 was mapped on 0000:00:0b.0 without a lease: unmapped",
				       "BAR 1 of 0000:02:00.0 was mapped on 0000:00:0b.0 without a lease: unmapped",
				       "BAR 4 of 0000:02:00.0 was mapped on 0000:00:0b.0 without a lease: unmapped"});
	// The device can be borrowed again (its BAR_MAPs were EEXIST before).
	CHECK(agent.call("lease.acquire", {{"pci", nic_address}}, Principal::peer, "borrower-b").at("result").at("data_path") == true);
	CHECK(agent.kernel.bars.size() == 3);
	// A restart with nothing mapped finds nothing to unmap and says nothing.
	agent.lender->release(nic_address, "borrower-b", agent.lender->devices().at(nic_address).lease->id);
	agent.restart();
	agent.lender->restore();
	CHECK(agent.kernel.bars.empty());
	CHECK(agent.lender->take_notices().empty());
}

TEST_CASE("a state.json that is not a version-1 state object is refused with an error naming it, not a crash")
{
	for (const json &bad : {json(""), json::array(), json{{"version", "1"}}, json{{"version", 2}}}) {
		AgentFixture agent;
		agent.store.save(bad);
		agent.restart();
		CHECK(message_of([&] { agent.lender->restore(); }).find("is not a version 1 state object") != std::string::npos);
	}
}

// ---- restarts that keep the device: the fd store (docs/agent-protocol.md, "Restarts keep the device")

namespace {

// With the fd store connected: the NIC lent and borrowed by borrower-b, with one DMA mapping.
Lease borrowed_with_store(AgentFixture &agent)
{
	agent.fd_store.connected = true;
	agent.lender->lend(nic_address);
	const Lease lease = agent.lender->acquire(nic_address, "borrower-b");
	agent.lender->map_dma(nic_address, "borrower-b", lease.id, 0x100000, 0x2000, 0x1000);
	return lease;
}

} // namespace

TEST_CASE("with an fd store a leased device is adopted across a restart: not reset, DMA and interrupts kept")
{
	AgentFixture agent;
	const Lease lease = borrowed_with_store(agent);
	agent.lender->set_irqs(nic_address, "borrower-b", lease.id, 2, 4);
	CHECK(agent.fd_store.held.at("vfio.0000-02-00.0").size() == 3);
	const auto &record = *agent.vfio.records.at(nic_address);
	const int resets = record.resets;
	agent.restart();
	const std::size_t from = agent.journal.size();
	agent.lender->restore();
	CHECK(record.adoptions == 1);
	CHECK(record.opens == 1); // the lend's: no new container
	CHECK(record.resets == resets);
	// BARs checked (still mapped), bus master on again, the DMA mapping found in place (EEXIST), the
	// interrupts left armed: no set_irqs, no new relay.
	CHECK(since(agent.journal, from) == std::vector<std::string>{nic_bars_mapped[0], nic_bars_mapped[1], nic_bars_mapped[2],
								     "vfio 0000:02:00.0 write_config 0x4 0x6"});
	CHECK(agent.lender->take_notices() == std::vector<std::string>{"adopted 0000:02:00.0's VFIO descriptors: not reset"});
	CHECK(record.irqs.at(2) == 4);
	CHECK(agent.kernel.relays.at({lender_ntb, 0}) == 4);
	const LentDevice &device = agent.lender->devices().at(nic_address);
	CHECK(device.lease->id == lease.id);
	CHECK(device.dma_mappings.size() == 1);
	CHECK(device.irqs->count == 4);
	CHECK(agent.fd_store.held.at("vfio.0000-02-00.0").size() == 3); // stored again, not added to
	// A second restart adopts again; the lease then ends as any other, and a mapping the dead agent made
	// but never saved goes with it.
	agent.restart();
	agent.lender->restore();
	CHECK(record.adoptions == 2);
	agent.vfio.records.at(nic_address)->mappings[0x900000] = {0x1000, 0};
	agent.lender->release(nic_address, "borrower-b", lease.id);
	CHECK(record.mappings.empty());
	CHECK(record.irqs.empty());
	CHECK(record.resets == resets + 1);
}

TEST_CASE("stored descriptors that are not the device's are refused: it is opened anew, as without a store")
{
	AgentFixture agent;
	borrowed_with_store(agent);
	// The NVMe's descriptors under the NIC's name, then the right ones but one short.
	agent.lender->lend(nvme_address);
	for (const std::size_t keep : {3, 2}) {
		auto &held = agent.fd_store.held;
		held.erase("vfio.0000-02-00.0");
		for (const int fd : agent.lender->devices().at(keep == 3 ? nvme_address : nic_address).vfio->descriptors())
			if (held["vfio.0000-02-00.0"].size() < keep)
				held["vfio.0000-02-00.0"].emplace_back(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
		const auto &record = *agent.vfio.records.at(nic_address);
		const int opens = record.opens;
		agent.restart();
		const std::size_t from = agent.journal.size();
		agent.lender->restore();
		CHECK(record.adoptions == 0);
		CHECK(record.opens == opens + 1);
		CHECK(agent.lender->take_notices() ==
		      std::vector<std::string>{"stored VFIO descriptors of 0000:02:00.0 refused: not the VFIO descriptors of "
					       "0000:02:00.0; opening it again"});
		// As without a store: the mapping made again in the new container.
		CHECK(std::count(agent.journal.begin() + static_cast<std::ptrdiff_t>(from), agent.journal.end(),
				 "vfio 0000:02:00.0 map_dma 0x100000 +0x2000") == 1);
		CHECK(agent.fd_store.held.at("vfio.0000-02-00.0").size() == 3);
	}
}

TEST_CASE("stored descriptors of a device without a lease, or of no lent device, are closed; unlend removes them")
{
	AgentFixture agent;
	agent.fd_store.connected = true;
	agent.lender->lend(nic_address);
	agent.fd_store.held["vfio.0000-09-00.0"].emplace_back(::eventfd(0, EFD_CLOEXEC));
	const int opens = agent.vfio.records.at(nic_address)->opens;
	agent.restart();
	agent.lender->restore();
	CHECK(agent.vfio.records.at(nic_address)->adoptions == 0);
	CHECK(agent.vfio.records.at(nic_address)->opens == opens + 1);
	CHECK(agent.lender->take_notices() ==
	      std::vector<std::string>{"stored descriptors \"vfio.0000-09-00.0\" are of no lent device: closed"});
	CHECK(agent.fd_store.held.count("vfio.0000-09-00.0") == 0);
	CHECK(agent.fd_store.held.at("vfio.0000-02-00.0").size() == 3);
	agent.lender->unlend(nic_address, false);
	CHECK(agent.fd_store.held.empty());
	// Without a state file at all, everything stored is closed.
	agent.fd_store.held["vfio.0000-02-00.0"].emplace_back(::eventfd(0, EFD_CLOEXEC));
	fs::remove(agent.dir.path() / "state" / "state.json");
	agent.restart();
	CHECK(agent.lender->restore().empty());
	CHECK(agent.fd_store.held.empty());
}
