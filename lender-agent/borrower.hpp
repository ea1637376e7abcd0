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
#pragma once

#include "clock.hpp"
#include "kernel_port.hpp"
#include "log.hpp"
#include "methods.hpp"
#include "state_store.hpp"

#include <cstdint>
#include <functional>
#include <map>
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
// throws AgentError like PeerCaller.
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

	// Reads borrower.json (ids, announced devices, held leases). Throws on a corrupt file.
	void restore();
	// Called every tick of the daemon: refreshes the lenders' lists when due and renews due leases.
	void tick();
	// Asks every lender now.
	void refresh();
	// Serves every queued upcall.
	void serve_upcalls();
	// Answers one upcall within its timeout_ms.
	UpcallReply handle(const Upcall &upcall);

	const std::map<std::string, AnnouncedDevice> &devices() const { return devices_; } // key "lender/pci"
	// The devices as cluster.status shows them. Safe from any thread: the daemon runs the borrower role
	// in a thread of its own, and this is the copy published at the end of restore(), tick() and
	// serve_upcalls(), its only entry points.
	nlohmann::json view() const;

private:
	UpcallReply serve(const Upcall &upcall);
	void refresh_peer(const PeerAddress &peer);
	void withdraw(AnnouncedDevice &entry, const std::string &why);
	static std::string describe(const AnnouncedDevice &d);
	void withdraw_from_kernel(const AnnouncedDevice &d);
	void announce_to_kernel(AnnouncedDevice &d);
	void reconcile();
	void renew_due();
	std::string revoke(const AnnouncedDevice &entry);
	void check_borrows();
	void borrow(AnnouncedDevice &device);
	std::string map_dma(const AnnouncedDevice &device, bool data_path);
	void release(AnnouncedDevice &device);
	static const BorrowedLease *held(const AnnouncedDevice &device);
	AnnouncedDevice *by_id(std::uint32_t id);
	const PeerAddress &lender_of(const AnnouncedDevice &device) const;
	nlohmann::json call_lender(const AnnouncedDevice &device, std::string_view method, nlohmann::json params);
	std::uint32_t allocate_id(const std::string &lender_host, const std::string &pci_address) const;
	void save_changes();
	void persist() const;
	void publish_view();

	KernelPort &kernel_;
	const Clock &clock_;
	const StateStore &store_;
	std::vector<PeerAddress> peers_;
	LenderCaller call_peer_;
	LogSink log_;
	std::int64_t poll_ms_;
	std::int64_t next_poll_ms_ = 0;
	bool kernel_was_available_ = true;
	std::uint64_t upcalls_served_ = 0;
	std::optional<std::int64_t> deadline_ms_; // while serving an upcall: when its time is up
	bool unsaved_ = false;			  // a release changed the state: saved by save_changes()
	std::map<std::string, AnnouncedDevice> devices_;
	std::map<std::string, std::uint32_t> ids_; // every id ever given on this host, kept stable
	mutable std::mutex view_lock_;		    // protects view_
	nlohmann::json view_ = nlohmann::json::array();
};

} // namespace farpass::agent
