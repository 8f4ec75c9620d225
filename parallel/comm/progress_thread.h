// parallel/comm/progress_thread.h — running a rank's collectives on a thread of their own.
//
// A collective returns at once with a Work; the communication itself runs on the rank's
// ProgressThread, one job after another in call order, so every rank executes its collectives
// in the same order whatever its caller does meanwhile. That is what lets DDP start a bucket's
// all-reduce from a gradient hook and go on with backward while the bucket travels.
//
// A job that throws stores its exception in its Work; wait() rethrows it. Later jobs still run
// (a backend whose group has failed makes them fail fast). The jobs enforce the communicator's
// timeout in their own waits, so wait() never blocks longer than the jobs queued before it.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

// The Work of one job: complete once the job has run.
class ProgressWork final : public Work {
 public:
  void wait() override;
  std::optional<WorkTiming> timing() const override;
  // Called by the progress thread.
  void start();
  void finish(std::exception_ptr error);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  WorkTiming timing_;
};

class ProgressThread {
 public:
  // `setup` runs first on the new thread (e.g. to select the rank's CUDA device).
  explicit ProgressThread(std::function<void()> setup = {});
  // Runs every job still queued, then joins.
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Queues job behind the ones already submitted.
  std::shared_ptr<Work> submit(std::function<void()> job);

 private:
  struct Job {
    std::function<void()> run;
    std::shared_ptr<ProgressWork> work;
  };
  void loop(const std::function<void()>& setup);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: started after the members above exist
};

}  // namespace mg::parallel
