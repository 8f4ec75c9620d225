// parallel/comm/progress_thread.cpp — the per-rank progress thread (see progress_thread.h).
#include "multigrad/parallel/comm/progress_thread.h"

#include <utility>

namespace mg::parallel {

void ProgressWork::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

std::optional<WorkTiming> ProgressWork::timing() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_) return std::nullopt;
  return timing_;
}

void ProgressWork::start() {
  std::lock_guard<std::mutex> lock(mu_);
  timing_.start = std::chrono::steady_clock::now();
}

void ProgressWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    timing_.end = std::chrono::steady_clock::now();
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

ProgressThread::ProgressThread(std::function<void()> setup)
    : thread_([this, setup = std::move(setup)] { loop(setup); }) {}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Work> ProgressThread::submit(std::function<void()> job) {
  auto work = std::make_shared<ProgressWork>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({std::move(job), work});
  }
  cv_.notify_all();
  return work;
}

void ProgressThread::loop(const std::function<void()>& setup) {
  std::exception_ptr setup_error;
  if (setup) {
    try {
      setup();
    } catch (...) {
      setup_error = std::current_exception();  // every job fails with it
    }
  }
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error = setup_error;
    job.work->start();
    if (!error) {
      try {
        job.run();
      } catch (...) {
        error = std::current_exception();
      }
    }
    // What the job captured (its tensors) goes before wait() returns, so that a caller who drops
    // its own references after the wait frees the memory then, not when this loop moves on.
    job.run = nullptr;
    job.work->finish(error);
  }
}

}  // namespace mg::parallel
