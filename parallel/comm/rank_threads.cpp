// parallel/comm/rank_threads.cpp — one thread per rank (see rank_threads.h).
#include "multigrad/parallel/comm/rank_threads.h"

#include <exception>
#include <optional>
#include <thread>
#include <vector>

#include "multigrad/autograd/autocast.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/random.h"

namespace mg::parallel {
namespace {

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return "unknown exception";
}

}  // namespace

void run_rank_threads(int n, const RankThreadHooks& hooks, const std::function<void(Communicator& comm)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  const PhiloxState launcher = get_rng_state();
  const bool grad = is_grad_enabled();
  const bool anomaly = is_anomaly_enabled();
  const Precision precision = autocast_precision();
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ThreadGenerator generator(launcher);  // as a process started with the launcher's seed
      set_grad_enabled(grad);
      const AutocastGuard autocast(precision);
      std::optional<DetectAnomalyGuard> detect;
      if (anomaly) detect.emplace();
      std::unique_ptr<Communicator> comm;
      try {
        comm = hooks.make_communicator(r);
        fn(*comm);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        hooks.abort(r, message_of(errors[size_t(r)]));
      }
      comm.reset();
      hooks.leave(r);
    });
  }
  for (auto& t : threads) t.join();
  const int failed = hooks.failed_rank();
  if (failed >= 0 && errors[size_t(failed)]) std::rethrow_exception(errors[size_t(failed)]);
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace mg::parallel
