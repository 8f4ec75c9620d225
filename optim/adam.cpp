// optim/adam.cpp — Adam and AdamW (optim/adam.h): every parameter with a gradient in one
// multi-tensor fused update (kernels/optim.h).
#include "multigrad/optim/adam.h"

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/kernels/optim.h"

namespace mg::optim {

void Adam::check_options(const AdamOptions& o) const {
  check_learning_rate(name_, o.lr);
  MG_CHECK(o.eps >= 0, name_, ": invalid eps ", o.eps);
  MG_CHECK(o.betas[0] >= 0 && o.betas[0] < 1 && o.betas[1] >= 0 && o.betas[1] < 1, name_, ": invalid betas (",
           o.betas[0], ", ", o.betas[1], "): each must lie in [0, 1)");
  MG_CHECK(o.weight_decay >= 0, name_, ": invalid weight_decay ", o.weight_decay);
}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(std::vector<ParamGroup>{{.params = std::move(params)}}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options)
    : Adam(std::move(groups), options, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled, const char* name)
    : Optimizer(std::move(groups), name), options_(options), decoupled_(decoupled), state_(params_.size()) {
  check_options(options_);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& o)
    : AdamW(std::vector<ParamGroup>{{.params = std::move(params)}}, o) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o)
    : Adam(std::move(groups),
           {.lr = o.lr, .betas = o.betas, .eps = o.eps, .weight_decay = o.weight_decay, .amsgrad = o.amsgrad},
           true, "AdamW") {}

void Adam::set_lr(double lr) {
  check_learning_rate(name_, lr);
  options_.lr = lr;
}

void Adam::step() {
  NoGradGuard no_grad;
  std::vector<kernels::AdamItem> items;  // one multi-tensor update (kernels/optim.h)
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    ParamState& s = state_[i];
    for (Tensor* moment : {&s.exp_avg, &s.exp_avg_sq, &s.max_exp_avg_sq}) follow_param(i, *moment);
    if (s.step == 0) {
      s.exp_avg = zeros_like(p);
      s.exp_avg_sq = zeros_like(p);
    }
    if (options_.amsgrad && !s.max_exp_avg_sq.defined()) s.max_exp_avg_sq = zeros_like(p);
    ++s.step;
    items.push_back({p, contiguous(g), s.exp_avg, s.exp_avg_sq, options_.amsgrad ? s.max_exp_avg_sq : Tensor(),
                     {.lr = options_.lr,
                      .beta1 = options_.betas[0],
                      .beta2 = options_.betas[1],
                      .eps = options_.eps,
                      .weight_decay = weight_decay_of(i, options_.weight_decay),
                      .decoupled = decoupled_,
                      .step = s.step}});
  }
  kernels::adam_update_many(items);
}

OptimizerState Adam::state_dict() const {
  OptimizerState state;
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamState& s = state_[i];
    if (s.step == 0) continue;
    state.tensors.emplace(key(i, "step"), tensor({s.step}, {}, {.dtype = DType::Int64}));
    state.tensors.emplace(key(i, "exp_avg"), clone(s.exp_avg));
    state.tensors.emplace(key(i, "exp_avg_sq"), clone(s.exp_avg_sq));
    if (s.max_exp_avg_sq.defined()) state.tensors.emplace(key(i, "max_exp_avg_sq"), clone(s.max_exp_avg_sq));
  }
  state.options = {{"lr", options_.lr},
                   {"beta1", options_.betas[0]},
                   {"beta2", options_.betas[1]},
                   {"eps", options_.eps},
                   {"weight_decay", options_.weight_decay},
                   {"amsgrad", options_.amsgrad ? 1.0 : 0.0}};
  save_groups(state);
  return state;
}

void Adam::load_state_dict(const OptimizerState& state) {
  GroupWeightDecays groups = read_groups(state);
  check_state_keys(state, {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"});
  AdamOptions options{.lr = option(state, "lr"),
                      .betas = {option(state, "beta1"), option(state, "beta2")},
                      .eps = option(state, "eps"),
                      .weight_decay = option(state, "weight_decay"),
                      .amsgrad = option(state, "amsgrad") != 0};
  check_options(options);
  std::vector<ParamState> loaded(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState& s = loaded[i];
    auto step = state.tensors.find(key(i, "step"));
    s.exp_avg = load_param_state(state, i, "exp_avg");
    s.exp_avg_sq = load_param_state(state, i, "exp_avg_sq");
    s.max_exp_avg_sq = load_param_state(state, i, "max_exp_avg_sq");
    if (step == state.tensors.end()) {
      MG_CHECK(!s.exp_avg.defined() && !s.exp_avg_sq.defined() && !s.max_exp_avg_sq.defined(), name_,
               ".load_state_dict: parameter ", i, " has moments but no '", key(i, "step"), "'");
      continue;
    }
    MG_CHECK(step->second.defined() && step->second.numel() == 1, name_, ".load_state_dict: '", step->first,
             "' must hold one value");
    s.step = step->second.item<int64_t>();
    MG_CHECK(s.step >= 1 && s.exp_avg.defined() && s.exp_avg_sq.defined(), name_, ".load_state_dict: parameter ",
             i, " has step ", s.step, " but not both moments (exp_avg, exp_avg_sq)");
    MG_CHECK(!options.amsgrad || s.max_exp_avg_sq.defined(), name_, ".load_state_dict: amsgrad is on but '",
             key(i, "max_exp_avg_sq"), "' is missing");
  }
  set_groups(std::move(groups));
  options_ = options;
  state_ = std::move(loaded);
}

}  // namespace mg::optim
