// optim/lr_scheduler.h — learning-rate schedules. A schedule reads the optimizer's learning
// rate once, as base_lr, when it is made; each step() advances its counter t by one and sets
// the optimizer's rate to lr(t). Call it once per epoch or once per iteration, after
// optimizer.step(), as in PyTorch. Construction applies lr(0).
//
//   StepLR(step_size, gamma)           lr(t) = base_lr * gamma^floor(t / step_size)
//   CosineAnnealingLR(T_max, eta_min)  lr(t) = eta_min + (base_lr - eta_min) (1 + cos(pi t / T_max)) / 2
//                                      (PyTorch's closed form; past T_max it rises again)
//   LinearWarmup(warmup_steps)         lr(t) = base_lr * min(1, (t + 1) / warmup_steps): base_lr /
//                                      warmup_steps at first, base_lr from t = warmup_steps - 1 on
//                                      (PyTorch's LinearLR(start_factor = 1 / warmup_steps,
//                                      total_iters = warmup_steps - 1))
//   WarmupCosineLR(W, T_max, eta_min)  LinearWarmup's rise for t < W, then CosineAnnealingLR's half
//                                      cosine over the remaining T_max - W steps, from base_lr at
//                                      t = W down to eta_min at t = T_max (nanoGPT's and llm.c's
//                                      schedule: a short warmup keeps the first steps of Adam on a
//                                      fresh transformer from stalling at the unigram loss)
#pragma once

#include <cstdint>

#include "multigrad/optim/optimizer.h"

namespace mg::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  void step();
  // The schedule's counter t; set_last_epoch(t) resumes a schedule (and applies lr(t)).
  int64_t last_epoch() const { return last_epoch_; }
  void set_last_epoch(int64_t t);
  double base_lr() const { return base_lr_; }
  // The rate at step t of this schedule.
  virtual double lr_at(int64_t t) const = 0;

 protected:
  explicit LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

 private:
  Optimizer& optimizer_;
  double base_lr_;
  int64_t last_epoch_ = 0;
};

class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t t) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double lr_at(int64_t t) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps);
  double lr_at(int64_t t) const override;

 private:
  int64_t warmup_steps_;
};

class WarmupCosineLR : public LRScheduler {
 public:
  // 0 <= warmup_steps < T_max; with 0 it is CosineAnnealingLR.
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t T_max, double eta_min = 0.0);
  double lr_at(int64_t t) const override;

 private:
  int64_t warmup_steps_, t_max_;
  double eta_min_;
};

}  // namespace mg::optim
