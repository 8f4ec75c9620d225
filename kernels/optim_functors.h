// kernels/optim_functors.h — the per-element update math of the optimizers, written once.
//
// kernels/cpu/optim.cpp and kernels/cuda/optim.cu apply these functors to every element i of a
// parameter, so the two backends cannot disagree about the formulas. Scalars that depend only
// on the step (bias corrections, step size) are computed once on the host, in double, and
// arrive here converted to the parameter's element type T; the per-element arithmetic is in T,
// as in PyTorch's single-tensor implementations.
//
// Every pointer is to a contiguous buffer of the parameter's numel; state buffers are updated
// in place (=), the parameter too.
#pragma once

#include <cmath>
#include <cstdint>

#include "multigrad/core/macros.h"
#include "multigrad/kernels/functors.h"
#include "multigrad/kernels/optim.h"

namespace mg::kernels {

// torch.optim.SGD, for one element (g the gradient, p the parameter, b the momentum buffer):
//   g = g + weight_decay * p                      when weight_decay != 0
//   b = g                                         on the buffer's first step
//   b = momentum * b + (1 - dampening) * g        afterwards          } when momentum != 0
//   g = nesterov ? g + momentum * b : b                                }
//   p = p - lr * g
// `buf` is null when momentum == 0.
template <class T>
struct SgdUpdate {
  T lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;

  MG_HD void operator()(T* param, const T* grad, T* buf, int64_t i) const {
    T g = grad[i];
    if (weight_decay != T(0)) g = g + weight_decay * param[i];
    if (buf != nullptr) {
      T b = first_step ? g : momentum * buf[i] + (T(1) - dampening) * g;
      buf[i] = b;
      g = nesterov ? g + momentum * b : b;
    }
    param[i] = param[i] - lr * g;
  }
};

// torch.optim.Adam and AdamW, for one element at step t (counted from 1):
//   Adam:  g = g + weight_decay * p               (L2 penalty folded into the gradient)
//   AdamW: p = p * (1 - lr * weight_decay)        (decoupled decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   amsgrad: v_max = max(v_max, v), and v_max replaces v below
//   p = p - step_size * m / (sqrt(v) / bias_correction2_sqrt + eps)
// with step_size = lr / (1 - beta1^t) and bias_correction2_sqrt = sqrt(1 - beta2^t) from the
// host. eps is added after the square root of the bias-corrected second moment, as PyTorch does.
// `v_max` is null unless amsgrad.
template <class T>
struct AdamUpdate {
  T beta1, beta2, eps, weight_decay;
  T step_size;              // lr / (1 - beta1^t)
  T bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  T decay_factor;           // AdamW: 1 - lr * weight_decay
  bool decoupled;           // AdamW

  MG_HD void operator()(T* param, const T* grad, T* m, T* v, T* v_max, int64_t i) const {
    T g = grad[i];
    T p = param[i];
    if (weight_decay != T(0)) {
      if (decoupled) p = p * decay_factor;
      else g = g + weight_decay * p;
    }
    T m_i = beta1 * m[i] + (T(1) - beta1) * g;
    T v_i = beta2 * v[i] + (T(1) - beta2) * g * g;
    m[i] = m_i;
    v[i] = v_i;
    if (v_max != nullptr) {
      v_i = v_max[i] > v_i ? v_max[i] : v_i;  // NaN in v propagates, as torch.maximum does
      v_max[i] = v_i;
    }
    T denom = m_sqrt(v_i) / bias_correction2_sqrt + eps;
    param[i] = p - step_size * (m_i / denom);
  }
};

// ---- host side: the functors for one step, from the hyper-parameters ----

template <class T>
SgdUpdate<T> make_sgd_update(const SgdHyper& h) {
  return {T(h.lr), T(h.momentum), T(h.dampening), T(h.weight_decay), h.nesterov, h.first_step};
}

template <class T>
AdamUpdate<T> make_adam_update(const AdamHyper& h) {
  const double step = double(h.step);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, step);
  return {T(h.beta1), T(h.beta2), T(h.eps), T(h.weight_decay), T(h.lr / bias_correction1),
          T(std::sqrt(bias_correction2)), T(1.0 - h.lr * h.weight_decay), h.decoupled};
}

}  // namespace mg::kernels
