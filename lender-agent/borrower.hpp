// The borrower's side: remote devices announced to this host's kernel, upcalls served by talking to
// their lenders, and the leases this host holds, renewed by heartbeat.
//
// Rules (docs/agent-protocol.md, "Borrowing"):
// - Every configured peer with an "ntb" is asked for its devices (device.list) every poll_ms; each
//   device is announced to the kernel in its lender's slot (irq_slot), whose mdev type it fills: type
//   names are the lender's and the slot's, the same on every borrower (libvirt XML, cold migration).
//   Upcalls name it by one id per (lender, PCI address), derived from the pair and kept in
//   <state_dir>/borrower.json so it never changes on this host.
// - A device its lender no longer lists is withdrawn (retried while an instance holds it), before any
//   announce (the lender may have lent another device at its slot); an unreachable lender changes
//   nothing (its devices stay announced until it answers again).
// - Upcalls: borrow -> lease.acquire, then (if the lease has a data path) this host's DMA layout of the
//   borrow and dma.map of each slot (a failure releases the lease: no borrow); give_back ->
//   lease.release (the lender tears the data path down); set_irqs -> irq.set;
//   config_read/config_write/reset -> device.*; the reply carries 0 or a negative errno. Held leases
//   are renewed every lease_ms / 3.
// - Each upcall is answered within its timeout_ms: every call to the lender gets only the time left,
//   and a borrow that could not finish in time is undone (its lease released).
// - A lease ends only when the lender confirms it (lease.release answered, or the lease unknown there):
//   an unconfirmed release is answered EINPROGRESS (the kernel keeps the DMA window range
//   quarantined) and retried in the background, persisted, until the lender confirms.
// - A held lease the kernel has no borrow for (DMA_LAYOUT: ENODATA) is released: checked every tick,
//   so at once after a restart.
// - Devices are announced with the lender's BAR window offsets and irq slot (device.list); a device
//   lent again with another view is withdrawn and announced again with the new one.
// - One lender's trouble is its own: everything that calls a lender (polling it, renewing and releasing
//   its leases, the upcalls for its devices) runs on that lender's worker thread, once start_workers()
//   started them, so a lender that is dead or never answers delays no other lender's upcalls or renewals.
//
// Threads, once the workers run: serve_upcalls() and tick() are called by one thread (the daemon's
// borrower loop), which reads the kernel's upcalls and queues each on the worker of its device's lender;
// each LenderPart is touched by its worker only. What the workers share is behind ids_lock_ (ids_),
// save_lock_ (saved_ and writing borrower.json) and view_lock_ (views_); the KernelPort locks itself.
#pragma once

#include "clock.hpp"
#include "kernel_port.hpp"
#include "log.hpp"
#include "methods.hpp"
#include "state_store.hpp"

#include "worker.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace farpass::agent {

// The id of (lender, PCI address) on every host: FNV-1a of "lender/pci" in 31 bits. On the rare
// collision with another device already on this host, the next free id is taken (and persisted).
std::uint32_t stable_device_id(const std::string &lender_host, const std::string &pci_address);

struct BorrowedLease {
	std::string id;
	std::int64_t lease_ms = 0;
	std::int64_t renew_at_ms = 0;	     // the next renewal or, while releasing, the next try of the release
	bool releasing = false;		     // returned; never renewed, released until the lender confirms
	std::int64_t release_backoff_ms = 0; // the wait before the next try while releasing
};

// Calls a method on a lender within timeout_ms (the peer sessions bound it by call_timeout_ms too);
// throws AgentError like PeerCaller. Called by every lender's worker at once, each for its own lender
// (PeerSessions is safe so).
using LenderCaller = std::function<nlohmann::json(const PeerAddress &peer, std::string_view method,
						  const nlohmann::json &params, int timeout_ms)>;

struct AnnouncedDevice {
	RemoteDevice device;
	bool announced = false;	      // the kernel has it in its slot
	bool withdrawing = false;     // its lender stopped lending it; withdraw until the kernel agrees
	std::optional<BorrowedLease> lease;
	std::string last_error = {}; // of the last announce/withdraw attempt, logged once (not persisted)
};

class Borrower {
public:
	Borrower(KernelPort &kernel, const Clock &clock, const StateStore &store, std::vector<PeerAddress> peers,
		 LenderCaller call_peer, LogSink log, std::int64_t poll_ms);
	// Stops the workers first (their jobs use everything else): each ends the job it runs at its next
	// call to a lender, so stopping waits for one call at most (call_timeout_ms).
	~Borrower();

