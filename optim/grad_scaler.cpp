// optim/grad_scaler.cpp — dynamic loss scaling (see grad_scaler.h).
#include "multigrad/optim/grad_scaler.h"

#include <cmath>

#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"
#include "multigrad/kernels/kernels.h"

namespace mg::optim {

GradScaler::GradScaler(const GradScalerOptions& options) : options_(options), scale_(options.init_scale) {
  const auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  MG_CHECK(positive(options.init_scale), "GradScaler: init_scale must be finite and > 0, got ", options.init_scale);
  MG_CHECK(std::isfinite(options.growth_factor) && options.growth_factor > 1,
           "GradScaler: growth_factor must be finite and > 1, got ", options.growth_factor);
  MG_CHECK(positive(options.backoff_factor) && options.backoff_factor < 1,
           "GradScaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  MG_CHECK(options.growth_interval > 0, "GradScaler: growth_interval must be > 0, got ", options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const { return mul(loss, scale_); }

void GradScaler::unscale(Optimizer& optimizer) {
  MG_CHECK(!unscaled_, "GradScaler: unscale() was already called since the last update()");
  NoGradGuard no_grad;
  const double inverse = 1.0 / scale_;
  found_inf_ = false;
  for (const Tensor& g : optimizer.step_gradients()) {
    kernels::binary_scalar(kernels::BinaryOp::Mul, g, inverse, false, g);
    // inf * 0 and NaN * 0 are NaN, finite * 0 is 0: the sum is NaN exactly when one is not finite.
    found_inf_ = found_inf_ || std::isnan(sum(mul(g, 0.0)).item<double>());
  }
  unscaled_ = true;
}

bool GradScaler::step(Optimizer& optimizer, const std::function<bool(bool)>& any_rank) {
  MG_CHECK(!stepped_, "GradScaler: step() was already called since the last update()");
  if (!unscaled_) unscale(optimizer);
  const bool found = any_rank ? any_rank(found_inf_) : found_inf_;
  skipped_ = found;
  skipped_steps_ += found ? 1 : 0;
  stepped_ = true;
  if (!found) optimizer.step();
  return !found;
}

void GradScaler::update() {
  MG_CHECK(stepped_, "GradScaler: update() needs a step() first");
  if (skipped_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = stepped_ = skipped_ = found_inf_ = false;
}

void GradScaler::load(double scale, int64_t growth_tracker, int64_t skipped_steps) {
  MG_CHECK(std::isfinite(scale) && scale > 0, "GradScaler: a loaded scale must be finite and > 0, got ", scale);
  MG_CHECK(growth_tracker >= 0 && growth_tracker < options_.growth_interval,
           "GradScaler: a loaded growth tracker must be in [0, ", options_.growth_interval, "), got ", growth_tracker);
  MG_CHECK(skipped_steps >= 0, "GradScaler: a loaded count of skipped steps must be >= 0, got ", skipped_steps);
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  skipped_steps_ = skipped_steps;
}

}  // namespace mg::optim
