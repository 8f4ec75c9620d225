// optim/optimizer.cpp — the shared part of every optimizer: parameter checks, zero_grad and
// the state-dict helpers (optim/optimizer.h).
#include "multigrad/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/kernels/kernels.h"
#include "multigrad/optim/clip_grad.h"

namespace mg::optim {

std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params, double weight_decay) {
  ParamGroup decay{.params = {}, .weight_decay = weight_decay}, no_decay{.params = {}, .weight_decay = 0.0};
  for (const Tensor& p : params) (p.defined() && p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  std::vector<ParamGroup> groups;
  for (ParamGroup* g : {&decay, &no_decay})
    if (!g->params.empty()) groups.push_back(std::move(*g));
  return groups;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, const char* name) : name_(name) {
  std::set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::optional<double>& wd = groups[g].weight_decay;
    MG_CHECK(!wd || *wd >= 0, name_, ": invalid weight_decay ", wd.value_or(0), " in parameter group ", g);
    for (Tensor& p : groups[g].params) {
      const size_t i = params_.size();
      MG_CHECK(p.defined(), name_, ": parameter ", i, " (group ", g, ") is undefined");
      MG_CHECK(p.dtype() == DType::Float32 || p.dtype() == DType::Float64, name_, ": parameter ", i, " (group ", g,
               ") must be Float32 or Float64, got ", p.dtype());
      MG_CHECK(p.is_leaf(), name_, ": parameter ", i, " (group ", g, ", shape ", p.shape(), ") is not a leaf tensor");
      MG_CHECK(seen.insert(p.unsafe_impl()).second, name_, ": parameter ", i, " (group ", g, ", shape ", p.shape(),
               ") appears twice in the list");
      params_.push_back(std::move(p));
      group_of_.push_back(g);
    }
    group_sizes_.push_back(groups[g].params.size());
    group_weight_decay_.push_back(wd);
  }
  MG_CHECK(!params_.empty(), name_, ": got an empty parameter list");
}

std::vector<Tensor> Optimizer::step_gradients() { return grads_of(params_); }

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
      continue;
    }
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.requires_grad()) {  // a create_graph gradient: drop its history (and the cycle through it)
      p.set_grad(zeros_like(g.detach()));
      continue;
    }
    kernels::fill(g, 0.0);
  }
}

std::pair<size_t, std::string> split_state_key(const std::string& key) {
  const size_t dot = key.find('.');
  MG_CHECK(dot != std::string::npos && dot > 0 &&
               std::all_of(key.begin(), key.begin() + ptrdiff_t(dot), [](char c) { return c >= '0' && c <= '9'; }),
           "optimizer state: key '", key, "' is not <parameter index>.<name>");
  return {std::stoul(key.substr(0, dot)), key.substr(dot + 1)};
}

void Optimizer::check_state_keys(const OptimizerState& state, const std::vector<std::string>& names) const {
  for (const auto& [k, t] : state.tensors) {
    const size_t dot = k.find('.');
    bool ok = dot != std::string::npos && dot > 0 &&
              std::all_of(k.begin(), k.begin() + dot, [](char c) { return c >= '0' && c <= '9'; }) &&
              std::find(names.begin(), names.end(), k.substr(dot + 1)) != names.end();
    MG_CHECK(ok, name_, ".load_state_dict: unexpected key '", k, "'");
    const size_t index = std::stoul(k.substr(0, dot));
    MG_CHECK(index < params_.size(), name_, ".load_state_dict: key '", k, "' refers to parameter ", index,
             " but the optimizer has ", params_.size());
  }
}

Tensor Optimizer::load_param_state(const OptimizerState& state, size_t i, const char* name) const {
  auto it = state.tensors.find(key(i, name));
  if (it == state.tensors.end()) return Tensor();
  const Tensor& p = params_[i];
  const Tensor& t = it->second;
  MG_CHECK(t.defined() && t.shape() == p.shape(), name_, ".load_state_dict: shape mismatch for key '", it->first,
           "': the state has ", t.defined() ? t.shape() : Shape{}, ", the parameter ", p.shape());
  NoGradGuard no_grad;
  return clone(t.to(p.device()).to(p.dtype()));
}

void Optimizer::follow_param(size_t i, Tensor& state) const {
  const Tensor& p = params_[i];
  if (!state.defined() || (state.device() == p.device() && state.dtype() == p.dtype())) return;
  NoGradGuard no_grad;
  state = state.to(p.device()).to(p.dtype());
}

double Optimizer::option(const OptimizerState& state, const char* name) const {
  auto it = state.options.find(name);
  MG_CHECK(it != state.options.end(), name_, ".load_state_dict: missing option '", name, "'");
  return it->second;
}

namespace {
std::string group_key(size_t g, const char* name) { return "group." + std::to_string(g) + "." + name; }
}  // namespace

void Optimizer::save_groups(OptimizerState& state) const {
  if (num_groups() == 1 && !group_weight_decay_[0]) return;  // the state of an optimizer without groups
  state.options["groups"] = double(num_groups());
  for (size_t g = 0; g < num_groups(); ++g) {
    state.options[group_key(g, "size")] = double(group_sizes_[g]);
    if (group_weight_decay_[g]) state.options[group_key(g, "weight_decay")] = *group_weight_decay_[g];
  }
}

Optimizer::GroupWeightDecays Optimizer::read_groups(const OptimizerState& state) const {
  auto groups = state.options.find("groups");
  const double saved = groups == state.options.end() ? 1.0 : groups->second;
  MG_CHECK(saved == double(num_groups()), name_, ".load_state_dict: the state has ", saved,
           " parameter groups, the optimizer ", num_groups());
  GroupWeightDecays weight_decay(num_groups());
  for (size_t g = 0; g < num_groups() && groups != state.options.end(); ++g) {
    const double size = option(state, group_key(g, "size").c_str());
    MG_CHECK(size == double(group_sizes_[g]), name_, ".load_state_dict: parameter group ", g, " has ", size,
             " parameters in the state, ", group_sizes_[g], " in the optimizer");
    auto wd = state.options.find(group_key(g, "weight_decay"));
    if (wd == state.options.end()) continue;
    MG_CHECK(wd->second >= 0, name_, ".load_state_dict: invalid weight_decay ", wd->second, " in parameter group ", g);
    weight_decay[g] = wd->second;
  }
  return weight_decay;
}

void check_learning_rate(const std::string& optimizer, double lr) {
  MG_CHECK(std::isfinite(lr) && lr >= 0, optimizer, ": invalid learning rate ", lr, " (expected a finite number >= 0)");
}

}  // namespace mg::optim
