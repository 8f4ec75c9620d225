// kernels/norm.cpp — kernels/norm.h: checks the layouts, dtypes and that the batch- and layer-norm
// tensors share one device, then forwards to kernels/cpu/norm.cpp or kernels/cuda/norm.cu (on the
// device's current stream). The backends rely on these checks and do not repeat them.
#include "multigrad/kernels/norm.h"

#include <initializer_list>
#include <utility>

#include "multigrad/kernels/device_dispatch.h"

namespace mg::kernels {
namespace {

// `ref` is a contiguous (N, C, ...) Float32 or Float64 tensor.
void check_input(const Tensor& ref, const char* what, const char* op) {
  MG_CHECK(ref.dim() >= 2 && ref.is_contiguous(), op, ": ", what, " must be contiguous (N, C, ...), got shape ",
           ref.shape(), " strides ", ref.strides());
  MG_CHECK(ref.dtype() == DType::Float32 || ref.dtype() == DType::Float64, op, ": ", what,
           " must be Float32 or Float64, got ", ref.dtype());
}

// t (undefined when `optional`) is contiguous `shape` of ref's dtype.
void check_like(const Tensor& t, const Tensor& ref, const Shape& shape, const char* what, const char* op,
                bool optional) {
  if (optional && !t.defined()) return;
  MG_CHECK(t.defined(), op, ": ", what, " is undefined");
  MG_CHECK(t.dtype() == ref.dtype() && t.is_contiguous() && t.shape() == shape, op, ": ", what,
           " must be contiguous ", ref.dtype(), " ", shape, ", got ", t.shape(), " ", t.dtype(), " strides ",
           t.strides());
}

// mean and var, and the optional per-channel tensors of `ref` (N, C, ...).
void check_channels(const Tensor& ref, const Tensor& mean, const Tensor& var,
                    std::initializer_list<std::pair<const char*, const Tensor*>> optional, const char* op) {
  const Shape channels{ref.size(1)};
  check_like(mean, ref, channels, "mean", op, false);
  check_like(var, ref, channels, "var", op, false);
  for (const auto& [what, t] : optional) check_like(*t, ref, channels, what, op, true);
}

// x holds R = mean.numel() rows of D values: R divides its element count (R = 0: nothing).
void check_rows(const Tensor& x, const Tensor& mean, const Tensor& rstd, const char* op) {
  MG_CHECK(x.is_contiguous() && (x.dtype() == DType::Float32 || x.dtype() == DType::Float64), op,
           ": x must be contiguous Float32 or Float64, got ", x.dtype(), " strides ", x.strides());
  const int64_t rows = mean.numel();
  MG_CHECK(rows == 0 ? x.numel() == 0 : x.numel() % rows == 0, op, ": ", rows, " rows do not divide x of shape ",
           x.shape());
  check_like(mean, x, {rows}, "mean", op, false);
  check_like(rstd, x, {rows}, "rstd", op, false);
}

int64_t row_length(const Tensor& x, const Tensor& mean) { return mean.numel() > 0 ? x.numel() / mean.numel() : 0; }

}  // namespace

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var) {
  const Device device = one_device("batch_norm_stats", {&x, &mean, &var});
  check_input(x, "x", "batch_norm_stats");
  check_channels(x, mean, var, {}, "batch_norm_stats");
  MG_RUN_ON_DEVICE(device, "batch_norm_stats", batch_norm_stats, x, mean, var);
}

void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                        const Tensor& bias, double eps, const Tensor& out) {
  const Device device = one_device("batch_norm_forward", {&x, &mean, &var, &weight, &bias, &out});
  check_input(x, "x", "batch_norm_forward");
  check_channels(x, mean, var, {{"weight", &weight}, {"bias", &bias}}, "batch_norm_forward");
  check_like(out, x, x.shape(), "out", "batch_norm_forward", false);
  MG_RUN_ON_DEVICE(device, "batch_norm_forward", batch_norm_forward, x, mean, var, weight, bias, eps, out);
}

void batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& var,
                         const Tensor& weight, double eps, bool batch_stats, const Tensor& grad_x,
                         const Tensor& grad_weight, const Tensor& grad_bias) {
  const char* op = "batch_norm_backward";
  const Device device = one_device(op, {&grad_out, &x, &mean, &var, &weight, &grad_x, &grad_weight, &grad_bias});
  check_input(grad_out, "grad_out", op);
  const bool needs_x = grad_weight.defined() || (batch_stats && grad_x.defined());
  check_like(x, grad_out, grad_out.shape(), "x", op, !needs_x);
  check_like(grad_x, grad_out, grad_out.shape(), "grad_x", op, true);
  check_channels(grad_out, mean, var, {{"weight", &weight}, {"grad_weight", &grad_weight}, {"grad_bias", &grad_bias}},
                 op);
  MG_RUN_ON_DEVICE(device, op, batch_norm_backward, grad_out, x, mean, var, weight, eps, batch_stats, grad_x,
                   grad_weight, grad_bias);
}

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                        const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm_forward";
  const Device device = one_device(op, {&x, &weight, &bias, &out, &mean, &rstd});
  check_rows(x, mean, rstd, op);
  const Shape row{row_length(x, mean)};
  check_like(weight, x, row, "weight", op, true);
  check_like(bias, x, row, "bias", op, true);
  check_like(out, x, x.shape(), "out", op, false);
  MG_RUN_ON_DEVICE(device, op, layer_norm_forward, x, weight, bias, eps, out, mean, rstd);
}

void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias) {
  const char* op = "layer_norm_backward";
  const Device device = one_device(op, {&grad_out, &x, &mean, &rstd, &weight, &grad_x, &grad_weight, &grad_bias});
  check_rows(grad_out, mean, rstd, op);
  const Shape row{row_length(grad_out, mean)};
  check_like(x, grad_out, grad_out.shape(), "x", op, false);
  check_like(weight, grad_out, row, "weight", op, true);
  check_like(grad_x, grad_out, grad_out.shape(), "grad_x", op, true);
  check_like(grad_weight, grad_out, row, "grad_weight", op, true);
  check_like(grad_bias, grad_out, row, "grad_bias", op, true);
  MG_RUN_ON_DEVICE(device, op, layer_norm_backward, grad_out, x, mean, rstd, weight, grad_x, grad_weight, grad_bias);
}

}  // namespace mg::kernels
