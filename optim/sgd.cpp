// optim/sgd.cpp — SGD (optim/sgd.h): every parameter with a gradient in one multi-tensor fused
// update (kernels/optim.h).
#include "multigrad/optim/sgd.h"

#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/kernels/optim.h"

namespace mg::optim {

void SGD::check_options(const SGDOptions& o) {
  check_learning_rate("SGD", o.lr);
  MG_CHECK(o.momentum >= 0, "SGD: invalid momentum ", o.momentum);
  MG_CHECK(o.weight_decay >= 0, "SGD: invalid weight_decay ", o.weight_decay);
  MG_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
           "SGD: Nesterov momentum requires a momentum > 0 and zero dampening (momentum ", o.momentum,
           ", dampening ", o.dampening, ")");
}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{{.params = std::move(params)}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options)
    : Optimizer(std::move(groups), "SGD"), options_(options), momentum_buffers_(params_.size()) {
  check_options(options_);
}

void SGD::set_lr(double lr) {
  check_learning_rate("SGD", lr);
  options_.lr = lr;
}

void SGD::step() {
  NoGradGuard no_grad;
  std::vector<kernels::SgdItem> items;  // one multi-tensor update (kernels/optim.h)
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor& buf = momentum_buffers_[i];
    follow_param(i, buf);
    const bool first_step = options_.momentum != 0 && !buf.defined();
    if (first_step) buf = Tensor::empty(p.shape(), p.options());  // written, never read, on the first step
    items.push_back({p, contiguous(g), options_.momentum != 0 ? buf : Tensor(),
                     {.lr = options_.lr,
                      .momentum = options_.momentum,
                      .dampening = options_.dampening,
                      .weight_decay = weight_decay_of(i, options_.weight_decay),
                      .nesterov = options_.nesterov,
                      .first_step = first_step}});
  }
  kernels::sgd_update_many(items);
}

OptimizerState SGD::state_dict() const {
  OptimizerState state;
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    if (momentum_buffers_[i].defined()) state.tensors.emplace(key(i, "momentum_buffer"), clone(momentum_buffers_[i]));
  state.options = {{"lr", options_.lr},
                   {"momentum", options_.momentum},
                   {"dampening", options_.dampening},
                   {"nesterov", options_.nesterov ? 1.0 : 0.0},
                   {"weight_decay", options_.weight_decay}};
  save_groups(state);
  return state;
}

void SGD::load_state_dict(const OptimizerState& state) {
  GroupWeightDecays groups = read_groups(state);
  check_state_keys(state, {"momentum_buffer"});
  SGDOptions options{.lr = option(state, "lr"),
                     .momentum = option(state, "momentum"),
                     .dampening = option(state, "dampening"),
                     .nesterov = option(state, "nesterov") != 0,
                     .weight_decay = option(state, "weight_decay")};
  check_options(options);
  std::vector<Tensor> buffers(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) buffers[i] = load_param_state(state, i, "momentum_buffer");
  set_groups(std::move(groups));
  options_ = options;
  momentum_buffers_ = std::move(buffers);
}

}  // namespace mg::optim
