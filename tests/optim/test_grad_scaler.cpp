// optim/grad_scaler.h: PyTorch's GradScaler rules (scale, unscale, skip on inf/NaN, back off,
// grow), agreement across ranks, the errors, and what it is for: float16 gradients that
// underflow to zero unscaled and survive scaled.
#include <cmath>
#include <limits>

#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

Tensor param(std::vector<double> v) {
  Tensor p = tensor(v, {int64_t(v.size())}).to(DType::Float32);
  p.requires_grad_(true);
  return p;
}

// Gives p the gradient `scale * g` (what backward of a scaled loss leaves).
void set_scaled_grad(const Tensor& p, const std::vector<double>& g, double scale) {
  p.set_grad(mul(tensor(g, {int64_t(g.size())}).to(DType::Float32), scale));
}

}  // namespace

TEST_CASE("grad scaler: unscaled steps, a skipped step on inf or NaN, back-off and growth as PyTorch's",
          "[optim][grad_scaler]") {
  const Tensor p = param({1, 2});
  optim::SGD sgd({p}, {.lr = 0.5});
  optim::GradScaler scaler({.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3});
  CHECK(values(scaler.scale(tensor(std::vector<double>{3.0}, {1}))) == std::vector<double>{3072});
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // Each step's gradient (before scaling); the reference applies PyTorch's rules by hand.
  const std::vector<std::vector<double>> grads{{1, 1}, {inf, 1}, {2, 4}, {1, 1}, {1, 1}, {0.5, nan}, {1, 0}};
  std::vector<double> want = {1, 2};
  double want_scale = 1024;
  int64_t tracker = 0;
  for (size_t s = 0; s < grads.size(); ++s) {
    INFO("step " << s);
    set_scaled_grad(p, grads[s], scaler.get_scale());
    const bool finite = std::isfinite(grads[s][0]) && std::isfinite(grads[s][1]);
    CHECK(scaler.step(sgd) == finite);
    scaler.update();
    if (finite) {
      for (size_t i = 0; i < 2; ++i) want[i] -= 0.5 * grads[s][i];
      if (++tracker == 3) want_scale *= 2, tracker = 0;
    } else {
      want_scale *= 0.5, tracker = 0;
    }
    CHECK(values(p) == want);
    CHECK(scaler.get_scale() == want_scale);
    CHECK(scaler.growth_tracker() == tracker);
  }
  CHECK(scaler.skipped_steps() == 2);
}

TEST_CASE("grad scaler: unscale before clipping, and ranks that skip together", "[optim][grad_scaler]") {
  const Tensor p = param({0, 0});
  optim::SGD sgd({p}, {.lr = 1});
  optim::GradScaler scaler;
  set_scaled_grad(p, {3, 4}, scaler.get_scale());
  scaler.unscale(sgd);
  CHECK(values(p.grad()) == std::vector<double>{3, 4});  // what clip_grad_norm must see
  optim::clip_grad_norm({p}, 1.0);
  // Another rank found an inf: this one skips too, and both back off.
  CHECK_FALSE(scaler.step(sgd, [](bool /*mine: false*/) { return true; }));
  scaler.update();
  CHECK(values(p) == std::vector<double>{0, 0});
  CHECK(scaler.get_scale() == 32768);
}

TEST_CASE("grad scaler: calls out of order and bad options are errors naming them", "[optim][grad_scaler]") {
  const Tensor p = param({1});
  optim::SGD sgd({p}, {.lr = 1});
  optim::GradScaler scaler;
  set_scaled_grad(p, {1}, 1);
  scaler.unscale(sgd);
  require_error([&] { scaler.unscale(sgd); }, {"GradScaler", "unscale() was already called"});
  scaler.step(sgd);
  require_error([&] { scaler.step(sgd); }, {"step() was already called"});
  scaler.update();
  require_error([&] { scaler.update(); }, {"update() needs a step() first"});
  require_error([] { optim::GradScaler({.init_scale = 0}); }, {"init_scale", "0"});
  require_error([] { optim::GradScaler({.growth_factor = 1}); }, {"growth_factor", "1"});
  require_error([] { optim::GradScaler({.backoff_factor = 1.5}); }, {"backoff_factor", "1.5"});
  require_error([] { optim::GradScaler({.growth_interval = 0}); }, {"growth_interval", "0"});
  require_error([&] { scaler.load(-1, 0); }, {"scale", "-1"});
  require_error([&] { scaler.load(8, 2000); }, {"growth tracker", "2000"});
}

TEST_CASE("grad scaler: float16 gradients that underflow unscaled survive scaled", "[optim][grad_scaler][autocast]") {
  // d loss / d w = x^T (1e-6 ones): about 1e-9 per element, below float16's smallest 2^-24 (6e-8).
  const Tensor x = mul(ones({4, 3}), 1e-3);
  const auto grad_of_w = [&](double loss_scale) {
    Tensor w = zeros({2, 3});
    w.requires_grad_(true);
    Tensor out;
    {
      AutocastGuard autocast(Precision::Float16);
      out = linear(x, w);
    }
    mul(sum(out), 1e-6 * loss_scale).backward();
    return values(mul(w.grad(), 1.0 / loss_scale));
  };
  for (double g : grad_of_w(1)) CHECK(g == 0);
  // 4 rows x 1e-3 x 1e-6 = 4e-9 each, once scaled by 2^16 within float16's reach: three roundings
  // to its 11 bits (x, the output's gradient, the product), 2^-11 each.
  for (double g : grad_of_w(65536)) CHECK(g == Approx(4e-9).epsilon(3 * 0x1p-11));
}
