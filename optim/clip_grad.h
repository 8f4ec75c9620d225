// optim/clip_grad.h — gradient clipping by the global L2 norm (torch.nn.utils.clip_grad_norm_).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace mg::optim {

// total = sqrt(sum over every defined gradient g of sum(g^2)), accumulated in float64. When
// max_norm / (total + 1e-6) < 1, every gradient is scaled in place by that factor (PyTorch's
// rule: the 1e-6 keeps the division finite for a zero norm). Returns total (before scaling).
// Parameters without a gradient are skipped. A non-finite total is returned as is and leaves
// the gradients untouched.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace mg::optim
