// autograd/norm_ops.cpp — batch_norm and layer_norm over the fused kernels of kernels/norm.h.
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
// It records one node (inputs input, weight, bias) whose backward is kernels::batch_norm_backward
// (the formulas are in kernels/norm.h): with batch statistics the gradient of x flows through the
// mean and variance too; running statistics are constants. It computes in the input's dtype
// (Float32 or Float64); parameters and running stats of another floating dtype are converted.
// layer_norm: statistics over the trailing dims given by normalized_shape, per row of the input
// read as (R, D) (D the product of normalized_shape); one node whose backward is
// kernels::layer_norm_backward, from the row means and 1 / sqrt(var + eps) its forward kept.
// Parameters of another floating dtype than the input are converted, as in batch_norm.
// Under create_graph both backwards are the same formulas as differentiable ops on the live
// input and weight (normalize_backward), so second derivatives flow through them.
#include <vector>

#include "multigrad/autograd/derivatives.h"
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/kernels/norm.h"

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

// The gradients of normalize()'s input, weight and bias (those asked for) as differentiable ops,
// for create_graph. x and w are live (tape.h's live_input); the statistics are x's over `dims`,
// recomputed, or the constants mean and var (running statistics) when they are defined.
// stat_shape: the shape mean and var broadcast as (normalized_shape, or (1, C, 1, ...));
// param_shape: weight's and bias's.
TensorList normalize_backward(const Tensor& g, const Tensor& x, const Tensor& w, const std::vector<bool>& need,
                              const std::vector<int64_t>& dims, const Shape& stat_shape, const Shape& param_shape,
                              double eps, const Tensor& running_mean = Tensor(), const Tensor& running_var = Tensor()) {
  const bool batch_stats = !running_mean.defined();
  const Tensor gx_hat = w.defined() ? g * w.reshape(stat_shape) : g;
  Tensor x_hat, rstd;
  if ((batch_stats && need[0]) || need[1]) {
    const Tensor centered = x - (batch_stats ? mean(x, dims, true) : running_mean.reshape(stat_shape));
    const Tensor var = batch_stats ? mean(centered * centered, dims, true) : running_var.reshape(stat_shape);
    rstd = 1.0 / sqrt(var + eps);
    x_hat = centered * rstd;
  } else {
    rstd = 1.0 / sqrt(running_var.reshape(stat_shape) + eps);
  }
  TensorList result(3);
  if (need[0])
    result[0] = batch_stats ? rstd * (gx_hat - mean(gx_hat, dims, true) - x_hat * mean(gx_hat * x_hat, dims, true))
                            : gx_hat * rstd;
  if (need[1]) result[1] = detail::sum_to(g * x_hat, stat_shape).reshape(param_shape);
  if (need[2]) result[2] = detail::sum_to(g, stat_shape).reshape(param_shape);
  return result;
}

