// optim/optimizer.cpp — the shared part of every optimizer: parameter checks, zero_grad and
// the state-dict helpers (optim/optimizer.h).
#include "optim/optimizer.h"

#include <algorithm>
#include <set>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "kernels/kernels.h"

namespace mg::optim {

Optimizer::Optimizer(std::vector<Tensor> params, const char* name) : name_(name), params_(std::move(params)) {
  MG_CHECK(!params_.empty(), name_, ": got an empty parameter list");
  std::set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    MG_CHECK(p.defined(), name_, ": parameter ", i, " is undefined");
    MG_CHECK(p.dtype() == DType::Float32 || p.dtype() == DType::Float64, name_, ": parameter ", i,
             " must be Float32 or Float64, got ", p.dtype());
    MG_CHECK(p.is_leaf(), name_, ": parameter ", i, " (shape ", p.shape(), ") is not a leaf tensor");
    MG_CHECK(seen.insert(p.unsafe_impl()).second, name_, ": parameter ", i, " (shape ", p.shape(),
             ") appears twice in the list");
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
      continue;
    }
    Tensor g = p.grad();
    if (g.defined()) kernels::fill(g, 0.0);
  }
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

double Optimizer::option(const OptimizerState& state, const char* name) const {
  auto it = state.options.find(name);
  MG_CHECK(it != state.options.end(), name_, ".load_state_dict: missing option '", name, "'");
  return it->second;
}

}  // namespace mg::optim
