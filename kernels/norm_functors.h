// kernels/norm_functors.h — the math of the fused batch and layer norms (kernels/norm.h), written
// once for kernels/cpu/norm.cpp and kernels/cuda/norm.cu.
//
// Both passes over the elements apply a small per-channel functor: the backends build it from
// the channel's statistics (and, in the backward, its sums), then call it on every element of
// the channel. Per-channel constants are computed in T from T statistics, except those made
// from the float64 sums, which are divided in float64 and rounded once.
#pragma once

#include <cstdint>

#include "multigrad/core/macros.h"
#include "multigrad/kernels/functors.h"

namespace mg::kernels {

template <class T>
MG_HD T batch_norm_invstd(T var, T eps) {
  return T(1) / m_sqrt(var + eps);
}

// The forward on one channel: y = (x - mean) * scale + shift, scale = invstd * w, shift = b.
// Subtracting the mean first (rather than x * scale + (b - mean * scale)) keeps the digits of
// x - mean when the mean is large.
template <class T>
struct BatchNormAffine {
  T mean, scale, shift;
  MG_HD T operator()(T x) const { return (x - mean) * scale + shift; }
};

// Channel c's forward; weight and bias (C), or null for 1 and 0.
template <class T>
MG_HD BatchNormAffine<T> batch_norm_affine(const T* mean, const T* var, const T* weight, const T* bias, T eps,
                                           int64_t c) {
  const T w = weight != nullptr ? weight[c] : T(1);
  return {mean[c], batch_norm_invstd(var[c], eps) * w, bias != nullptr ? bias[c] : T(0)};
}

// The two sums of one channel the backward needs, over its M values, in float64.
struct BatchNormGradSums {
  double g = 0;   // sum g             (= grad_bias)
  double gc = 0;  // sum g * (x - mean) (= grad_weight / invstd)
  MG_HD BatchNormGradSums& operator+=(const BatchNormGradSums& other) {
    g += other.g;
    gc += other.gc;
    return *this;
  }
};

// grad_weight[c] = sum g * xhat = invstd * sum g * (x - mean).
template <class T>
MG_HD T batch_norm_grad_weight(const BatchNormGradSums& sums, T invstd) {
  return T(sums.gc * double(invstd));
}

// grad_x on one channel. With batch statistics:
//   w * invstd * (g - sum g / M - xhat * sum (g * xhat) / M)
//   = (g - mean_g - (x - mean) * k) * scale,  mean_g = sum g / M,  k = invstd^2 * sum g (x - mean) / M
// With running statistics (constants): g * scale, and x is not read.
template <class T>
struct BatchNormGradInput {
  T mean, scale, mean_g, k;
  MG_HD T operator()(T g, T x) const { return (g - mean_g - (x - mean) * k) * scale; }
  MG_HD T operator()(T g) const { return g * scale; }
};

// Channel c's grad_x; `sums` is used only with batch statistics (count = M).
template <class T>
MG_HD BatchNormGradInput<T> batch_norm_grad_input(T mean, T invstd, T w, const BatchNormGradSums& sums,
                                                  int64_t count) {
  const double inv = double(invstd);
  return {mean, invstd * w, T(sums.g / double(count)), T(inv * inv * sums.gc / double(count))};
}

// ---- layer norm ----

// One row's statistics from its float64 sums over D values: mean = sum x / D, rstd =
// 1 / sqrt(sum (x - mean)^2 / D + eps).
template <class T>
struct LayerNormRow {
  T mean, rstd;
  MG_HD T xhat(T x) const { return (x - mean) * rstd; }
  // y = xhat * w + b
  MG_HD T operator()(T x, T w, T b) const { return xhat(x) * w + b; }
};

template <class T>
MG_HD LayerNormRow<T> layer_norm_row(double sum, double sum_sq_dev, int64_t d, T eps) {
  return {T(sum / double(d)), batch_norm_invstd(T(sum_sq_dev / double(d)), eps)};
}

// grad_x on one row, from its float64 sums sum h and sum h * xhat (h = g * w):
//   rstd * (h - sum h / D - xhat * sum (h * xhat) / D)
template <class T>
struct LayerNormGradRow {
  LayerNormRow<T> row;
  T mean_h, mean_hx;
  MG_HD T operator()(T g, T x, T w) const { return (g * w - mean_h - row.xhat(x) * mean_hx) * row.rstd; }
};

template <class T>
MG_HD LayerNormGradRow<T> layer_norm_grad_row(LayerNormRow<T> row, double sum_h, double sum_hx, int64_t d) {
  return {row, T(sum_h / double(d)), T(sum_hx / double(d))};
}

}  // namespace mg::kernels
