// autograd/nn_ops.h — the differentiable ops of neural networks (torch.nn.functional's):
// losses, convolution, pooling, normalisation, dropout, embedding, and splitting.
// Semantics, defaults and error rules follow PyTorch; each backward lives beside its forward.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "multigrad/core/random.h"
#include "multigrad/core/tensor.h"

namespace mg {

// ---- losses (mean reduction) ----
// Fused log-softmax + negative log-likelihood: mean over n of logsumexp(logits[n]) -
// logits[n, targets[n]]. logits (N, C) floating, targets (N) Int64 in [0, C); a target out of
// range is an error naming it and C.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets);
// cross_entropy over every position: logits (..., C) and targets (...) flattened to (N, C) and
// (N), as nanoGPT's F.cross_entropy(logits.view(-1, C), targets.view(-1)); (N, C) and (N) pass as
// they are. A language model's (B, T, V) logits with (B, T) next tokens, or a classifier's.
Tensor cross_entropy_flat(const Tensor& logits, const Tensor& targets);
// mean((input - target)^2); shapes must match.
Tensor mse_loss(const Tensor& input, const Tensor& target);

// ---- linear ----
// torch.nn.functional.linear: input (..., in) @ weight^T + bias, with weight (out, in) and bias
// (out) or undefined, all of one floating dtype. One node, whose backward writes the weight's
// and bias's gradients into their destinations when they have one (autograd/tape.h).
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());

// ---- convolution and pooling, NCHW ----
struct Conv2dOptions {
  std::array<int64_t, 2> stride = {1, 1};
  std::array<int64_t, 2> padding = {0, 0};
  std::array<int64_t, 2> dilation = {1, 1};
  int64_t groups = 1;
};
// input (N, C, H, W), weight (O, C / groups, kH, kW), bias (O) or undefined.
// CPU: im2col + GEMM; CUDA: cuDNN.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dOptions& options = {});

struct Pool2dOptions {
  std::array<int64_t, 2> kernel_size = {2, 2};
  std::array<int64_t, 2> stride = {0, 0};  // {0, 0}: equal to kernel_size (PyTorch's default)
  std::array<int64_t, 2> padding = {0, 0};
};
// input (N, C, H, W); floor mode output sizes; max_pool2d pads with -inf, avg_pool2d counts
// padding in the divisor (count_include_pad=True, PyTorch's default).
Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options = {});
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options = {});

// ---- normalisation ----
// input (N, C, ...); statistics over every dim but 1. In training, uses the batch statistics
// and updates running_mean/running_var in place (momentum; unbiased variance for the running
// estimate) when they are defined; in eval, uses the running statistics. weight, bias (C) or
// undefined.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);
// Normalises over the trailing dims given by normalized_shape; weight, bias of that shape or
// undefined.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// ---- attention ----
// torch.nn.functional.scaled_dot_product_attention without dropout or a mask argument:
// softmax(q @ k^T * scale) @ v over query (..., L, E), key (..., S, E), value (..., S, Ev) ->
// (..., L, Ev), with one set of batch dims; scale defaults to 1/sqrt(E). is_causal hides key j
// from query i when j > i. Runs the fused kernels (kernels/attention.h: no (L, S) matrix kept for
// backward); 4-d input (B, H, L, E) gets an output laid out as (B, L, H, Ev), transposed.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);
// The same from primitives (matmul, where, softmax), as PyTorch's math backend: the reference the
// fused kernels are tested against (autograd/attention_ops.cpp).
Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal = false,
                                         std::optional<double> scale = std::nullopt);

// ---- regularisation and lookup ----
// Zeroes each element with probability p (Philox, so the mask is the same on every device for
// the same seed) and scales the rest by 1 / (1 - p); identity when !training or p == 0.
Tensor dropout(const Tensor& input, double p, bool training);
// `input` is the slice `slice` of a tensor (core/random.h's DrawSlice): the mask is that slice of
// the mask dropout draws for the whole tensor, and the generator advances as for the whole
// (sequence parallelism's dropout on a rank's positions).
Tensor dropout(const Tensor& input, double p, bool training, const DrawSlice& slice);
// weight (V, D), indices Int64 of any shape -> (*indices.shape, D). An index outside [0, V) is
// an error naming it and V, on CPU and on CUDA.
Tensor embedding(const Tensor& weight, const Tensor& indices);

// ---- splitting (views) ----
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// Pieces of the given sizes, which add up to x's size along dim.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);

}  // namespace mg
