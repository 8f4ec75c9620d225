// optim/lr_scheduler.cpp — the schedules of optim/lr_scheduler.h (formulas there).
#include "multigrad/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mg::optim {

void LRScheduler::step() { set_last_epoch(last_epoch_ + 1); }

void LRScheduler::set_last_epoch(int64_t t) {
  MG_CHECK(t >= 0, "LRScheduler: the step counter must be non-negative, got ", t);
  last_epoch_ = t;
  optimizer_.set_lr(lr_at(t));
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  MG_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  MG_CHECK(gamma >= 0, "StepLR: gamma must be non-negative, got ", gamma);
  set_last_epoch(0);
}

double StepLR::lr_at(int64_t t) const { return base_lr() * std::pow(gamma_, double(t / step_size_)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  MG_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  MG_CHECK(eta_min >= 0, "CosineAnnealingLR: eta_min must be non-negative, got ", eta_min);
  set_last_epoch(0);
}

namespace {

// base (t + 1) / W, held at base from t = W - 1 on
double linear_rise(double base, int64_t t, int64_t W) { return base * std::min(1.0, double(t + 1) / double(W)); }

// eta_min + (base - eta_min) (1 + cos(pi t / T)) / 2
double half_cosine(double base, double eta_min, int64_t t, int64_t T) {
  return eta_min + (base - eta_min) * (1.0 + std::cos(std::numbers::pi * double(t) / double(T))) / 2.0;
}

}  // namespace

double CosineAnnealingLR::lr_at(int64_t t) const { return half_cosine(base_lr(), eta_min_, t, t_max_); }

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps)
    : LRScheduler(optimizer), warmup_steps_(warmup_steps) {
  MG_CHECK(warmup_steps > 0, "LinearWarmup: warmup_steps must be positive, got ", warmup_steps);
  set_last_epoch(0);
}

double LinearWarmup::lr_at(int64_t t) const {
  return linear_rise(base_lr(), t, warmup_steps_);
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), warmup_steps_(warmup_steps), t_max_(T_max), eta_min_(eta_min) {
  MG_CHECK(warmup_steps >= 0 && warmup_steps < T_max, "WarmupCosineLR: warmup_steps ", warmup_steps,
           " must be at least 0 and less than T_max ", T_max);
  MG_CHECK(eta_min >= 0, "WarmupCosineLR: eta_min must be non-negative, got ", eta_min);
  set_last_epoch(0);
}

double WarmupCosineLR::lr_at(int64_t t) const {
  if (t < warmup_steps_) return linear_rise(base_lr(), t, warmup_steps_);
  return half_cosine(base_lr(), eta_min_, t - warmup_steps_, t_max_ - warmup_steps_);
}

}  // namespace mg::optim
