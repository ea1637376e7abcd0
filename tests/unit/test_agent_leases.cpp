// The lender's devices and leases (lender-agent/lender.cpp) on fake sysfs, VFIO and clock: lending binds
// through driver_override, one borrower at a time, expiry unmaps and resets, state survives restarts.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "agent_fakes.hpp"
#include "errors.hpp"

using namespace farpass::agent;
using namespace farpass::agent::testing;

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
}
