// optim/clip_grad.cpp — clip_grad_norm (optim/clip_grad.h).
#include "optim/clip_grad.h"

#include <cmath>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "kernels/kernels.h"

namespace mg::optim {

// PyTorch's guard against dividing by a zero norm.
constexpr double kNormEpsilon = 1e-6;

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  MG_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be non-negative, got ", max_norm);
  NoGradGuard no_grad;
  double total_sq = 0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor g64 = g.to(DType::Float64);
    total_sq += sum(g64 * g64).item<double>();
  }
  const double total = std::sqrt(total_sq);
  const double coef = max_norm / (total + kNormEpsilon);
  if (coef < 1.0) {
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) kernels::binary_scalar(kernels::BinaryOp::Mul, g, coef, false, g);
    }
  }
  return total;
}

}  // namespace mg::optim
