// parallel/comm/rank_threads.h — one thread per rank, and what happens when a rank throws: the part
// of run_ranks (local.h) and run_ranks_nccl (nccl.h) that does not depend on the backend.
//
// Each rank's thread makes its communicator, runs fn on it and destroys it; it draws random
// numbers from a generator of its own (core/random.h's ThreadGenerator) that starts at the
// launching thread's state, as a process started with the same seed would, and leaves the
// launcher's generator where it was. It computes in the launching thread's modes: grad mode,
// anomaly detection and autocast (as DataParallel's and Pipeline's threads do). If fn throws, the group is aborted at once (hooks.abort,
// while the communicator still exists: destroying it may wait for its queued collectives, which
// then fail at once instead of at the timeout); the rank counts as left (hooks.leave) only after
// its communicator is gone. When every thread has ended, the failed rank's own exception is
// rethrown: the one hooks.failed_rank() names (the backend's first failure, which may be a
// timeout rather than a throw), else the first in rank order.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

struct RankThreadHooks {
  // On rank r's thread, before fn.
  std::function<std::unique_ptr<Communicator>(int rank)> make_communicator;
  // Rank r's fn threw `message`: fail the group (the backend keeps the first failure only).
  std::function<void(int rank, const std::string& message)> abort;
  // Rank r's communicator is destroyed: waiting for rank r may now fail at once.
  std::function<void(int rank)> leave;
  // After every thread has ended: the rank that failed first, or -1.
  std::function<int()> failed_rank;
};

void run_rank_threads(int n, const RankThreadHooks& hooks, const std::function<void(Communicator& comm)>& fn);

}  // namespace mg::parallel
