// autograd/norm_ops.cpp — batch_norm and layer_norm, composed from primitives (mean, sub, mul,
// div, sqrt, broadcasting), so their backward is the chain of the primitives' derivatives.
//
//   y = (x - mean) / sqrt(var + eps) * weight + bias,   var biased (divides by the count)
//
// batch_norm (input (N, C, ...)): statistics per channel over every dim but 1. In training it
// uses the batch statistics and, when running stats are given, updates them in place under
// NoGradGuard: running = (1 - momentum) * running + momentum * batch, with the unbiased variance
// (count / (count - 1)) for running_var, as PyTorch does. In eval it uses the running stats.
// Without running stats it uses the batch statistics in eval too (PyTorch's
// track_running_stats=False). Training with one value per channel is an error, as in PyTorch;
// an empty input returns an empty result and leaves the running stats alone.
// layer_norm: statistics over the trailing dims given by normalized_shape.
#include <vector>

#include "autograd/factory.h"
#include "autograd/nn_ops.h"
#include "autograd/op_common.h"
#include "autograd/ops.h"
#include "autograd/tape.h"

namespace mg {
namespace {

// An optional per-channel (or per-feature) tensor: undefined, or of `shape` on the input's device.
void check_param(const Tensor& param, const Tensor& input, const Shape& shape, const char* what, const char* op) {
  if (!param.defined()) return;
  MG_CHECK(param.shape() == shape, op, ": ", what, " has shape ", param.shape(), ", expected ", shape);
  detail::check_same_device(input, param, op);
}

// (x - mean) / sqrt(var + eps), then * weight + bias where defined; mean and var broadcast.
Tensor normalize(const Tensor& centered, const Tensor& var, const Tensor& weight, const Tensor& bias, double eps,
                 const Shape& param_shape) {
  Tensor y = centered / sqrt(var + eps);
  if (weight.defined()) y = y * weight.reshape(param_shape);
  if (bias.defined()) y = y + bias.reshape(param_shape);
  return y;
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  detail::check_defined(input, "batch_norm");
  MG_CHECK(input.dim() >= 2, "batch_norm: expected input of shape (N, C, ...), got ", input.shape());
  MG_CHECK(is_floating(input.dtype()), "batch_norm: expected a floating input, got ", input.dtype());
  const int64_t channels = input.size(1);
  check_param(running_mean, input, {channels}, "running_mean", "batch_norm");
  check_param(running_var, input, {channels}, "running_var", "batch_norm");
  check_param(weight, input, {channels}, "weight", "batch_norm");
  check_param(bias, input, {channels}, "bias", "batch_norm");
  MG_CHECK(running_mean.defined() == running_var.defined(),
           "batch_norm: running_mean and running_var must both be given or both be undefined");

  Shape param_shape(size_t(input.dim()), 1);  // (1, C, 1, ...)
  param_shape[1] = channels;
  // Nothing to normalise: x / sqrt(1) keeps weight and bias in the graph of the empty result.
  if (input.numel() == 0) return normalize(input, ones({}, input.options()), weight, bias, 0.0, param_shape);

  const bool batch_stats = training || !running_mean.defined();
  if (!batch_stats) {
    const Tensor centered = input - running_mean.reshape(param_shape);
    return normalize(centered, running_var.reshape(param_shape), weight, bias, eps, param_shape);
  }

  const int64_t count = input.numel() / channels;  // values per channel
  MG_CHECK(!training || count > 1, "batch_norm: expected more than 1 value per channel when training, got input size ",
           input.shape());
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  const Tensor batch_mean = mean(input, dims, true);  // (1, C, 1, ...)
  const Tensor centered = input - batch_mean;
  const Tensor batch_var = mean(centered * centered, dims, true);
  if (training && running_mean.defined()) {
    NoGradGuard no_grad;
    const Tensor unbiased = batch_var.reshape({channels}) * (double(count) / double(count - 1));
    copy_(running_mean, running_mean * (1.0 - momentum) + batch_mean.reshape({channels}) * momentum);
    copy_(running_var, running_var * (1.0 - momentum) + unbiased * momentum);
  }
  return normalize(centered, batch_var, weight, bias, eps, param_shape);
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  detail::check_defined(input, "layer_norm");
  MG_CHECK(is_floating(input.dtype()), "layer_norm: expected a floating input, got ", input.dtype());
  const int64_t k = int64_t(normalized_shape.size());
  MG_CHECK(k >= 1 && k <= input.dim() &&
               Shape(input.shape().end() - k, input.shape().end()) == normalized_shape,
           "layer_norm: normalized_shape ", normalized_shape, " does not match the trailing dims of input shape ",
           input.shape());
  check_param(weight, input, normalized_shape, "weight", "layer_norm");
  check_param(bias, input, normalized_shape, "bias", "layer_norm");

  std::vector<int64_t> dims;
  for (int64_t d = input.dim() - k; d < input.dim(); ++d) dims.push_back(d);
  const Tensor centered = input - mean(input, dims, true);
  const Tensor var = mean(centered * centered, dims, true);
  return normalize(centered, var, weight, bias, eps, normalized_shape);
}

}  // namespace mg
