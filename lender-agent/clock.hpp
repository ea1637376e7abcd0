// Time for leases. Wall-clock milliseconds, because lease expiry times are persisted and must keep
// their meaning across an agent restart (a monotonic clock restarts with the boot).
#pragma once

#include <chrono>
#include <cstdint>

namespace farpass::agent {

class Clock {
public:
	virtual ~Clock() = default;
	virtual std::int64_t now_ms() const = 0;
};

class SystemClock final : public Clock {
public:
	std::int64_t now_ms() const override
	{
		using namespace std::chrono;
		return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
	}
};

} // namespace farpass::agent
