// One thread that runs jobs in the order they were posted, from a bounded queue: the borrower gives each
// lender one, so a lender that never answers holds up only the work that calls it (borrower.hpp).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace farpass::agent {

class Worker {
public:
	explicit Worker(std::size_t capacity);
	// Lets the running job finish (a call to a lender ends within its call_timeout_ms), drops the queued
	// ones and joins.
	~Worker();
	Worker(const Worker &) = delete;
	Worker &operator=(const Worker &) = delete;

	// Queues job; false, and job dropped, when capacity jobs already wait.
	bool post(std::function<void()> job);

private:
	void run();

	const std::size_t capacity_;
	std::mutex lock_; // protects jobs_ and stopping_
	std::condition_variable wake_;
	std::deque<std::function<void()>> jobs_;
	bool stopping_ = false;
	std::thread thread_; // last: started once the rest is built
};

} // namespace farpass::agent
