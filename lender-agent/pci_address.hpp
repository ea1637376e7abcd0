#pragma once

#include <string>
#include <string_view>

namespace farpass::agent {

// The canonical "dddd:bb:dd.f" form (lower case) of "dddd:bb:dd.f" or "bb:dd.f" as lspci prints it.
// Throws AgentError(invalid_params) for anything else, so a request can never name a path outside
// /sys/bus/pci/devices.
std::string canonical_pci_address(std::string_view address);

} // namespace farpass::agent
