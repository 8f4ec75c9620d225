// optim/grad_scaler.h — dynamic loss scaling for float16 training (torch.amp.GradScaler).
//
// float16's smallest value is 2^-24, and gradients of a network are often smaller: rounded to
// float16 (autograd/autocast.h) they would vanish. So the loss is multiplied by a large scale S
// before backward (every gradient is then S times larger, clear of underflow) and the gradients
// are divided by S before the optimizer uses them. Too large an S overflows to infinity instead:
// a step whose gradients hold an inf or a NaN is skipped, and S halves. S doubles after
// growth_interval steps in a row without one. The defaults and the order of operations are
// PyTorch's: scale(loss).backward(); [unscale(opt); clip]; step(opt); update().
//
// Ranks that hold different gradients (ZeRO's shards, a pipeline's stages, tensor-parallel
// shards) must skip the same steps: step() takes `any_rank`, which turns this rank's finding into
// every rank's (an all-reduce of a flag). Ranks that hold the same reduced gradients (DDP) agree
// without it.
#pragma once

#include <cstdint>
#include <functional>

#include "multigrad/core/tensor.h"
#include "multigrad/optim/optimizer.h"

namespace mg::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  // The options must be finite and positive, growth_factor > 1 > backoff_factor: an error
  // naming the option otherwise.
  explicit GradScaler(const GradScalerOptions& options = {});

  // loss * scale(), differentiable.
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients `optimizer` will apply (Optimizer::step_gradients: a ZeRO optimizer's
  // reduced shards) by the scale, in place, and notes whether any holds an inf or a NaN. Once
  // per step (PyTorch's rule): a second call is an error.
  void unscale(Optimizer& optimizer);
  // Unscales (unless done), then runs optimizer.step() unless an inf or NaN was found (here, or
  // on any rank when `any_rank` is given: it gets this rank's finding and returns whether any
  // rank found one). Returns whether the step ran.
  bool step(Optimizer& optimizer, const std::function<bool(bool)>& any_rank = {});
  // After step(): halves the scale if the step was skipped, else counts towards growth.
  void update();

  double get_scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t skipped_steps() const { return skipped_steps_; }  // in the run (see load)
  // For checkpoints: the scale, the growth tracker and the steps the run had skipped so far, which
  // skipped_steps() goes on counting from (the options are the run's own).
  void load(double scale, int64_t growth_tracker, int64_t skipped_steps = 0);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;  // steps since the last skip or growth
  bool unscaled_ = false;       // in this step
  bool found_inf_ = false;      // by unscale, in this step
  bool stepped_ = false;        // step() ran since the last update()
  bool skipped_ = false;        // and skipped the optimizer
  int64_t skipped_steps_ = 0;
};

}  // namespace mg::optim
