// Fakes for the agent's seams (clock, sysfs root, VFIO, kernel port, transport) and a fixture that
// assembles a whole agent core from them. Shared by the agent's unit tests and its fuzz target.
#pragma once

#include "clock.hpp"
#include "errors.hpp"
#include "dispatcher.hpp"
#include "kernel_port.hpp"
#include "lender.hpp"
#include "methods.hpp"
#include "session.hpp"
#include "state_store.hpp"
#include "sysfs.hpp"
#include "transport.hpp"
#include "vfio.hpp"

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace farpass::agent::testing {

namespace fs = std::filesystem;

class TempDir {
public:
	TempDir()
	{
		std::string pattern = (fs::temp_directory_path() / "farpass-test-XXXXXX").string();
		path_ = ::mkdtemp(pattern.data());
	}
	~TempDir() { fs::remove_all(path_); }
	TempDir(const TempDir &) = delete;
	TempDir &operator=(const TempDir &) = delete;
	const fs::path &path() const { return path_; }

private:
	fs::path path_;
};

inline std::string read_file(const fs::path &path)
{
	std::ifstream in(path);
	std::ostringstream contents;
	contents << in.rdbuf();
	return contents.str();
}

inline void write_file(const fs::path &path, const std::string &contents)
{
	fs::create_directories(path.parent_path());
	std::ofstream(path) << contents;
}

class FakeClock final : public Clock {
public:
	std::int64_t now_ms() const override { return now; }
	std::int64_t now = 1'700'000'000'000;
};

// A sysfs tree with PCI devices, as the kernel lays it out (symlinks for driver and iommu_group).
class SysfsTree {
public:
	explicit SysfsTree(const fs::path &root) : root_(root) { write_file(root_ / "sys/bus/pci/drivers_probe", ""); }

	void add_device(const std::string &address, std::uint16_t vendor, std::uint16_t device,
			const std::array<std::uint64_t, 6> &bar_sizes, int iommu_group, const std::string &driver,
			std::uint32_t class_code = 0x010802)
	{
		const fs::path dir = root_ / "sys/bus/pci/devices" / address;
		char hex[16];
		std::snprintf(hex, sizeof(hex), "0x%06x\n", class_code);
		write_file(dir / "class", hex);
		std::snprintf(hex, sizeof(hex), "0x%04x\n", 0x1af4);
		write_file(dir / "subsystem_vendor", hex);
		std::snprintf(hex, sizeof(hex), "0x%04x\n", 0x1100);
		write_file(dir / "subsystem_device", hex);
		write_file(dir / "revision", "0x02\n");
		std::snprintf(hex, sizeof(hex), "0x%04x\n", vendor);
		write_file(dir / "vendor", hex);
		std::snprintf(hex, sizeof(hex), "0x%04x\n", device);
		write_file(dir / "device", hex);
		std::string resource;
		std::uint64_t start = 0xfe000000;
		for (std::uint64_t size : bar_sizes) {
			char line[80];
			std::snprintf(line, sizeof(line), "0x%016llx 0x%016llx 0x%016llx\n",
				      size ? (unsigned long long)start : 0ULL,
				      size ? (unsigned long long)(start + size - 1) : 0ULL, size ? 0x40200ULL : 0ULL);
			resource += line;
			start += size;
		}
		resource += "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"; // ROM
		write_file(dir / "resource", resource);
		write_file(dir / "driver_override", "(null)\n");
		fs::create_directories(root_ / "sys/kernel/iommu_groups" / std::to_string(iommu_group));
		fs::create_directory_symlink("../../../../kernel/iommu_groups/" + std::to_string(iommu_group),
					     dir / "iommu_group");
		set_driver(address, driver);
	}

	// What the kernel does when a driver binds (the agent only asks for it through sysfs writes).
	void set_driver(const std::string &address, const std::string &driver)
	{
		const fs::path link = root_ / "sys/bus/pci/devices" / address / "driver";
		fs::remove(link);
		if (driver.empty())
			return;
		write_file(root_ / "sys/bus/pci/drivers" / driver / "unbind", "");
		fs::create_directory_symlink("../../../../bus/pci/drivers/" + driver, link);
	}

	void remove_device(const std::string &address) { fs::remove_all(root_ / "sys/bus/pci/devices" / address); }

	std::string read(const std::string &relative) const { return read_file(root_ / relative); }

private:
	fs::path root_;
};

// What a fake VFIO device has been asked to do; outlives the device so tests can inspect it.
struct VfioRecord {
	std::array<std::uint8_t, 4096> config{};
	int resets = 0;
	bool open = false;
	std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> mappings; // iova -> (size, vaddr)
};

class FakeVfioDevice final : public VfioDevice {
public:
	explicit FakeVfioDevice(std::shared_ptr<VfioRecord> record) : record_(std::move(record)) { record_->open = true; }
	~FakeVfioDevice() override { record_->open = false; }

	std::uint32_t read_config(std::uint32_t offset, unsigned width) override
	{
		std::uint32_t value = 0;
		for (unsigned i = 0; i < width; i++)
			value |= std::uint32_t(record_->config[offset + i]) << (8 * i);
		return value;
	}
	void write_config(std::uint32_t offset, unsigned width, std::uint32_t value) override
	{
		for (unsigned i = 0; i < width; i++)
			record_->config[offset + i] = static_cast<std::uint8_t>(value >> (8 * i));
	}
	void reset() override { record_->resets++; }
	void map_dma(std::uint64_t iova, std::uint64_t size, std::uint64_t vaddr) override
	{
		record_->mappings[iova] = {size, vaddr};
	}
	void unmap_dma(std::uint64_t iova, std::uint64_t) override { record_->mappings.erase(iova); }

private:
	std::shared_ptr<VfioRecord> record_;
};

class FakeVfio final : public Vfio {
public:
	std::unique_ptr<VfioDevice> open(const std::string &pci_address, int) override
	{
		if (failing.count(pci_address))
			throw AgentError(ErrorCode::system_error, EBUSY, "VFIO group busy");
		auto &record = records[pci_address];
		if (!record)
			record = std::make_shared<VfioRecord>();
		return std::make_unique<FakeVfioDevice>(record);
	}

	std::map<std::string, std::shared_ptr<VfioRecord>> records;
	std::set<std::string> failing;
};

// The kernel's borrower side as the agent sees it: announced ids, withdrawals (with EBUSY and PENDING
// on demand), an upcall queue and the replies to it.
class FakeKernelPort final : public KernelPort {
public:
	bool available() override { return loaded; }
	std::string unavailable_reason() const override { return loaded ? "" : "opening /dev/farpass: ENOENT"; }
	bool announce(const RemoteDevice &device) override
	{
		if (!loaded)
			throw AgentError(ErrorCode::system_error, ENODEV, "/dev/farpass is gone");
		if (fail_announce)
			throw AgentError(ErrorCode::system_error, fail_announce, "ANNOUNCE_DEVICE failed");
		if (announced.count(device.id))
			throw AgentError(ErrorCode::system_error, EEXIST, "ANNOUNCE_DEVICE: EEXIST");
		announced[device.id] = device;
		announce_calls++;
		return pending;
	}
	bool withdraw(std::uint32_t id) override
	{
		if (busy.count(id))
			throw AgentError(ErrorCode::system_error, EBUSY, "WITHDRAW_DEVICE: EBUSY");
		if (!announced.erase(id))
			throw AgentError(ErrorCode::system_error, ENOENT, "WITHDRAW_DEVICE: ENOENT");
		withdrawn.push_back(id);
		return pending;
	}
	int upcall_fd() const override { return -1; }
	std::optional<Upcall> next_upcall() override
	{
		if (upcalls.empty())
			return std::nullopt;
		Upcall upcall = upcalls.front();
		upcalls.erase(upcalls.begin());
		return upcall;
	}
	void complete(std::uint64_t seq, const UpcallReply &reply) override { replies[seq] = reply; }
	std::span<std::byte> outbound_window(const std::string &) override { return window; }

	bool loaded = true;
	bool pending = false;
	int fail_announce = 0;
	int announce_calls = 0;
	std::map<std::uint32_t, RemoteDevice> announced;
	std::vector<std::uint32_t> withdrawn;
	std::set<std::uint32_t> busy;
	std::vector<Upcall> upcalls;
	std::map<std::uint64_t, UpcallReply> replies;
	std::vector<std::byte> window = std::vector<std::byte>(1 << 20);
};

// An in-memory pipe to a Session served in the same thread: what the client writes is delivered to
// the session at once, and the session's answer becomes readable.
class LoopbackTransport final : public Transport {
public:
	explicit LoopbackTransport(Session &server) : server_(server) {}

	void write(std::string_view bytes) override { pending_ += server_.receive(bytes); }
	std::string read_some() override
	{
		if (pending_.empty() && !server_.closed())
			throw AgentError(ErrorCode::timed_out, "loopback: the session has nothing to say");
		return std::exchange(pending_, {});
	}

private:
	Session &server_;
	std::string pending_;
};

inline constexpr const char *nvme_address = "0000:01:00.0";
inline constexpr const char *nic_address = "0000:02:00.0";
inline const std::string test_key_secret = "0123456789abcdef0123456789abcdef";

// A whole agent core on fakes: host "lender-a" with an NVMe (bound to nvme) and a NIC (unbound).
struct AgentFixture {
	explicit AgentFixture(std::int64_t lease_ms = 10'000, std::string host = "lender-a")
		: tree(dir.path() / "root"), sysfs(dir.path() / "root"),
		  store((fs::create_directories(dir.path() / "state"), dir.path() / "state"))
	{
		tree.add_device(nvme_address, 0x8086, 0x5845, {0x4000, 0, 0, 0, 0, 0}, 7, "nvme");
		tree.add_device(nic_address, 0x1af4, 0x1041, {0x1000, 0x1000, 0, 0, 0x4000, 0}, 8, "", 0x020000);
		make_agent(lease_ms, std::move(host));
	}

	// A new agent on the same state directory and host, as after a restart.
	void restart()
	{
		const std::int64_t lease_ms = lender->lease_ms();
		std::string host = context->host;
		dispatcher.reset();
		context.reset();
		lender.reset();
		make_agent(lease_ms, std::move(host));
	}

	nlohmann::json call(const std::string &method, const nlohmann::json &params,
			    Principal principal = Principal::local_admin, const std::string &peer_host = "")
	{
		const nlohmann::json request = {{"id", 1}, {"method", method}, {"params", params}};
		return dispatcher->handle(request.dump(), CallContext{principal, peer_host});
	}

	TempDir dir;
	SysfsTree tree;
	Sysfs sysfs;
	StateStore store;
	FakeVfio vfio;
	FakeKernelPort kernel;
	FakeClock clock;
	std::unique_ptr<Lender> lender;
	std::unique_ptr<AgentContext> context;
	std::unique_ptr<Dispatcher> dispatcher;

private:
	void make_agent(std::int64_t lease_ms, std::string host)
	{
		lender = std::make_unique<Lender>(sysfs, vfio, kernel, clock, store, lease_ms);
		context = std::make_unique<AgentContext>(AgentContext{std::move(host), *lender, clock.now, {}, {}});
		dispatcher = std::make_unique<Dispatcher>(method_table(*context));
	}
};

} // namespace farpass::agent::testing
