// optim/sgd.h — stochastic gradient descent with momentum, dampening, Nesterov momentum and
// L2 weight decay: torch.optim.SGD's update, per element (kernels/optim_functors.h SgdUpdate):
//   g = g + weight_decay * p
//   b = g on the first step, else b = momentum * b + (1 - dampening) * g   (momentum != 0)
//   g = nesterov ? g + momentum * b : b                                      (momentum != 0)
//   p = p - lr * g
#pragma once

#include <vector>

#include "multigrad/optim/optimizer.h"

namespace mg::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;  // requires momentum > 0 and dampening == 0, as in PyTorch
  double weight_decay = 0;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  // Parameter groups (optim/optimizer.h): a group's weight_decay replaces options.weight_decay.
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options = {});
  void step() override;
  // Tensors "<i>.momentum_buffer" (copies) for parameters that have taken a step with
  // momentum; options lr, momentum, dampening, nesterov, weight_decay and the groups'.
  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  const SGDOptions& options() const { return options_; }

 private:
  static void check_options(const SGDOptions& options);

  SGDOptions options_;
  std::vector<Tensor> momentum_buffers_;  // per parameter; undefined until its first step
};

}  // namespace mg::optim
