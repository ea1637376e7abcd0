// Fakes for the agent's seams (clock, sysfs root, VFIO, kernel port, transport) and a fixture that
// assembles a whole agent core from them. Shared by the agent's unit tests and its fuzz target.
#pragma once

#include "clock.hpp"
#include "errors.hpp"
#include "dispatcher.hpp"
#include "fd_store.hpp"
#include "kernel_port.hpp"
#include "lender.hpp"
#include "methods.hpp"
#include "session.hpp"
#include "state_store.hpp"
#include "sysfs.hpp"
#include "transport.hpp"
#include "vfio.hpp"

#include <fcntl.h>
#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace farpass::agent::testing {

namespace fs = std::filesystem;

// The checkout's top directory, from meson's test() environment: a path compiled in would make every
// clone's objects differ (and miss ccache).
inline fs::path source_root()
{
	const char *root = std::getenv("FARPASS_SOURCE_ROOT");
	if (!root || !*root)
		throw std::runtime_error("FARPASS_SOURCE_ROOT is not set: run the test through meson test");
	return root;
}

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

// `now` is the monotonic time: advancing it moves both clocks. wall_offset steps the wall clock alone
// (NTP, an operator), as a host's clock can; the two differ from the start, as on a real host. Atomic:
// a test may advance it while the borrower's workers read it.
class FakeClock final : public Clock {
public:
	std::int64_t monotonic_ms() const override { return now; }
	std::int64_t wall_ms() const override { return now + wall_offset; }
	std::atomic<std::int64_t> now = 86'400'000;
	std::int64_t wall_offset = 1'700'000'000'000;
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

// The order of what the fake VFIO devices and kernel port were asked to do, across both, one line each
// ("vfio 0000:01:00.0 reset", "kernel bar_map 0000:00:0a.0 0000:01:00.0 0 0x0 +0x4000").
using Journal = std::vector<std::string>;

inline std::string hex(std::uint64_t value)
{
	std::ostringstream text;
	text << "0x" << std::hex << value;
	return text.str();
}

// Whether fd is an open eventfd (what VFIO_DEVICE_SET_IRQS and IRQ_BRIDGE need).
inline bool is_eventfd(int fd)
{
	const std::string link = fs::read_symlink("/proc/self/fd/" + std::to_string(fd)).string();
	return link == "anon_inode:[eventfd]";
}

// What a fake VFIO device has been asked to do; outlives the device so tests can inspect it.
struct VfioRecord {
	std::array<std::uint8_t, 4096> config{};
	int resets = 0;
	bool open = false;
	std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> mappings; // iova -> (size, vaddr)
	std::map<unsigned, std::size_t> irqs; // index -> vectors armed (each with an eventfd)
	int fail_set_irqs = 0;		      // errno for the next set_irqs that arms vectors
	int fail_unmap_dma = 0;		      // errno for the next unmap_dma
	int fail_resets = 0;		      // how many of the next resets fail (EINVAL, as with no reset method)
	int opens = 0;			      // new containers (a real one starts empty, the device reset)
	int adoptions = 0;		      // descriptors of a previous agent taken over
};

// Stand-ins for a fake device's container, group and device descriptors: memfds named after them, so
// the fake VFIO can tell whose they are ("/memfd:vfio 0000:01:00.0 group (deleted)").
inline std::string fake_vfio_fd_link(const std::string &address, const std::string &kind)
{
	return "/memfd:vfio " + address + " " + kind + " (deleted)";
}

class FakeVfioDevice final : public VfioDevice {
public:
	FakeVfioDevice(std::string address, std::shared_ptr<VfioRecord> record, Journal *journal)
		: address_(std::move(address)), record_(std::move(record)), journal_(journal)
	{
		record_->open = true;
		for (const char *kind : {"container", "group", "device"})
			fds_.emplace_back(::memfd_create(("vfio " + address_ + " " + kind).c_str(), MFD_CLOEXEC));
	}
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
		note("write_config " + hex(offset) + " " + hex(value));
	}
	void reset() override
	{
		if (record_->fail_resets) {
			record_->fail_resets--;
			throw AgentError(ErrorCode::system_error, EINVAL, "VFIO_DEVICE_RESET failed");
		}
		record_->resets++;
		note("reset");
	}
	void set_irqs(unsigned index, std::span<const int> fds) override
	{
		if (!fds.empty() && record_->fail_set_irqs)
			throw AgentError(ErrorCode::system_error, std::exchange(record_->fail_set_irqs, 0),
					 "VFIO_DEVICE_SET_IRQS failed");
		for (const int fd : fds)
			if (!is_eventfd(fd))
				throw AgentError(ErrorCode::system_error, EINVAL, "VFIO_DEVICE_SET_IRQS: not an eventfd");
		if (fds.empty())
			record_->irqs.erase(index);
		else
			record_->irqs[index] = fds.size();
		note("set_irqs " + std::to_string(index) + " " + std::to_string(fds.size()));
	}
	void set_intx_unmask(int fd) override
	{
		if (!record_->irqs.count(0) || !is_eventfd(fd))
			throw AgentError(ErrorCode::system_error, EINVAL, "VFIO_DEVICE_SET_IRQS: INTx unmask");
		note("set_intx_unmask");
	}
	void map_dma(std::uint64_t iova, std::uint64_t size, std::uint64_t vaddr) override
	{
		if (record_->mappings.count(iova))
			throw AgentError(ErrorCode::system_error, EEXIST, "VFIO_IOMMU_MAP_DMA: mapped already");
		record_->mappings[iova] = {size, vaddr};
		note("map_dma " + hex(iova) + " +" + hex(size));
	}
	void unmap_dma(std::uint64_t iova, std::uint64_t size) override
	{
		if (record_->fail_unmap_dma)
			throw AgentError(ErrorCode::system_error, std::exchange(record_->fail_unmap_dma, 0),
					 "VFIO_IOMMU_UNMAP_DMA failed");
		record_->mappings.erase(iova);
		note("unmap_dma " + hex(iova) + " +" + hex(size));
	}
	void map_dma_to_bar(std::uint64_t iova, std::uint64_t size, VfioDevice &peer, unsigned bar) override
	{
		const auto &peer_device = dynamic_cast<const FakeVfioDevice &>(peer);
		if (record_->mappings.count(iova))
			throw AgentError(ErrorCode::system_error, EEXIST, "VFIO_IOMMU_MAP_DMA: mapped already");
		record_->mappings[iova] = {size, 0};
		note("map_dma_to_bar " + hex(iova) + " +" + hex(size) + " " + peer_device.address_ + " BAR " +
		     std::to_string(bar));
	}
	void unmap_all_dma() override
	{
		record_->mappings.clear();
		note("unmap_all_dma");
	}
	std::vector<int> descriptors() const override
	{
		std::vector<int> fds;
		for (const Fd &fd : fds_)
			fds.push_back(fd.get());
		return fds;
	}

private:
	void note(const std::string &what)
	{
		if (journal_)
			journal_->push_back("vfio " + address_ + " " + what);
	}

