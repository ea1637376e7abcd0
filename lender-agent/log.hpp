// Log lines go to a sink the daemon's main provides (stderr with sd-daemon priority prefixes, which
// journald understands); only main and sessions log.
#pragma once

#include <functional>
#include <string>

namespace farpass::agent {

// syslog priorities, as journald reads them from a "<N>" line prefix.
enum class LogLevel { error = 3, warning = 4, info = 6 };

using LogSink = std::function<void(LogLevel level, const std::string &line)>;

} // namespace farpass::agent
