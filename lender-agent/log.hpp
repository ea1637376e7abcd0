// Log lines go to a sink the daemon's main provides (stderr with sd-daemon priority prefixes, which
// journald understands); only main and sessions log.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace farpass::agent {

// syslog priorities, as journald reads them from a "<N>" line prefix.
enum class LogLevel { error = 3, warning = 4, info = 6 };

using LogSink = std::function<void(LogLevel level, const std::string &line)>;

// A log line as written: control characters (newlines included) and DEL as \xNN, backslash as \\, so
// a name a peer chose can neither forge a line nor hide part of one.
inline std::string escape_for_log(std::string_view line)
{
	static constexpr char hex[] = "0123456789abcdef";
	std::string out;
	for (const char c : line) {
		const auto byte = static_cast<unsigned char>(c);
		if (byte < 0x20 || byte == 0x7f)
			out += {'\\', 'x', hex[byte >> 4], hex[byte & 15]};
		else if (c == '\\')
			out += "\\\\";
		else
			out += c;
	}
	return out;
}

} // namespace farpass::agent
