#include "worker.hpp"

namespace farpass::agent {

Worker::Worker(std::size_t capacity) : capacity_(capacity), thread_([this] { run(); }) {}

Worker::~Worker()
{
	{
		const std::lock_guard<std::mutex> guard(lock_);
		stopping_ = true;
	}
	wake_.notify_one();
	thread_.join();
}

bool Worker::post(std::function<void()> job)
{
	{
		const std::lock_guard<std::mutex> guard(lock_);
		if (jobs_.size() >= capacity_)
			return false;
		jobs_.push_back(std::move(job));
	}
	wake_.notify_one();
	return true;
}

void Worker::run()
{
	for (;;) {
		std::function<void()> job;
		{
			std::unique_lock<std::mutex> guard(lock_);
			wake_.wait(guard, [this] { return stopping_ || !jobs_.empty(); });
			if (stopping_)
				return;
			job = std::move(jobs_.front());
			jobs_.pop_front();
		}
		job(); // jobs catch their own exceptions (Borrower::run)
	}
}

} // namespace farpass::agent