	// Reads borrower.json (ids, announced devices, held leases). Throws on a corrupt file.
	void restore();
	// From now on each lender's work runs on a worker of its own (the daemon, after restore()); until
	// then, and in unit tests that never call it, on the caller's thread, done when the call returns.
	void start_workers();
	// Called every tick of the daemon: refreshes the lenders' lists when due and renews due leases.
	void tick();
	// Asks every lender now.
	void refresh();
	// Takes every queued upcall and serves it (on its lender's worker, once they run).
	void serve_upcalls();

	// key "lender/pci". A copy of every lender's devices, for tests: only while no worker runs.
	std::map<std::string, AnnouncedDevice> devices() const;
	// The devices as cluster.status shows them. Safe from any thread: the copy each lender's part
	// published at the end of restore() and of each of its jobs.
	nlohmann::json view() const;

	// Upcalls queued on one lender's worker beyond this are answered EAGAIN at once.
	static constexpr std::size_t max_queued = 64;

private:
	// One lender (a configured peer, or one only borrower.json still names) and its devices.
	struct LenderPart {
		std::string host;
		const PeerAddress *peer = nullptr; // nullptr: no longer configured (calls to it fail)
		std::map<std::string, AnnouncedDevice> devices; // key "lender/pci"
		std::int64_t next_poll_ms = 0;
		// Until the port is seen available, everything restored must be announced again (idempotently).
		bool kernel_was_available = false;
		std::optional<std::int64_t> deadline_ms; // while serving an upcall: when its time is up
		bool unsaved = false;			 // a release changed the state: saved by save_changes()
		std::atomic<bool> tick_queued = false;	 // a tick waits in the worker's queue: tick() adds none
		std::unique_ptr<Worker> worker;		 // none until start_workers()
	};

	LenderPart &part_of(const std::string &host);
	// Runs job for part: on its worker if it has one (false when its queue is full), else here. A job's
	// failure is logged.
	bool run(LenderPart &part, std::function<void()> job);
	void tick(LenderPart &part);
	void refresh(LenderPart &part);
	void refresh_peer(LenderPart &part);
	void withdraw(AnnouncedDevice &entry, const std::string &why);
	static std::string describe(const AnnouncedDevice &d);
	void withdraw_from_kernel(const AnnouncedDevice &d);
	void announce_to_kernel(AnnouncedDevice &d);
	void reconcile(LenderPart &part);
	void renew_due(LenderPart &part);
	std::string revoke(const AnnouncedDevice &entry);
	void check_borrows(LenderPart &part);
	// Answers one upcall received at received_ms (nullptr part: of no known lender) within its timeout_ms.
	void answer(LenderPart *part, const Upcall &upcall, std::int64_t received_ms);
	UpcallReply handle(LenderPart &part, const Upcall &upcall, std::int64_t received_ms);
	UpcallReply serve(LenderPart &part, const Upcall &upcall);
	void borrow(LenderPart &part, AnnouncedDevice &device);
	std::string map_dma(LenderPart &part, const AnnouncedDevice &device, bool data_path);
	std::string map_lender_peers(LenderPart &part, const AnnouncedDevice &device, const std::vector<DmaSlot> &slots);
	void release(LenderPart &part, AnnouncedDevice &device);
	static const BorrowedLease *held(const AnnouncedDevice &device);
	static AnnouncedDevice *by_id(LenderPart &part, std::uint32_t id);
	LenderPart *lender_of(std::uint32_t id);
	nlohmann::json call_lender(LenderPart &part, std::string_view method, const nlohmann::json &params);
	std::uint32_t id_of(const std::string &lender_host, const std::string &pci_address);
	void save_changes(LenderPart &part);
	void persist(const LenderPart &part);
	void publish_view(const LenderPart &part);

	KernelPort &kernel_;
	const Clock &clock_;
	const StateStore &store_;
	const std::vector<PeerAddress> peers_;
	LenderCaller call_peer_;
	LogSink log_;
	std::int64_t poll_ms_;
	std::atomic<std::uint64_t> upcalls_served_ = 0;
	std::atomic<bool> stopping_ = false; // ~Borrower: no more calls to lenders
	std::map<std::string, LenderPart> lenders_; // by host; its keys fixed once restore() is done

	std::mutex ids_lock_;			    // protects ids_
	std::map<std::string, std::uint32_t> ids_; // every id ever given on this host, kept stable
	std::mutex save_lock_;			    // protects saved_ and the writing of borrower.json (taken before ids_lock_)
	std::map<std::string, nlohmann::json> saved_; // each lender's devices as last persisted, by host
	mutable std::mutex view_lock_;		      // protects views_
	std::map<std::string, nlohmann::json> views_; // each lender's devices as view() shows them, by host
};

} // namespace farpass::agent
