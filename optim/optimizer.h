// optim/optimizer.h — Optimizer: the base of SGD, Adam and AdamW.
//
// An optimizer holds handles to the parameters it updates (leaf tensors; build it after moving
// the model, see nn/module.h) and one state per parameter (momentum buffer, Adam moments and
// step count), created on the parameter's first step. step() updates every parameter that has a
// gradient with one fused kernel (kernels/optim.h), outside the tape; a parameter without a
// gradient is skipped, and its state does not advance (as in PyTorch).
//
// state_dict() captures everything a resumed run needs to continue bit-identically: the state
// tensors under "<param index>.<name>" ("0.momentum_buffer", "3.exp_avg", "3.step") and the
// hyper-parameters by name ("lr", "momentum", ...). load_state_dict() checks that the state
// belongs to the same parameters (index range, shapes) and copies it to their devices.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mg::optim {

struct OptimizerState {
  std::map<std::string, Tensor> tensors;   // per-parameter state, "<index>.<name>"
  std::map<std::string, double> options;   // hyper-parameters; booleans as 0 / 1
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Clears every parameter's gradient: drops it (set_to_none, the default) or fills it with 0.
  void zero_grad(bool set_to_none = true);
  // One update of every parameter that has a gradient.
  virtual void step() = 0;

  virtual OptimizerState state_dict() const = 0;
  virtual void load_state_dict(const OptimizerState& state) = 0;

  // The learning rate, for schedules (optim/lr_scheduler.h).
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;

  const std::vector<Tensor>& params() const { return params_; }

 protected:
  // Checks that the list is non-empty and holds floating leaf tensors; `name` prefixes errors.
  Optimizer(std::vector<Tensor> params, const char* name);

  // ---- helpers for state_dict / load_state_dict ----
  static std::string key(size_t param_index, const char* name) { return std::to_string(param_index) + "." + name; }
  // Every tensor key of `state` is "<index>.<one of names>" with index < params().size().
  void check_state_keys(const OptimizerState& state, const std::vector<std::string>& names) const;
  // The state tensor for parameter i, copied to the parameter's device and dtype; undefined
  // when absent. Checks its shape against the parameter's.
  Tensor load_param_state(const OptimizerState& state, size_t i, const char* name) const;
  // options.at(name) or an error naming it.
  double option(const OptimizerState& state, const char* name) const;

  const char* name_;
  std::vector<Tensor> params_;
};

}  // namespace mg::optim
