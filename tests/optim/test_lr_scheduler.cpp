// tests/optim/test_lr_scheduler.cpp — optim/lr_scheduler.h: each schedule's rates step by step
// against its formula with hand-evaluated values, and resuming at a step.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "multigrad/optim/lr_scheduler.h"
#include "optim/optim_test_util.h"
#include "multigrad/optim/sgd.h"

using namespace mg;
using namespace mg::test;

namespace {

// The optimizer's rate after construction and after each of `steps` scheduler steps.
template <class Scheduler, class... Args>
std::vector<double> rates(int steps, Args... args) {
  optim::SGD opt({param64({0.0})}, {.lr = 0.8});
  Scheduler sched(opt, args...);
  std::vector<double> out{opt.lr()};
  for (int i = 0; i < steps; ++i) {
    sched.step();
    out.push_back(opt.lr());
  }
  return out;
}

}  // namespace

TEST_CASE("StepLR: multiplies by gamma every step_size steps", "[optim]") {
  require_close(rates<optim::StepLR>(5, int64_t(2), 0.5), {0.8, 0.8, 0.4, 0.4, 0.2, 0.2}, 1e-15);
}

TEST_CASE("CosineAnnealingLR: half a cosine from base_lr down to eta_min", "[optim]") {
  // T_max 4, eta_min 0.2: 0.2 + 0.6 * (1 + cos(pi t / 4)) / 2
  std::vector<double> want;
  for (int t = 0; t <= 4; ++t) want.push_back(0.2 + 0.6 * (1 + std::cos(M_PI * t / 4)) / 2);
  std::vector<double> got = rates<optim::CosineAnnealingLR>(4, int64_t(4), 0.2);
  require_close(got, want, 1e-14);
  CHECK(got[2] == Approx(0.5).epsilon(1e-14));  // halfway: the mean of 0.8 and 0.2
  CHECK(got[4] == Approx(0.2).epsilon(1e-14));
}

TEST_CASE("LinearWarmup: rises linearly to base_lr over warmup_steps, then holds", "[optim]") {
  require_close(rates<optim::LinearWarmup>(5, int64_t(4)), {0.2, 0.4, 0.6, 0.8, 0.8, 0.8}, 1e-15);
}

TEST_CASE("WarmupCosineLR: LinearWarmup's rise, then a half cosine over the remaining steps", "[optim]") {
  // W 2, T_max 6, eta_min 0.2: 0.4, 0.8, then 0.2 + 0.6 * (1 + cos(pi (t - 2) / 4)) / 2 for t = 2..6.
  std::vector<double> want{0.4, 0.8};
  for (int t = 2; t <= 6; ++t) want.push_back(0.2 + 0.6 * (1 + std::cos(M_PI * (t - 2) / 4)) / 2);
  const std::vector<double> got = rates<optim::WarmupCosineLR>(6, int64_t(2), int64_t(6), 0.2);
  require_close(got, want, 1e-14);
  CHECK(got[2] == 0.8);                                       // the peak, at t = W
  CHECK(got[6] == Approx(0.2).epsilon(1e-14));                // eta_min at T_max
  require_close(rates<optim::WarmupCosineLR>(4, int64_t(0), int64_t(4), 0.2),
                rates<optim::CosineAnnealingLR>(4, int64_t(4), 0.2), 0);  // no warmup: the cosine
  optim::SGD opt({param64({0.0})}, {.lr = 1.0});
  require_error([&] { optim::WarmupCosineLR bad(opt, 6, 6); }, {"WarmupCosineLR", "warmup_steps 6", "T_max 6"});
}

TEST_CASE("LRScheduler: set_last_epoch resumes a schedule mid-way", "[optim]") {
  optim::SGD opt({param64({0.0})}, {.lr = 1.0});
  optim::StepLR sched(opt, 3, 0.1);
  sched.set_last_epoch(6);
  CHECK(opt.lr() == Approx(0.01).epsilon(1e-14));
  sched.step();
  CHECK(sched.last_epoch() == 7);
  CHECK(opt.lr() == Approx(0.01).epsilon(1e-14));
  CHECK(sched.base_lr() == 1.0);
  require_error([&] { optim::StepLR bad(opt, 0); }, {"StepLR", "step_size", "got 0"});
  require_error([&] { optim::CosineAnnealingLR bad(opt, -1); }, {"T_max", "-1"});
}
