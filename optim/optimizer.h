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
//
// Parameter groups (PyTorch's param_groups, as nanoGPT and llm.c use them: weight decay on
// matrices and embeddings, none on biases and norms): an optimizer made from a list of
// ParamGroup updates each group with the optimizer's options except where the group sets its
// own. A group may set weight_decay only; lr, momentum, betas and eps are the optimizer's, so one
// set_lr (and so one schedule) moves every group. Parameters are numbered across the groups in
// order, and the state records the groups ("groups", "group.<g>.size", "group.<g>.weight_decay"
// where a group sets it); load_state_dict() requires the same group sizes and restores the
// groups' weight decays.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "multigrad/core/tensor.h"

namespace mg::optim {

struct OptimizerState {
  std::map<std::string, Tensor> tensors{};   // per-parameter state, "<index>.<name>"
  std::map<std::string, double> options{};   // hyper-parameters; booleans as 0 / 1
};

// A state key "<index>.<name>" as the parameter index and the name (a malformed key: an error).
std::pair<size_t, std::string> split_state_key(const std::string& key);

struct ParamGroup {
  std::vector<Tensor> params{};
  std::optional<double> weight_decay = std::nullopt;  // unset: the optimizer's
};

// nanoGPT's grouping: {parameters of 2 or more dimensions, weight_decay}, {the rest, 0}; a group
// that would be empty is left out.
std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params, double weight_decay);

// Throws "<optimizer>: invalid learning rate <lr> (expected a finite number >= 0)" unless it is one:
// an infinite rate would turn the parameters into NaN at the first step (inf * 0 under a schedule).
void check_learning_rate(const std::string& optimizer, double lr);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Clears every parameter's gradient: drops it (set_to_none, the default) or fills it with 0.
  virtual void zero_grad(bool set_to_none = true);
  // One update of every parameter that has a gradient.
  virtual void step() = 0;
  // The gradients the next step() applies, as this process holds them (GradScaler unscales and
  // checks these): every parameter's .grad; a sharded optimizer's reduced shards (reduced here
  // first, which makes the call collective for it).
  virtual std::vector<Tensor> step_gradients();

  virtual OptimizerState state_dict() const = 0;
  virtual void load_state_dict(const OptimizerState& state) = 0;

  // The learning rate, for schedules (optim/lr_scheduler.h).
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;

  const std::vector<Tensor>& params() const { return params_; }
  size_t num_groups() const { return group_sizes_.size(); }

 protected:
  // Checks that the groups hold, together, a non-empty list of distinct floating leaf tensors
  // and that every group's weight_decay is >= 0; `name` prefixes errors.
  Optimizer(std::vector<ParamGroup> groups, const char* name);

  // Parameter i's weight decay: its group's, else `optimizer_default`.
  double weight_decay_of(size_t i, double optimizer_default) const {
    const std::optional<double>& own = group_weight_decay_[group_of_[i]];
    return own ? *own : optimizer_default;
  }

  // ---- helpers for state_dict / load_state_dict ----
  static std::string key(size_t param_index, const char* name) { return std::to_string(param_index) + "." + name; }
  // Every tensor key of `state` is "<index>.<one of names>" with index < params().size().
  void check_state_keys(const OptimizerState& state, const std::vector<std::string>& names) const;
  // The state tensor for parameter i, copied to the parameter's device and dtype; undefined
  // when absent. Checks its shape against the parameter's.
  Tensor load_param_state(const OptimizerState& state, size_t i, const char* name) const;
  // Puts `state`, a tensor kept for parameter i, on the parameter's device and dtype where they
  // differ: a parameter moved after its state was made (nn::Module::to moves it in place) takes
  // its state along at the next step, as it would have had it started there.
  void follow_param(size_t i, Tensor& state) const;
  // options.at(name) or an error naming it.
  double option(const OptimizerState& state, const char* name) const;
  // The groups' entries of state.options, written by save_groups. read_groups checks them
  // against this optimizer's groups (a state without them has one group) and returns the groups'
  // weight decays, which set_groups restores once the rest of the state has been checked too.
  using GroupWeightDecays = std::vector<std::optional<double>>;
  void save_groups(OptimizerState& state) const;
  GroupWeightDecays read_groups(const OptimizerState& state) const;
  void set_groups(GroupWeightDecays weight_decays) { group_weight_decay_ = std::move(weight_decays); }

  const char* name_;
  std::vector<Tensor> params_;

 private:
  std::vector<size_t> group_of_;                           // per parameter
  std::vector<size_t> group_sizes_;                        // per group
  GroupWeightDecays group_weight_decay_;                   // per group
};

}  // namespace mg::optim