	std::string address_;
	std::shared_ptr<VfioRecord> record_;
	std::vector<Fd> fds_;
	Journal *journal_;
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
		record->opens++;
		record->mappings.clear();
		record->irqs.clear();
		return std::make_unique<FakeVfioDevice>(pci_address, record, journal);
	}
	// Takes the fds if they are the three of the device's memfds, container, group and device in order.
	std::unique_ptr<VfioDevice> adopt(const std::string &pci_address, int, std::vector<Fd> fds) override
	{
		const auto record = records.find(pci_address);
		const char *kinds[] = {"container", "group", "device"};
		bool theirs = record != records.end() && fds.size() == 3;
		for (std::size_t i = 0; theirs && i < 3; i++)
			theirs = fs::read_symlink("/proc/self/fd/" + std::to_string(fds[i].get())).string() ==
				 fake_vfio_fd_link(pci_address, kinds[i]);
		if (!theirs)
			throw AgentError(ErrorCode::system_error, EINVAL, "not the VFIO descriptors of " + pci_address);
		record->second->adoptions++;
		return std::make_unique<FakeVfioDevice>(pci_address, record->second, journal);
	}

	std::map<std::string, std::shared_ptr<VfioRecord>> records;
	std::set<std::string> failing;
	Journal *journal = nullptr;
};

