#include "pci_address.hpp"

#include "errors.hpp"

#include <algorithm>
#include <cctype>
#include <regex>

namespace farpass::agent {

std::string canonical_pci_address(std::string_view address)
{
	static const std::regex full("[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\\.[0-7]");
	std::string lower(address);
	std::transform(lower.begin(), lower.end(), lower.begin(),
		       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
	if (lower.size() == 7)
		lower = "0000:" + lower;
	if (!std::regex_match(lower, full))
		throw AgentError(ErrorCode::invalid_params, "not a PCI address: \"" + std::string(address) + "\"");
	return lower;
}

} // namespace farpass::agent
