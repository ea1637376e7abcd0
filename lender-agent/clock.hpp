// Time for the agent. Every interval (lease expiry, renewals, polling, backoff, stalled connections) is
// measured on the monotonic clock: a step of the host's clock (NTP, an operator) must not stop a
// borrower's renewals or end a lender's leases early. The wall clock is only for what is written to disk,
// since a monotonic clock restarts with the boot: persisted expiry times are converted at the load/save
// boundary (Lender::persist, Lender::restore).
#pragma once

#include <chrono>
#include <cstdint>

namespace farpass::agent {

class Clock {
public:
	virtual ~Clock() = default;
	virtual std::int64_t monotonic_ms() const = 0;
	virtual std::int64_t wall_ms() const = 0;
};

class SystemClock final : public Clock {
public:
	std::int64_t monotonic_ms() const override { return ms_since_epoch(std::chrono::steady_clock::now()); }
	std::int64_t wall_ms() const override { return ms_since_epoch(std::chrono::system_clock::now()); }

private:
	template <typename TimePoint> static std::int64_t ms_since_epoch(TimePoint t)
	{
		return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
	}
};

} // namespace farpass::agent
