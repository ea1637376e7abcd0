// Descriptors that outlive the agent (docs/agent-protocol.md, "Restarts keep the device"): systemd's
// file-descriptor store, or a supervisor speaking the same $NOTIFY_SOCKET datagrams.
#pragma once

#include "fd.hpp"

#include <map>
#include <span>
#include <string>
#include <vector>

namespace farpass::agent {

class FdStore {
public:
	virtual ~FdStore() = default;
	// What the store handed this process at its start, by name; empty after the first call.
	virtual std::map<std::string, std::vector<Fd>> take_received() = 0;
	// Copies of fds kept under name (added to what the name holds); throws AgentError.
	virtual void store(const std::string &name, std::span<const int> fds) = 0;
	// Every fd the store keeps under name is closed there; throws AgentError.
	virtual void remove(const std::string &name) = 0;
};

// The store named by $NOTIFY_SOCKET; received fds from LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES, which
// the constructor reads and removes from the environment. Without $NOTIFY_SOCKET store and remove do
// nothing (there is nowhere to keep anything).
class NotifyFdStore final : public FdStore {
public:
	NotifyFdStore();
	std::map<std::string, std::vector<Fd>> take_received() override;
	void store(const std::string &name, std::span<const int> fds) override;
	void remove(const std::string &name) override;
	// Refusals of what the environment offered (closed), to log.
	const std::vector<std::string> &problems() const { return problems_; }

private:
	void send(const std::string &message, std::span<const int> fds);

	std::string socket_path_;
	std::map<std::string, std::vector<Fd>> received_;
	std::vector<std::string> problems_;
};

// The store's name of a lent device's VFIO descriptors: "vfio." and the PCI address, ':' as '-' (a
// store name may not hold ':').
std::string vfio_fd_name(const std::string &pci_address);

} // namespace farpass::agent