// The fd store as systemd keeps it: copies of what was stored, by name, handed to the next agent at a
// restart. Not connected (the default, as without $NOTIFY_SOCKET) it keeps nothing.
class FakeFdStore final : public FdStore {
public:
	std::map<std::string, std::vector<Fd>> take_received() override { return std::exchange(received, {}); }
	void store(const std::string &name, std::span<const int> fds) override
	{
		if (!connected)
			return;
		for (const int fd : fds)
			held[name].emplace_back(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
	}
	void remove(const std::string &name) override { held.erase(name); }
	// A new agent gets copies of what the store holds (LISTEN_FDS), which it keeps.
	void restart()
	{
		received.clear();
		for (const auto &[name, fds] : held)
			for (const Fd &fd : fds)
				received[name].emplace_back(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
	}

	bool connected = false;
	std::map<std::string, std::vector<Fd>> held;
	std::map<std::string, std::vector<Fd>> received;
};

// The kernel as the agent sees it: announced ids, each in its slot's mdev type of its NTB (EADDRINUSE
// while another device fills it), withdrawals (with EBUSY on demand), an
// upcall queue and the replies to it, DMA layouts, and the lender's BAR windows and interrupt relays
// (each call journaled; failures on demand by errno).
class FakeKernelPort final : public KernelPort {
public:
	bool available() override { return loaded; }
	std::string unavailable_reason() const override { return loaded ? "" : "opening /dev/farpass: ENOENT"; }
	void announce(const RemoteDevice &device) override
	{
		if (!loaded)
			throw AgentError(ErrorCode::system_error, ENODEV, "/dev/farpass is gone");
		if (fail_announce)
			throw AgentError(ErrorCode::system_error, fail_announce, "ANNOUNCE_DEVICE failed");
		if (announced.count(device.id))
			throw AgentError(ErrorCode::system_error, EEXIST, "ANNOUNCE_DEVICE: EEXIST");
		for (const auto &[id, other] : announced)
			if (other.ntb == device.ntb && other.irq_slot == device.irq_slot)
				throw AgentError(ErrorCode::system_error, EADDRINUSE,
						 "ANNOUNCE_DEVICE: EADDRINUSE: slot " + std::to_string(device.irq_slot) + " holds id " +
							 std::to_string(id));
		announced[device.id] = device;
		announce_calls++;
	}
	void withdraw(std::uint32_t id) override
	{
		if (busy.count(id))
			throw AgentError(ErrorCode::system_error, EBUSY, "WITHDRAW_DEVICE: EBUSY");
		if (!announced.erase(id))
			throw AgentError(ErrorCode::system_error, ENOENT, "WITHDRAW_DEVICE: ENOENT");
		withdrawn.push_back(id);
	}
	bool revoke(std::uint32_t device_id) override
	{
		note("revoke " + std::to_string(device_id));
		if (!announced.count(device_id))
			throw AgentError(ErrorCode::system_error, ENOENT, "REVOKE_DEVICE: ENOENT");
		if (!instances.count(device_id))
			throw AgentError(ErrorCode::system_error, ENODATA, "REVOKE_DEVICE: ENODATA");
		revoked.push_back(device_id);
		return true;
	}
	std::vector<DmaSlot> dma_layout(std::uint32_t device_id) override
	{
		note("dma_layout " + std::to_string(device_id));
		if (fail_dma_layout)
			throw AgentError(ErrorCode::system_error, fail_dma_layout, "DMA_LAYOUT failed");
		return layouts[device_id];
	}
	void bar_map(const std::string &ntb, const std::string &pci, unsigned bar, std::uint64_t win_offset,
		     std::uint64_t size, bool unmap) override
	{
		note(std::string(unmap ? "bar_unmap " : "bar_map ") + ntb + " " + pci + " " + std::to_string(bar) + " " +
		     hex(win_offset) + " +" + hex(size));
		if (const auto failure = fail_bar_map.find(bar); failure != fail_bar_map.end() && !unmap)
			throw AgentError(ErrorCode::system_error, failure->second, "BAR_MAP failed");
		const auto key = std::make_tuple(ntb, pci, bar);
		if (unmap) {
			if (!bars.erase(key))
				throw AgentError(ErrorCode::system_error, ENOENT, "BAR_MAP: ENOENT");
		} else if (!bars.emplace(key, std::make_pair(win_offset, size)).second) {
			throw AgentError(ErrorCode::system_error, EEXIST, "BAR_MAP: EEXIST");
		}
	}
	void irq_bridge(const std::string &ntb, std::uint32_t slot, std::uint32_t start, std::span<const int> fds) override
	{
		note("irq_bridge " + ntb + " " + std::to_string(slot) + " " + std::to_string(start) + " " +
		     (fds.empty() ? "clear" : std::to_string(fds.size())));
		if (fail_irq_bridge)
			throw AgentError(ErrorCode::system_error, fail_irq_bridge, "IRQ_BRIDGE failed");
		for (const int fd : fds)
			if (!is_eventfd(fd))
				throw AgentError(ErrorCode::system_error, EBADF, "IRQ_BRIDGE: EBADF");
		if (fds.empty()) {
			relays.erase({ntb, slot});
			unmasks.erase({ntb, slot});
		} else {
			relays[{ntb, slot}] = fds.size();
		}
	}
	void irq_bridge_unmask(const std::string &ntb, std::uint32_t slot, int fd) override
	{
		note("irq_bridge_unmask " + ntb + " " + std::to_string(slot));
		if (fail_irq_bridge_unmask)
			throw AgentError(ErrorCode::system_error, fail_irq_bridge_unmask, "IRQ_BRIDGE F_UNMASK failed");
		if (!is_eventfd(fd))
			throw AgentError(ErrorCode::system_error, EBADF, "IRQ_BRIDGE: EBADF");
		unmasks.insert({ntb, slot});
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
	std::optional<std::uint64_t> link_down_ms(const std::string &ntb) override
	{
		const auto link = links_down_ms.find(ntb);
		return link == links_down_ms.end() ? std::optional<std::uint64_t>{0} : link->second;
	}

	bool loaded = true;
	int fail_announce = 0;
	int announce_calls = 0;
	std::map<std::uint32_t, RemoteDevice> announced;
	std::vector<std::uint32_t> withdrawn;
	std::set<std::uint32_t> busy;
	std::set<std::uint32_t> instances; // ids with an instance (REVOKE_DEVICE finds one)
	std::vector<std::uint32_t> revoked;
	std::vector<Upcall> upcalls;
	std::map<std::uint64_t, UpcallReply> replies;
	std::vector<std::byte> window = std::vector<std::byte>(1 << 20);
	std::map<std::uint32_t, std::vector<DmaSlot>> layouts;
	int fail_dma_layout = 0;
	std::map<std::tuple<std::string, std::string, unsigned>, std::pair<std::uint64_t, std::uint64_t>> bars;
	std::map<unsigned, int> fail_bar_map; // bar -> errno of its map
	std::map<std::pair<std::string, std::uint32_t>, std::size_t> relays; // (ntb, slot) -> vectors
	int fail_irq_bridge = 0;
	std::set<std::pair<std::string, std::uint32_t>> unmasks; // (ntb, slot) with an INTx unmask eventfd
	int fail_irq_bridge_unmask = 0;
	std::map<std::string, std::optional<std::uint64_t>> links_down_ms; // absent: up (0)
	Journal *journal = nullptr;

private:
	void note(const std::string &what)
	{
		if (journal)
			journal->push_back("kernel " + what);
	}
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
inline constexpr const char *lender_ntb = "0000:00:0b.0"; // the lender's NTB towards borrower-b

// A whole agent core on fakes: host "lender-a" with an NVMe (bound to nvme) and a NIC (unbound).
struct AgentFixture {
	explicit AgentFixture(std::int64_t lease_ms = 10'000, std::string host = "lender-a")
		: tree(dir.path() / "root"), sysfs(dir.path() / "root"),
		  store((fs::create_directories(dir.path() / "state"), dir.path() / "state"))
	{
		vfio.journal = &journal;
		kernel.journal = &journal;
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
		fd_store.restart();
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
	FakeFdStore fd_store;
	FakeKernelPort kernel;
	FakeClock clock;
	Journal journal;
	// The lender's NTB towards each borrower (its peers' "ntb"); borrower-c has none configured.
	std::map<std::string, std::string> links = {{"borrower-b", lender_ntb}};
	std::unique_ptr<Lender> lender;
	std::unique_ptr<AgentContext> context;
	std::unique_ptr<Dispatcher> dispatcher;

private:
	void make_agent(std::int64_t lease_ms, std::string host)
	{
		lender = std::make_unique<Lender>(sysfs, vfio, kernel, clock, store, fd_store, lease_ms, BarWindow{}, links);
		context = std::make_unique<AgentContext>(AgentContext{std::move(host), *lender, clock.now, {}, {}});
		dispatcher = std::make_unique<Dispatcher>(method_table(*context));
	}
};

} // namespace farpass::agent::testing
