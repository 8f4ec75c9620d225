// kernels/loss_functors.h — the per-element math of the fused cross-entropy (kernels/loss.h),
// written once for kernels/cpu/loss.cpp and kernels/cuda/loss.cu.
#pragma once

#include "multigrad/kernels/functors.h"

namespace mg::kernels {

// d loss_n / d x[n, c] = softmax(x_n)[c] - [c == t_n] = exp(x - lse_n) - [c == t_n], times
// `scale` (g / N for the mean). Exp: libm's (ExpOp), or the CPU's vector loops' for float
// (ExpNonPositiveOp: x - lse <= 0).
template <class T, class Exp = ExpOp>
MG_HD T cross_entropy_grad(T x, T lse, bool is_target, T scale, Exp exp = {}) {
  return (exp(x - lse) - (is_target ? T(1) : T(0))) * scale;
}

}  // namespace mg::kernels
