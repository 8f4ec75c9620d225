// kernels/norm.h — fused batch and layer normalisation: the statistics, the normalising forward
// and the whole backward in a few passes, instead of a chain of broadcast primitives.
//
// ---- batch norm ----
// x (N, C, ...) is viewed as contiguous (N, C, S), S the product of the dims after 1 (S = 1 for
// (N, C) input); channel c holds M = N * S values. With invstd = 1 / sqrt(var + eps), w and b
// the weight and bias (1 and 0 when undefined), g = dL/dy:
//   stats:    mean[c] = sum x / M,  var[c] = sum (x - mean)^2 / M        (biased; two passes)
//   forward:  y = (x - mean) * (invstd * w) + b
//   backward: xhat = (x - mean) * invstd
//             grad_bias[c]   = sum g
//             grad_weight[c] = sum g * xhat
//             grad_x = w * invstd * (g - sum g / M - xhat * sum (g * xhat) / M)   batch statistics
//             grad_x = w * invstd * g                                         running statistics
// With batch statistics (training) mean and var depend on every x of the channel, hence the two
// sums in grad_x; running statistics are constants. The per-element math is in norm_functors.h.
//
// Contract (checked by kernels/norm.cpp, which forwards to kernels/cpu/norm.cpp or
// kernels/cuda/norm.cu): x, out, grad_out and grad_x contiguous (N, C, ...) of one shape, Float32
// or Float64; mean, var, weight, bias, grad_weight, grad_bias contiguous (C) of that dtype; one
// device. weight and bias may be undefined (1 and 0). In the backward an undefined gradient is
// not computed, and x is read only for grad_weight and for grad_x with batch statistics (it may
// be undefined otherwise). Outputs are assigned (=).
// Sums accumulate in float64; each channel is summed in a fixed order on the CPU, so results do
// not depend on the thread count. M = 0 gives NaN statistics.
//
// ---- layer norm ----
// x is viewed as contiguous (R, D): R rows of the D values that normalized_shape covers. With
// rstd = 1 / sqrt(var + eps), w and b of D values (1 and 0 when undefined), g = dL/dy:
//   forward:  mean[r] = sum x / D,  var[r] = sum (x - mean)^2 / D (biased; two passes)
//             y = (x - mean) * rstd * w + b;  mean and rstd (R) are kept for the backward
//   backward: xhat = (x - mean) * rstd,  h = g * w
//             grad_x = rstd * (h - sum h / D - xhat * sum (h * xhat) / D)   (sums over the row)
//             grad_weight[d] = sum over rows of g * xhat,  grad_bias[d] = sum over rows of g
// Contract (kernels/norm.cpp checks it): x, out, grad_out, grad_x contiguous of one shape with
// R * D elements, Float32 or Float64; weight, bias, grad_weight, grad_bias contiguous (D) and
// mean, rstd contiguous (R), of that dtype; one device; weight and bias may be undefined, and an
// undefined gradient is not computed. Outputs are assigned (=). Row sums accumulate in float64;
// the column sums of grad_weight and grad_bias too, in two levels on both backends: each block of
// kLayerNormRowBlock rows sums its rows in order into float64 partials, then each column adds its
// blocks' partials in order. The order depends on the shape alone, so the bits do not depend on
// the thread count or the grid, and CUDA's (its multiply-adds unfused) are the CPU's.
#pragma once

#include "multigrad/core/tensor.h"

#if MG_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mg::kernels {

// Rows per block of the layer-norm backward's column sums (above): the partials take (R / 32, 2, D)
// doubles (1 MiB for a (4096, 1024) input), and a block is a CPU thread's work for D >= 256.
inline constexpr int64_t kLayerNormRowBlock = 32;

// The (N, C, S) view of a contiguous (N, C, ...) tensor.
struct ChannelShape {
  int64_t n, c, s;
  int64_t count() const { return n * s; }  // M, values per channel
};
inline ChannelShape channel_shape(const Tensor& x) {
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var);
void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                        const Tensor& bias, double eps, const Tensor& out);
void batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& var,
                         const Tensor& weight, double eps, bool batch_stats, const Tensor& grad_x,
                         const Tensor& grad_weight, const Tensor& grad_bias);

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                        const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias);

namespace cpu {
void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var);
void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                        const Tensor& bias, double eps, const Tensor& out);
void batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& var,
                         const Tensor& weight, double eps, bool batch_stats, const Tensor& grad_x,
                         const Tensor& grad_weight, const Tensor& grad_bias);
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                        const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias);
}  // namespace cpu

#if MG_WITH_CUDA
namespace cuda {
void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var, cudaStream_t stream);
void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                        const Tensor& bias, double eps, const Tensor& out, cudaStream_t stream);
void batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& var,
                         const Tensor& weight, double eps, bool batch_stats, const Tensor& grad_x,
                         const Tensor& grad_weight, const Tensor& grad_bias, cudaStream_t stream);
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                        const Tensor& mean, const Tensor& rstd, cudaStream_t stream);
void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace mg::kernels