// t cut from the tape as a contiguous tensor of `dtype` (a kernel operand), or undefined.
Tensor operand(const Tensor& t, DType dtype) {
  return t.defined() ? detail::contiguous_as(t.detach(), dtype) : Tensor();
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
  const int64_t count = input.numel() / channels;  // values per channel
  MG_CHECK(!training || count > 1, "batch_norm: expected more than 1 value per channel when training, got input size ",
           input.shape());
  check_arithmetic_dtype(input.dtype(), "batch_norm");

  // The kernels' operands, cut from the tape: this op records itself as one node.
  const DType dtype = input.dtype();
  const Tensor x = operand(input, dtype);  // (N, C, ...)
  const Tensor w = operand(weight, dtype), b = operand(bias, dtype);  // (C) or undefined
  Tensor mean, var;  // (C): the batch statistics, or the running ones
  if (batch_stats) {
    mean = Tensor::empty({channels}, x.options());
    var = Tensor::empty({channels}, x.options());
    kernels::batch_norm_stats(x, mean, var);
    if (training && running_mean.defined()) {
      NoGradGuard no_grad;
      const Tensor unbiased = var * (double(count) / double(count - 1));
      copy_(running_mean, running_mean * (1.0 - momentum) + mean * momentum);
      copy_(running_var, running_var * (1.0 - momentum) + unbiased * momentum);
    }
  } else {  // copies: a later training step updates the running stats in place before this backward
    mean = clone(operand(running_mean, dtype));
    var = clone(operand(running_var, dtype));
  }
  return detail::differentiable(
      "batch_norm", {&input, &weight, &bias},
      [&] {
        Tensor out = Tensor::empty(x.shape(), x.options());  // (N, C, ...)
        kernels::batch_norm_forward(x, mean, var, w, b, eps, out);
        return out;
      },
      [&] {
        const bool need_x = input.requires_grad(), need_w = weight.defined() && weight.requires_grad();
        const bool need_b = bias.defined() && bias.requires_grad();
        // x is read for grad_weight, and for grad_x only with batch statistics.
        const bool keep_x = need_w || (need_x && batch_stats);
        return [need_x, need_w, need_b, batch_stats, eps, saved_x = keep_x ? x : Tensor(), mean, var, w,
                param_shape](const Tensor& grad, const Tensor&) {
          if (is_grad_enabled()) {  // create_graph
            std::vector<int64_t> dims{0};
            for (int64_t d = 2; d < grad.dim(); ++d) dims.push_back(d);
            return normalize_backward(to(grad, mean.dtype()), live_input(saved_x, 0), live_input(w, 1),
                                      {need_x, need_w, need_b}, dims, param_shape, {mean.size(0)}, eps,
                                      batch_stats ? Tensor() : mean, batch_stats ? Tensor() : var);
          }
          const Tensor g = detail::contiguous_as(grad, mean.dtype());  // (N, C, ...)
          const Shape channels{mean.size(0)};
          TensorList result(3);
          if (need_x) result[0] = Tensor::empty(g.shape(), g.options());
          if (need_w) result[1] = Tensor::empty(channels, g.options());
          if (need_b) result[2] = Tensor::empty(channels, g.options());
          kernels::batch_norm_backward(g, saved_x, mean, var, w, eps, batch_stats, result[0], result[1], result[2]);
          return result;
        };
      },
      Saves::Inputs, true);
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

  // Nothing to normalise: as in batch_norm, the empty result keeps weight and bias in the graph.
  if (input.numel() == 0) return normalize(input, ones({}, input.options()), weight, bias, 0.0, normalized_shape);
  check_arithmetic_dtype(input.dtype(), "layer_norm");

  const DType dtype = input.dtype();
  const int64_t d = numel_of(normalized_shape), rows = input.numel() / d;
  const auto as_row = [&](const Tensor& t) { return t.defined() ? operand(t, dtype).view({d}) : t; };
  const Tensor x = operand(input, dtype);                // (..., normalized_shape): (R, D)
  const Tensor w = as_row(weight), b = as_row(bias);     // (D) or undefined
  const Tensor row_mean = Tensor::empty({rows}, x.options()), row_rstd = Tensor::empty({rows}, x.options());  // (R)
  return detail::differentiable(
      "layer_norm", {&input, &weight, &bias},
      [&] {
        Tensor out = Tensor::empty(x.shape(), x.options());
        kernels::layer_norm_forward(x, w, b, eps, out, row_mean, row_rstd);
        return out;
      },
      [&] {
        const bool need_x = input.requires_grad(), need_w = weight.defined() && weight.requires_grad();
        const bool need_b = bias.defined() && bias.requires_grad();
        return [need_x, need_w, need_b, x, w, row_mean, row_rstd, d, normalized_shape, eps](const Tensor& grad,
                                                                                              const Tensor&) {
          if (is_grad_enabled()) {  // create_graph
            std::vector<int64_t> dims;
            for (int64_t i = grad.dim() - int64_t(normalized_shape.size()); i < grad.dim(); ++i) dims.push_back(i);
            return normalize_backward(to(grad, x.dtype()), live_input(x, 0),
                                      live_input(w.defined() ? w.view(normalized_shape) : w, 1),
                                      {need_x, need_w, need_b}, dims, normalized_shape, normalized_shape, eps);
          }
          const Tensor g = detail::contiguous_as(grad, x.dtype());  // (..., normalized_shape)
          TensorList result(3);
          if (need_x) result[0] = Tensor::empty(g.shape(), g.options());
          if (need_w) result[1] = Tensor::empty({d}, g.options());
          if (need_b) result[2] = Tensor::empty({d}, g.options());
          kernels::layer_norm_backward(g, x, row_mean, row_rstd, w, result[0], result[1], result[2]);
          for (size_t i : {1, 2})
            if (result[i].defined()) result[i] = result[i].view(normalized_shape);
          return result;
        };
      },
      Saves::Inputs, true);
}

}  // namespace mg
