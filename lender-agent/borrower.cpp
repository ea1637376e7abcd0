#include "borrower.hpp"

#include "errors.hpp"
#include "pci_address.hpp"

#include <cerrno>
#include <limits>
#include <set>
#include <utility>

namespace farpass::agent {

namespace {

using nlohmann::json;

constexpr int state_version = 1;
constexpr std::int64_t retry_ms = 1000; // a renew that could not reach the lender is retried this soon
// An unconfirmed release is tried again after 1 s, doubling up to this (the lender's lease, no longer
// renewed, expires meanwhile: the next try then learns it is over).
constexpr std::int64_t max_release_retry_ms = 8000;

std::string key_of(const std::string &lender_host, const std::string &pci_address)
{
	return lender_host + "/" + pci_address;
}

// The BAR arrays of a device view: numbers decoded over T's range, bar_mapped's booleans as booleans.
template <typename T> std::array<T, bar_count> bar_array(const json &values, std::string_view name)
{
	std::array<T, bar_count> result{};
	for (std::size_t i = 0; i < bar_count && i < values.size(); i++) {
		if constexpr (std::is_same_v<T, bool>)
			result[i] = values[i].get<bool>();
		else
			result[i] = decode_uint<T>(values[i], name);
	}
	return result;
}

// The PCI identity and placement fields a lender's device view and borrower.json share.
void decode_identity(const json &view, RemoteDevice &d)
{
	d.vendor = decode_uint<std::uint16_t>(view.at("vendor"), "vendor");
	d.device = decode_uint<std::uint16_t>(view.at("device"), "device");
	d.subsystem_vendor = decode_uint<std::uint16_t>(view.value("subsystem_vendor", json(0)), "subsystem_vendor");
	d.subsystem_device = decode_uint<std::uint16_t>(view.value("subsystem_device", json(0)), "subsystem_device");
	d.class_code = decode_uint<std::uint32_t>(view.value("class", json(0)), "class", 0, 0xff'ffff);
	d.revision = decode_uint<std::uint8_t>(view.value("revision", json(0)), "revision");
	d.bar_sizes = bar_array<std::uint64_t>(view.at("bar_sizes"), "bar_sizes");
	d.bar_flags = bar_array<std::uint32_t>(view.value("bar_flags", json::array()), "bar_flags");
	// A lender before uapi 2 places nothing: no BAR is mapped, slot 0.
	d.bar_offsets = bar_array<std::uint64_t>(view.value("bar_offsets", json::array()), "bar_offsets");
	d.irq_slot = decode_uint<std::uint32_t>(view.value("irq_slot", json(0)), "irq_slot", 0, irq_slots - 1);
}

json device_json(const AnnouncedDevice &entry)
{
	const RemoteDevice &d = entry.device;
	json state = {{"lender", d.lender_host},
		      {"pci", d.pci_address},
		      {"ntb", d.ntb},
		      {"id", d.id},
		      {"vendor", d.vendor},
		      {"device", d.device},
		      {"subsystem_vendor", d.subsystem_vendor},
		      {"subsystem_device", d.subsystem_device},
		      {"class", d.class_code},
		      {"revision", d.revision},
		      {"bar_sizes", d.bar_sizes},
		      {"bar_flags", d.bar_flags},
		      {"bar_offsets", d.bar_offsets},
		      {"irq_slot", d.irq_slot},
		      {"announced", entry.announced},
		      {"withdrawing", entry.withdrawing},
		      {"lease", nullptr}};
	if (entry.lease)
		state["lease"] = {{"id", entry.lease->id},
				  {"lease_ms", entry.lease->lease_ms},
				  {"releasing", entry.lease->releasing}};
	return state;
}

// A lender's device view (docs/agent-protocol.md, "Devices") as the kernel wants it.
RemoteDevice remote_device(const json &view, const PeerAddress &peer, std::uint32_t id)
{
	RemoteDevice d;
	d.id = id;
	d.lender_host = peer.host;
	d.pci_address = canonical_pci_address(view.at("pci").get<std::string>());
	d.ntb = peer.ntb;
	decode_identity(view, d);
	const auto mapped = bar_array<bool>(view.value("bar_mapped", json::array()), "bar_mapped");
	for (std::size_t bar = 0; bar < bar_count; bar++)
		d.bar_flags[bar] = (d.bar_flags[bar] & ~bar_mapped) | (mapped[bar] ? bar_mapped : 0);
	return d;
}

} // namespace

std::uint32_t stable_device_id(const std::string &lender_host, const std::string &pci_address)
{
	std::uint32_t hash = 2166136261u; // FNV-1a
	for (const unsigned char c : key_of(lender_host, pci_address)) {
		hash ^= c;
		hash *= 16777619u;
	}
	return hash & 0x7fffffffu;
}

Borrower::Borrower(KernelPort &kernel, const Clock &clock, const StateStore &store, std::vector<PeerAddress> peers,
		   LenderCaller call_peer, LogSink log, std::int64_t poll_ms)
	: kernel_(kernel), clock_(clock), store_(store), peers_(std::move(peers)), call_peer_(std::move(call_peer)),
	  log_(std::move(log)), poll_ms_(poll_ms)
{
	for (const PeerAddress &peer : peers_)
		part_of(peer.host).peer = &peer;
}

Borrower::~Borrower()
{
	stopping_ = true;
	for (auto &[host, part] : lenders_)
		part.worker.reset();
}

Borrower::LenderPart &Borrower::part_of(const std::string &host)
{
	LenderPart &part = lenders_[host];
	part.host = host;
	return part;
}

void Borrower::restore()
{
	const auto state = store_.load(state_version);
	if (!state)
		return;
	try {
		for (const auto &[key, id] : state->at("ids").items())
			ids_[key] = decode_uint<std::uint32_t>(id, "id", 0, 0x7fff'ffff);
		const std::int64_t now = clock_.monotonic_ms();
		for (const json &saved : state->at("devices")) {
			AnnouncedDevice entry;
			RemoteDevice &d = entry.device;
			d.lender_host = saved.at("lender");
			d.pci_address = saved.at("pci");
			d.ntb = saved.at("ntb");
			d.id = decode_uint<std::uint32_t>(saved.at("id"), "id", 0, 0x7fff'ffff);
			decode_identity(saved, d);
			entry.announced = saved.at("announced");
			entry.withdrawing = saved.at("withdrawing");
			// Renewed (or its release tried again) at once: the restart may have taken a while.
			if (!saved.at("lease").is_null())
				entry.lease = BorrowedLease{saved["lease"].at("id"),
							    decode_uint<std::int64_t>(saved["lease"].at("lease_ms"), "lease_ms",
										      min_lease_ms, max_lease_ms),
							    now, saved["lease"].value("releasing", false)};
			saved_[d.lender_host].push_back(saved);
			part_of(d.lender_host).devices.emplace(key_of(d.lender_host, d.pci_address), std::move(entry));
		}
	} catch (const std::exception &e) { // only decoding happens above: a field missing, mistyped or out of range
		throw AgentError(ErrorCode::internal_error, std::string("malformed borrower state file: ") + e.what());
	}
	for (const auto &[host, part] : lenders_)
		publish_view(part);
}

void Borrower::start_workers()
{
	for (auto &[host, part] : lenders_)
		part.worker = std::make_unique<Worker>(max_queued);
}

bool Borrower::run(LenderPart &part, std::function<void()> job)
{
	auto guarded = [this, job = std::move(job)] {
		try {
			job();
		} catch (const std::exception &e) {
			log_(LogLevel::error, std::string("borrower: ") + e.what());
		}
	};
	if (!part.worker) {
		guarded();
		return true;
	}
	return part.worker->post(std::move(guarded));
}

void Borrower::tick()
{
	for (auto &entry : lenders_) { // not a structured binding: clang 14 cannot capture one
		LenderPart &part = entry.second;
		// One tick at most waits in a worker's queue: a lender that holds its worker up is not also
		// sent a backlog of ticks.
		if (part.tick_queued.exchange(true))
			continue;
		if (!run(part, [this, &part] {
			    part.tick_queued = false;
			    tick(part);
		    }))
			part.tick_queued = false;
	}
}

void Borrower::tick(LenderPart &part)
{
	const std::int64_t now = clock_.monotonic_ms();
	if (now >= part.next_poll_ms) {
		part.next_poll_ms = now + poll_ms_;
		refresh(part);
	} else {
		reconcile(part);
	}
	check_borrows(part);
	renew_due(part);
	save_changes(part);
	publish_view(part);
}

void Borrower::refresh()
{
	for (auto &entry : lenders_) {
		LenderPart &part = entry.second;
		run(part, [this, &part] { refresh(part); });
	}
}

void Borrower::refresh(LenderPart &part)
{
	if (part.peer && !part.peer->ntb.empty()) {
		try {
			refresh_peer(part);
		} catch (const std::exception &e) {
			// Its devices stay announced: a lender that is briefly unreachable is not a withdrawal.
			log_(LogLevel::warning, "borrower: cannot list " + part.host + "'s devices: " + e.what());
		}
	}
	reconcile(part);
}

void Borrower::refresh_peer(LenderPart &part)
{
	const PeerAddress &peer = *part.peer;
	const json reply = call_lender(part, "device.list", json::object());
	std::set<std::string> listed;
	bool changed = false;
	for (const json &view : reply.at("devices")) {
		if (view.value("host", peer.host) != peer.host)
			log_(LogLevel::warning, "borrower: peer " + peer.host + " calls itself " +
							view.value("host", "") + "; its devices are announced as " + peer.host +
							"'s");
		const std::string address = canonical_pci_address(view.at("pci").get<std::string>());
		const std::string key = key_of(peer.host, address);
		listed.insert(key);
		const std::uint32_t id = id_of(peer.host, address);
		const RemoteDevice device = remote_device(view, peer, id);
		if (const auto known = part.devices.find(key); known != part.devices.end()) {
			// Being withdrawn: announced again once that is done. Lent again with another view (slot,
			// BARs, interrupt slot): the kernel's is stale, so withdrawn and announced again.
			if (!known->second.withdrawing && !(known->second.device == device)) {
				withdraw(known->second, "lends " + address + " with another view");
				changed = true;
			}
			continue;
		}
		AnnouncedDevice entry;
		entry.device = device;
		part.devices.emplace(key, std::move(entry));
		log_(LogLevel::info, "borrower: " + peer.host + " lends " + address + " (id " + std::to_string(id) + ")");
		changed = true;
	}
	for (auto &[key, entry] : part.devices) {
		if (entry.withdrawing || listed.count(key))
			continue;
		withdraw(entry, "no longer lends " + entry.device.pci_address);
		changed = true;
	}
	if (changed)
		persist(part);
}

void Borrower::withdraw(AnnouncedDevice &entry, const std::string &why)
{
	log_(LogLevel::info, "borrower: " + entry.device.lender_host + " " + why + "; withdrawing id " +
				     std::to_string(entry.device.id));
	entry.withdrawing = true;
	entry.lease.reset(); // the lender ended it when it unlent the device
}

void Borrower::reconcile(LenderPart &part)
{
	if (part.devices.empty())
		return;
	if (!kernel_.available()) {
		if (part.kernel_was_available)
			log_(LogLevel::warning, "borrower: /dev/farpass unavailable: " + kernel_.unavailable_reason());
		part.kernel_was_available = false;
		return;
	}
	if (!part.kernel_was_available) {
		// A new file (agent or module restart): announce everything again; EEXIST means it survived.
		for (auto &[key, entry] : part.devices)
			if (!entry.withdrawing)
				entry.announced = false;
		part.kernel_was_available = true;
	}
	// Withdrawals first: a slot a withdrawn device leaves may be what a device announced below is
	// lent at (the lender reuses slots).
	bool changed = false;
	for (const bool withdrawals : {true, false})
		for (auto entry = part.devices.begin(); entry != part.devices.end();) {
			AnnouncedDevice &d = entry->second;
			if (d.withdrawing != withdrawals) {
				++entry;
				continue;
			}
			try {
				if (d.withdrawing) {
					if (d.announced)
						withdraw_from_kernel(d);
					entry = part.devices.erase(entry);
					changed = true;
					continue;
				}
				if (!d.announced) {
					announce_to_kernel(d);
					changed = true;
				}
			} catch (const AgentError &e) {
				if (d.last_error != e.what())
					log_(LogLevel::warning, std::string("borrower: ") + e.what());
				d.last_error = e.what();
			}
			++entry;
		}
	if (changed)
		persist(part);
}

std::string Borrower::describe(const AnnouncedDevice &d)
{
	return d.device.lender_host + " " + d.device.pci_address + " (id " + std::to_string(d.device.id) + ", slot " +
	       std::to_string(d.device.irq_slot) + ")";
}

// Throws but for ENOENT (the kernel no longer has it: a module reload, or the NTB gone).
void Borrower::withdraw_from_kernel(const AnnouncedDevice &d)
{
	try {
		kernel_.withdraw(d.device.id);
		log_(LogLevel::info, "borrower: withdrew " + describe(d) + "; its mdev type is empty");
	} catch (const AgentError &e) {
		if (e.error_number() != ENOENT)
			throw;
	}
}

void Borrower::announce_to_kernel(AnnouncedDevice &d)
{
	try {
		kernel_.announce(d.device);
		log_(LogLevel::info, "borrower: announced " + describe(d) + " on NTB " + d.device.ntb);
	} catch (const AgentError &e) {
		if (e.error_number() != EEXIST) // ours, from before a restart
			throw;
	}
	d.announced = true;
	d.last_error.clear();
}

void Borrower::renew_due(LenderPart &part)
{
	const std::int64_t now = clock_.monotonic_ms();
	for (auto &[key, entry] : part.devices) {
		if (!entry.lease || now < entry.lease->renew_at_ms)
			continue;
		if (entry.lease->releasing) {
			try {
				release(part, entry);
			} catch (const AgentError &) { // logged; tried again later
			}
			continue;
		}
		try {
			const json reply = call_lender(part, "lease.renew",
						       {{"pci", entry.device.pci_address}, {"lease", entry.lease->id}});
			entry.lease->renew_at_ms = now + entry.lease->lease_ms / 3;
		} catch (const AgentError &e) {
			if (e.code() == ErrorCode::no_such_lease || e.code() == ErrorCode::no_such_device) {
				log_(LogLevel::warning, "borrower: lease on " + key + " is lost: " + e.what() + "; " + revoke(entry));
				entry.lease.reset();
				persist(part);
			} else {
				log_(LogLevel::warning, "borrower: renewing the lease on " + key + ": " + e.what());
				entry.lease->renew_at_ms = now + retry_ms;
			}
		}
	}
}

// The lender ended the lease (its link was down for a lease time, or it restarted without it): the guest
// must not go on with a device reset behind its back, so its instance is unplugged. Says what happened.
std::string Borrower::revoke(const AnnouncedDevice &entry)
{
	if (!kernel_.available())
		return "no kernel to revoke the instance in";
	try {
		return kernel_.revoke(entry.device.id) ? "its instance revoked: the VFIO user is asked to release it"
						       : "its instance revoked; its VFIO user cannot be asked to release it";
	} catch (const AgentError &e) {
		return e.error_number() == ENODATA ? "no instance to revoke" : std::string("not revoked: ") + e.what();
	}
}

void Borrower::check_borrows(LenderPart &part)
{
	if (!kernel_.available())
		return;
	for (auto &[key, entry] : part.devices) {
		if (!held(entry))
			continue;
		try {
			kernel_.dma_layout(entry.device.id);
		} catch (const AgentError &e) {
			if (e.error_number() != ENODATA) // ENOTTY, EOPNOTSUPP: a kernel that cannot tell
				continue;
			log_(LogLevel::warning, "borrower: " + key + " is leased but not borrowed here (" + e.what() +
							"); releasing the lease");
			try {
				release(part, entry);
			} catch (const AgentError &) { // logged; tried again later
			}
		}
	}
}

void Borrower::serve_upcalls()
{
	try {
		while (const auto upcall = kernel_.next_upcall()) {
			// Its deadline runs from now, however long it waits for its lender's worker.
			const std::int64_t received_ms = clock_.monotonic_ms();
			LenderPart *part = lender_of(upcall->device_id);
			if (!part) {
				answer(nullptr, *upcall, received_ms);
				continue;
			}
			if (!run(*part, [this, part, request = *upcall, received_ms] { answer(part, request, received_ms); })) {
				// Its lender has held its worker up for a long while: EAGAIN (unlike ETIMEDOUT, the
				// kernel does not take the agent for dead), now rather than after the deadline.
				log_(LogLevel::warning, "borrower: upcall " + std::to_string(upcall->op) + " on id " +
								std::to_string(upcall->device_id) + ": " +
								std::to_string(max_queued) + " upcalls already wait for " +
								part->host);
				UpcallReply busy;
				busy.error = -EAGAIN;
				kernel_.complete(upcall->seq, busy);
			}
		}
	} catch (const AgentError &e) {
		log_(LogLevel::warning, std::string("borrower: upcall: ") + e.what());
	}
}

void Borrower::answer(LenderPart *part, const Upcall &upcall, std::int64_t received_ms)
{
	UpcallReply reply;
	reply.error = -ENODEV;
	if (part)
		reply = handle(*part, upcall, received_ms);
	bool answered = true;
	try {
		kernel_.complete(upcall.seq, reply);
	} catch (const AgentError &e) {
		log_(LogLevel::warning, std::string("borrower: upcall: ") + e.what());
		answered = false;
	}
	// The first few upcalls and every slow one (time from its receipt to its answer, against the
	// kernel's deadline) are logged.
	const std::int64_t took = clock_.monotonic_ms() - received_ms;
	if (part) {
		save_changes(*part);
		publish_view(*part);
	}
	if (!answered)
		return;
	if (const std::uint64_t served = ++upcalls_served_; served <= 5 || took >= 100)
		log_(LogLevel::info, "borrower: upcall " + std::to_string(upcall.op) + " on id " +
					     std::to_string(upcall.device_id) + " answered (" + std::to_string(reply.error) +
					     ") in " + std::to_string(took) + " ms (#" + std::to_string(served) + ")");
}

UpcallReply Borrower::handle(LenderPart &part, const Upcall &upcall, std::int64_t received_ms)
{
	// Every call to the lender gets only what is left of the kernel's deadline, less a quarter (at most
	// 500 ms) kept for the agent's own work before the answer (logging, on a loaded host).
	const std::int64_t reserve_ms = std::min<std::int64_t>(upcall.timeout_ms / 4, 500);
	part.deadline_ms = received_ms + upcall.timeout_ms - reserve_ms;
	const UpcallReply reply = serve(part, upcall);
	part.deadline_ms.reset();
	return reply;
}

UpcallReply Borrower::serve(LenderPart &part, const Upcall &upcall)
{
	UpcallReply reply;
	AnnouncedDevice *device = by_id(part, upcall.device_id);
	if (!device || device->withdrawing) {
		reply.error = -ENODEV;
		return reply;
	}
	const std::string &pci = device->device.pci_address;
	try {
		const auto lease_id = [&]() -> std::string {
			if (!held(*device))
				throw AgentError(ErrorCode::no_such_lease, "id " + std::to_string(upcall.device_id) + " is not borrowed");
			return device->lease->id;
		};
		switch (static_cast<UpcallOp>(upcall.op)) {
		case UpcallOp::borrow:
			borrow(part, *device);
			break;
		case UpcallOp::give_back:
			// 0 only once the lender confirmed. Until then EINPROGRESS (the release goes on in the
			// background): farpass.ko keeps the DMA window range quarantined, as the lender may still
			// map it, and, unlike for ETIMEDOUT, does not take the instance for dead.
			if (device->lease) {
				try {
					release(part, *device);
				} catch (const AgentError &) { // logged
					reply.error = -EINPROGRESS;
				}
			}
			break;
		case UpcallOp::config_read: {
			// Before the borrow (the kernel's capability scan) without a lease: allowed on a free device.
			json params = {{"pci", pci}, {"offset", upcall.args[0]}, {"width", upcall.args[1]}};
			if (const BorrowedLease *lease = held(*device))
				params["lease"] = lease->id;
			reply.data[0] = decode_uint<std::uint32_t>(call_lender(part, "device.read_config", params).at("value"), "value");
			break;
		}
		case UpcallOp::config_write:
			call_lender(part, "device.write_config",
				    {{"pci", pci}, {"lease", lease_id()}, {"offset", upcall.args[0]},
				     {"width", upcall.args[1]}, {"value", upcall.args[2]}});
			break;
		case UpcallOp::reset:
			call_lender(part, "device.reset", {{"pci", pci}, {"lease", lease_id()}});
			break;
		case UpcallOp::set_irqs:
			call_lender(part, "irq.set",
				    {{"pci", pci}, {"lease", lease_id()}, {"index", upcall.args[1]}, {"count", upcall.args[2]}});
			break;
		default:
			reply.error = -EOPNOTSUPP;
			break;
		}
	} catch (const AgentError &e) {
		log_(LogLevel::warning, "borrower: upcall " + std::to_string(upcall.op) + " on id " +
						std::to_string(upcall.device_id) + ": " + e.what());
		reply.error = -(e.error_number() ? e.error_number() : EIO);
	} catch (const std::exception &e) {
		log_(LogLevel::warning, std::string("borrower: upcall: malformed reply: ") + e.what());
		reply.error = -EIO;
	}
	return reply;
}

void Borrower::borrow(LenderPart &part, AnnouncedDevice &device)
{
	const std::string &pci = device.device.pci_address;
	if (device.lease && device.lease->releasing)
		release(part, device); // the lender must have ended the old lease before a new one maps anything
	const json result = call_lender(part, "lease.acquire", {{"pci", pci}});
	const auto lease_ms = decode_uint<std::int64_t>(result.at("lease_ms"), "lease_ms", min_lease_ms, max_lease_ms);
	device.lease = BorrowedLease{result.at("lease"), lease_ms, clock_.monotonic_ms() + lease_ms / 3};
	persist(part);
	try {
		const std::string done = map_dma(part, device, result.value("data_path", false));
		if (clock_.monotonic_ms() >= *part.deadline_ms) // the kernel has failed the borrow meanwhile
			throw AgentError(ErrorCode::timed_out, ETIMEDOUT, "borrowed " + pci + " after the upcall's deadline");
		log_(LogLevel::info, "borrower: borrowed " + key_of(device.device.lender_host, pci) + done);
	} catch (const std::exception &) {
		try { // the lender unmaps what was mapped when the lease ends
			release(part, device);
		} catch (const AgentError &) { // logged; tried again in the background
		}
		throw;
	}
}

// The guest's RAM, as this host's kernel laid it out in the link's DMA window, mapped by the lender at
// IOVA = guest-physical address: all of it or no borrow. Returns what was done, for the log.
std::string Borrower::map_dma(LenderPart &part, const AnnouncedDevice &device, bool data_path)
{
	if (!data_path)
		return " without data path (the lender maps no BARs towards us)";
	std::vector<DmaSlot> slots;
	try {
		slots = kernel_.dma_layout(device.device.id);
	} catch (const AgentError &e) {
		if (e.error_number() != ENOTTY && e.error_number() != EOPNOTSUPP)
			throw;
		return std::string(" without DMA window: ") + e.what();
	}
	std::size_t mapped = 0;
	for (const DmaSlot &slot : slots)
		if (!slot.lender_peer) {
			call_lender(part, "dma.map",
				    {{"pci", device.device.pci_address}, {"lease", device.lease->id}, {"iova", slot.gpa},
				     {"size", slot.size}, {"window_offset", slot.offset}});
			mapped++;
		}
	return " (" + std::to_string(mapped) + " DMA slot(s) mapped" + map_lender_peers(part, device, slots) + ")";
}

// Peer-to-peer between devices of one lender (docs/mdev.md): a lender peer in a layout is another
// device of the same VFIO user on this link, listed while its instance is open; the lender maps a pair
// once both are borrowed, under both leases. So this borrow maps the device's DMA to the BARs of its
// borrowed lender peers, and theirs to its BARs (they borrowed first). Best effort: a pair not mapped
// leaves those addresses faulting in the lender's IOMMU, as without peer-to-peer.
std::string Borrower::map_lender_peers(LenderPart &part, const AnnouncedDevice &device, const std::vector<DmaSlot> &slots)
{
	std::size_t mapped = 0;
	const auto map_pair = [&](const AnnouncedDevice &from, const DmaSlot &slot, const AnnouncedDevice &to) {
		try {
			call_lender(part, "dma.map_peer",
				    {{"pci", from.device.pci_address}, {"lease", from.lease->id}, {"iova", slot.gpa},
				     {"size", slot.size}, {"peer_pci", to.device.pci_address}, {"peer_lease", to.lease->id},
				     {"bar", slot.peer_bar}});
			mapped++;
		} catch (const std::exception &e) {
			log_(LogLevel::warning, "borrower: peer-to-peer DMA of " + from.device.pci_address + " to BAR " +
							std::to_string(slot.peer_bar) + " of " + to.device.pci_address + ": " + e.what());
		}
	};
	const auto borrowed_with_id = [&](std::uint32_t id) -> const AnnouncedDevice * {
		for (const auto &[key, entry] : part.devices)
			if (entry.device.id == id && &entry != &device && held(entry))
				return &entry;
		return nullptr;
	};
	for (const DmaSlot &slot : slots)
		if (const AnnouncedDevice *peer = slot.lender_peer ? borrowed_with_id(slot.peer_id) : nullptr)
			map_pair(device, slot, *peer);
	for (const auto &[key, other] : part.devices) {
		if (&other == &device || !held(other))
			continue;
		std::vector<DmaSlot> theirs;
		try {
			theirs = kernel_.dma_layout(other.device.id);
		} catch (const AgentError &) { // not borrowing now: no window, nothing of it to map
			continue;
		}
		for (const DmaSlot &slot : theirs)
			if (slot.lender_peer && slot.peer_id == device.device.id)
				map_pair(other, slot, device);
	}
	return mapped ? ", " + std::to_string(mapped) + " peer BAR(s) on the lender" : "";
}

void Borrower::release(LenderPart &part, AnnouncedDevice &device)
{
	BorrowedLease &lease = *device.lease;
	const std::string key = key_of(device.device.lender_host, device.device.pci_address);
	try {
		call_lender(part, "lease.release", {{"pci", device.device.pci_address}, {"lease", lease.id}});
	} catch (const AgentError &e) {
		// Unknown there (expired, or the device unlent with it): over all the same.
		if (e.code() != ErrorCode::no_such_lease && e.code() != ErrorCode::no_such_device) {
			const bool first = !lease.releasing;
			lease.release_backoff_ms = first ? retry_ms : std::min(lease.release_backoff_ms * 2, max_release_retry_ms);
			lease.renew_at_ms = clock_.monotonic_ms() + lease.release_backoff_ms;
			lease.releasing = true;
			part.unsaved |= first;
			log_(LogLevel::warning, "borrower: releasing the lease on " + key + ": " + e.what() + "; trying again in " +
							std::to_string(lease.release_backoff_ms) + " ms");
			throw;
		}
	}
	device.lease.reset();
	part.unsaved = true;
	log_(LogLevel::info, "borrower: gave back " + key);
}

const BorrowedLease *Borrower::held(const AnnouncedDevice &device)
{
	return device.lease && !device.lease->releasing ? &*device.lease : nullptr;
}

json Borrower::view() const
{
	const std::lock_guard<std::mutex> guard(view_lock_);
	json devices = json::array();
	for (const auto &[host, part] : views_)
		devices.insert(devices.end(), part.begin(), part.end());
	return devices;
}

void Borrower::publish_view(const LenderPart &part)
{
	json devices = json::array();
	for (const auto &[key, entry] : part.devices)
		devices.push_back({{"lender", entry.device.lender_host},
				   {"pci", entry.device.pci_address},
				   {"id", entry.device.id},
				   {"ntb", entry.device.ntb},
				   {"slot", entry.device.irq_slot},
				   {"announced", entry.announced && !entry.withdrawing},
				   {"borrowed", held(entry) != nullptr}});
	const std::lock_guard<std::mutex> guard(view_lock_);
	views_[part.host] = std::move(devices);
}

std::map<std::string, AnnouncedDevice> Borrower::devices() const
{
	std::map<std::string, AnnouncedDevice> devices;
	for (const auto &[host, part] : lenders_)
		devices.insert(part.devices.begin(), part.devices.end());
	return devices;
}

AnnouncedDevice *Borrower::by_id(LenderPart &part, std::uint32_t id)
{
	for (auto &[key, entry] : part.devices)
		if (entry.device.id == id)
			return &entry;
	return nullptr;
}

// The part of the lender whose device has this id (the id map's key names it), if any.
Borrower::LenderPart *Borrower::lender_of(std::uint32_t id)
{
	std::string host;
	{
		const std::lock_guard<std::mutex> guard(ids_lock_);
		for (const auto &[key, given] : ids_)
			if (given == id)
				host = key.substr(0, key.rfind('/'));
	}
	const auto part = lenders_.find(host);
	return part == lenders_.end() ? nullptr : &part->second;
}

// Every call of the borrower to a lender: outside upcalls bounded by the sessions' call_timeout_ms, in
// one by what is left of its deadline. None once stopping: a worker's job then ends at its next call.
json Borrower::call_lender(LenderPart &part, std::string_view method, const json &params)
{
	if (stopping_)
		throw AgentError(ErrorCode::peer_unreachable, ECANCELED, std::string(method) + " on " + part.host + ": stopping");
	if (!part.peer)
		throw AgentError(ErrorCode::peer_unreachable, EHOSTUNREACH, part.host + " is not a configured peer");
	int timeout_ms = std::numeric_limits<int>::max();
	if (part.deadline_ms) {
		const std::int64_t left = *part.deadline_ms - clock_.monotonic_ms();
		if (left <= 0)
			throw AgentError(ErrorCode::timed_out, ETIMEDOUT,
					 std::string(method) + " on " + part.host + ": the upcall's time is up");
		timeout_ms = static_cast<int>(std::min<std::int64_t>(left, timeout_ms));
	}
	return call_peer_(*part.peer, method, params, timeout_ms);
}

// The id of (lender, PCI address): the one given before, or the stable one, or on a collision with
// another device of this host the next free one.
std::uint32_t Borrower::id_of(const std::string &lender_host, const std::string &pci_address)
{
	const std::lock_guard<std::mutex> guard(ids_lock_);
	const std::string key = key_of(lender_host, pci_address);
	if (const auto given = ids_.find(key); given != ids_.end())
		return given->second;
	std::set<std::uint32_t> used;
	for (const auto &[other, id] : ids_)
		used.insert(id);
	std::uint32_t id = stable_device_id(lender_host, pci_address);
	while (used.count(id))
		id = (id + 1) & 0x7fffffffu;
	return ids_[key] = id;
}

// A release's outcome is saved after the upcall is answered (writing the state file can take longer
// than the kernel's deadline leaves): an agent that dies in between finds the lease again at its start,
// and the lender (or the kernel, check_borrows()) tells it the lease is over.
void Borrower::save_changes(LenderPart &part)
{
	if (std::exchange(part.unsaved, false))
		persist(part);
}

// borrower.json holds every lender's devices: this lender's as they are now, the others' as they last
// persisted them.
void Borrower::persist(const LenderPart &part)
{
	json mine = json::array();
	for (const auto &[key, entry] : part.devices)
		mine.push_back(device_json(entry));
	const std::lock_guard<std::mutex> guard(save_lock_);
	saved_[part.host] = std::move(mine);
	json devices = json::array();
	for (const auto &[host, saved] : saved_)
		devices.insert(devices.end(), saved.begin(), saved.end());
	std::map<std::string, std::uint32_t> ids;
	{
		const std::lock_guard<std::mutex> ids_guard(ids_lock_);
		ids = ids_;
	}
	store_.save({{"version", state_version}, {"ids", ids}, {"devices", devices}});
}

} // namespace farpass::agent
