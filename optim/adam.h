// optim/adam.h — Adam and AdamW: torch.optim.Adam / AdamW's update with bias correction, per
// element at step t (kernels/optim_functors.h AdamUpdate):
//   Adam:  g = g + weight_decay * p          AdamW: p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   v_hat = amsgrad ? (v_max = max(v_max, v)) : v
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)
// t counts the steps this parameter has taken (a parameter without a gradient does not advance).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "multigrad/optim/optimizer.h"

namespace mg::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
};

// AdamW's defaults differ from Adam's only in the weight decay (PyTorch's 1e-2).
struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  // Parameter groups (optim/optimizer.h): a group's weight_decay replaces options.weight_decay.
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options = {});
  void step() override;
  // Tensors "<i>.step" (Int64 scalar), "<i>.exp_avg", "<i>.exp_avg_sq" and, with amsgrad,
  // "<i>.max_exp_avg_sq" (copies) for parameters that have taken a step; options lr, beta1,
  // beta2, eps, weight_decay, amsgrad and the groups'.
  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled, const char* name);

 private:
  struct ParamState {
    int64_t step = 0;       // 0: no state yet
    Tensor exp_avg;         // m, the parameter's shape
    Tensor exp_avg_sq;      // v
    Tensor max_exp_avg_sq;  // amsgrad's running max of v
  };
  void check_options(const AdamOptions& options) const;

  AdamOptions options_;
  bool decoupled_;  // AdamW
  std::vector<ParamState> state_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});
};

}  // namespace mg::optim
