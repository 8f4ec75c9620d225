// autograd/matmul.cpp — torch.matmul and F.linear on top of one kernel, kernels::batched_matmul.
//
// Every rank combination becomes a batch of matrix products (B, M, K) @ (B, K, N):
//   - a 1-d left operand is a (1, K) row, a 1-d right operand a (K, 1) column; the dim added
//     is dropped from the result, so 1-d @ 1-d is a 0-d dot product;
//   - batch dims (all but the last two) broadcast; each operand's broadcast batch dims are
//     collapsed into one batch dim with one stride (0 where the operand is broadcast), which
//     works without a copy unless broadcasting produced strides that no single stride describes;
//   - (..., M, K) @ (K, N) with a viewable left operand is folded into one (prod(...) * M, K)
//     @ (K, N) product, one large GEMM instead of many small ones (a linear layer's case).
// The kernel reads each matrix as it lies in memory when BLAS can (row-major or transposed)
// and copies it otherwise; it also gives zeros when K is 0.
// Under bf16 autocast the nodes tell the kernel that their operands, and the gradients their
// backward multiplies, hold bfloat16 values (kernels::GemmInputs): both are rounded by
// autocast_lower's round_to nodes, whose backward rounds the gradient too.
#include <cstdint>

#include "multigrad/autograd/autocast.h"
#include "multigrad/autograd/derivatives.h"
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/kernels/kernels.h"

namespace mg {
namespace {

using kernels::GemmInputs;

// t (..., R, C), broadcast to batch + (R, C), as a (B, R, C) view with one batch stride.
Tensor batched_3d(const Tensor& t, const Shape& batch, int64_t batch_numel) {
  const int64_t rows = t.shape()[t.dim() - 2], cols = t.shape()[t.dim() - 1];
  Shape full = batch;
  full.push_back(rows);
  full.push_back(cols);
  Tensor expanded = detail::broadcast_to(t, full);
  const Shape batch_sizes(expanded.shape().begin(), expanded.shape().end() - 2);
  const Strides batch_strides(expanded.strides().begin(), expanded.strides().end() - 2);
  auto collapsed = detail::view_strides(batch_sizes, batch_strides, {batch_numel});
  if (!collapsed) expanded = contiguous(expanded);
  const int64_t batch_stride = collapsed ? (*collapsed)[0] : rows * cols;
  const int64_t n = expanded.dim();
  return expanded.as_strided({batch_numel, rows, cols},
                             {batch_stride, expanded.strides()[n - 2], expanded.strides()[n - 1]},
                             expanded.offset());
}

Tensor matmul_forward(const Tensor& a, const Tensor& b, GemmInputs inputs) {
  detail::check_defined(a, "matmul");
  detail::check_defined(b, "matmul");
  detail::check_same_device(a, b, "matmul");
  MG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least one dim, got shapes ",
           a.shape(), " and ", b.shape());
  const DType dtype = promote_types(a.dtype(), b.dtype(), "matmul");
  MG_CHECK(dtype != DType::Bool, "matmul: expected Float32, Float64 or Int64 operands, got Bool");
  check_arithmetic_dtype(dtype, "matmul");
  const int64_t k = a.shape().back();
  MG_CHECK(k == b.shape()[b.dim() == 1 ? 0 : b.dim() - 2], "matmul: shapes cannot be multiplied (", a.shape(),
           " and ", b.shape(), ")");

  const Tensor lhs = to(a.dim() == 1 ? unsqueeze(a, 0) : a, dtype);  // (..., M, K)
  const Tensor rhs = to(b.dim() == 1 ? unsqueeze(b, 1) : b, dtype);  // (..., K, N)
  const int64_t m = lhs.shape()[lhs.dim() - 2], n = rhs.shape()[rhs.dim() - 1];
  const Shape batch_a(lhs.shape().begin(), lhs.shape().end() - 2);
  const Shape batch_b(rhs.shape().begin(), rhs.shape().end() - 2);
  const Shape batch = batch_a == batch_b ? batch_a : broadcast_shapes(batch_a, batch_b, "matmul");
  Shape out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(m);
  if (b.dim() > 1) out_shape.push_back(n);

  Tensor out = Tensor::empty(out_shape, {dtype, a.device()});
  if (out.numel() == 0) return out;
  const int64_t batch_numel = numel_of(batch);
  if (rhs.dim() == 2 && lhs.dim() > 2) {
    const int64_t rows = batch_numel * m;
    if (auto strides = detail::view_strides(lhs.shape(), lhs.strides(), {rows, k})) {
      kernels::batched_matmul(lhs.as_strided({1, rows, k}, {0, (*strides)[0], (*strides)[1]}, lhs.offset()),
                              batched_3d(rhs, {}, 1),
                              out.as_strided({1, rows, n}, {rows * n, n, 1}, out.offset()), inputs);
      return out;
    }
  }
  kernels::batched_matmul(batched_3d(lhs, batch, batch_numel), batched_3d(rhs, batch, batch_numel),
                          out.as_strided({batch_numel, m, n}, {m * n, n, 1}, out.offset()), inputs);
  return out;
}

Tensor matrix_transpose(const Tensor& t) { return transpose(t, -1, -2); }

// Whether a 2-d operand lies column-major (a transposed view of a contiguous matrix, such as a
// linear layer's weight.transpose(0, 1)).
bool is_column_major(const Tensor& t) {
  return t.dim() == 2 && t.size(0) > 1 && t.size(1) > 1 && t.stride(0) == 1 && t.stride(1) >= t.size(0);
}

// With A = a as (..., M, K) and B = b as (..., K, N) (1-d operands get their dim back) and G
// the output gradient as (..., M, N): dA = G B^T and dB = A^T G, each summed over the batch
// dims its operand was broadcast along, then viewed in the operand's shape.
// A column-major 2-d operand gets its gradient in its own layout, as PyTorch's mm backward
// does: dB^T = G^T A computed row-major and returned transposed. For a linear layer, whose B is
// W^T, the gradient that reaches W is then contiguous, and becomes W.grad without a strided copy.
// `values`: the precision whose values the operands (and the output gradient) hold.
Tensor matmul_node(const Tensor& a, const Tensor& b, Precision values);

TensorList matmul_backward(const Tensor& g, const detail::SavedOperand& saved_a, const detail::SavedOperand& saved_b,
                           Precision values) {
  const auto matmul = [values](const Tensor& x, const Tensor& y) { return matmul_node(x, y, values); };
  const Tensor a = saved_a.values(), b = saved_b.values();
  const Tensor lhs = a.dim() == 1 ? unsqueeze(a, 0) : a;  // (..., M, K)
  const Tensor rhs = b.dim() == 1 ? unsqueeze(b, 1) : b;  // (..., K, N)
  Tensor grad = g;                                         // (..., M, N)
  if (b.dim() == 1) grad = unsqueeze(grad, grad.dim());
  if (a.dim() == 1) grad = unsqueeze(grad, grad.dim() - 1);
  Tensor ga, gb;
  if (saved_a.tensor().requires_grad()) {
    if (is_column_major(a) && rhs.dim() == 2) {
      ga = matrix_transpose(matmul(rhs, matrix_transpose(grad)));  // (B G^T)^T, (M, K) column-major
    } else {
      ga = reshape(detail::sum_to(matmul(grad, matrix_transpose(rhs)), lhs.shape()), a.shape());
    }
  }
  if (saved_b.tensor().requires_grad()) {
    if (rhs.dim() == 2) {
      // A shared weight (a linear layer's case): one (K, rows) @ (rows, N) product over every
      // batch row instead of a batch of products summed afterwards.
      // The row count spelt out: -1 cannot be inferred when K or N is 0.
      const int64_t k = lhs.shape().back(), n = rhs.shape().back();
      const int64_t rows = numel_of(Shape(lhs.shape().begin(), lhs.shape().end() - 1));
      const Tensor rows_a = reshape(lhs, {rows, k}), rows_g = reshape(grad, {rows, n});  // (rows, K), (rows, N)
      gb = is_column_major(b) ? matrix_transpose(matmul(matrix_transpose(rows_g), rows_a))  // (G^T A)^T
                              : matmul(matrix_transpose(rows_a), rows_g);
    } else {
      gb = detail::sum_to(matmul(matrix_transpose(lhs), grad), rhs.shape());
    }
    gb = reshape(gb, b.shape());
  }
  return {ga, gb};
}

Tensor matmul_node(const Tensor& a, const Tensor& b, Precision values) {
  const auto forward = [&] { return matmul_forward(a, b, detail::gemm_inputs(values)); };
  return detail::differentiable("matmul", {&a, &b}, forward, [&] {
    return [a = detail::SavedOperand(a, values), b = detail::SavedOperand(b, values),
            values](const Tensor& g, const Tensor&) { return matmul_backward(g, a, b, values); };
  }, Saves::Inputs, values == Precision::Float32);  // under autocast it reads rounded copies
}

// ---- linear ----
//
// y = x W^T + b as one node over rows: x (..., in) is read as R = prod(...) rows (R, in), so
//   forward   Y = X W^T (+ b on every row)
//   backward  dX = G W,  dW = G^T X,  db = 1^T G  (the column sums of G, as a (1, R) @ (R, out)
//             product)
// with G the output gradient as (R, out). W and b are the node's own inputs (not a transposed
// view of W and a separate add), so their gradients can be computed straight into their
// destinations: a DDP bucket slot, with no copy afterwards.

// The (1, rows, cols) view of a 2-d tensor that batched_matmul takes.
Tensor as_batch_of_one(const Tensor& t) {
  return t.as_strided({1, t.size(0), t.size(1)}, {0, t.stride(0), t.stride(1)}, t.offset());
}

// a @ b for 2-d operands, written into a fresh contiguous tensor of `shape` (M * N elements),
// or into `into` (a gradient destination, contiguous too).
Tensor matmul_2d(const Tensor& a, const Tensor& b, const Tensor& into, const Shape& shape, GemmInputs inputs) {
  Tensor out = into.defined() ? into : Tensor::empty(shape, a.options());
  if (out.numel() == 0) return out;
  const Tensor out_2d = out.as_strided({a.size(0), b.size(1)}, {b.size(1), 1}, out.offset());
  kernels::batched_matmul(as_batch_of_one(a), as_batch_of_one(b), as_batch_of_one(out_2d), inputs);
  return out;
}

// x (..., in) as (R, in): a view when x's layout allows, else a copy.
Tensor as_rows(const Tensor& x) {
  const Shape leading(x.shape().begin(), x.shape().end() - 1);
  return reshape(x, {numel_of(leading), x.shape().back()});
}

void check_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  detail::check_defined(x, "linear");
  detail::check_defined(w, "linear");
  detail::check_same_device(x, w, "linear");
  MG_CHECK(w.dim() == 2, "linear: expected a 2-d weight [out_features, in_features], got shape ", w.shape());
  MG_CHECK(x.dim() >= 1 && x.shape().back() == w.size(1), "linear: input of shape ", x.shape(),
           " does not end in in_features ", w.size(1), " of weight ", w.shape());
  MG_CHECK(is_floating(x.dtype()) && x.dtype() == w.dtype(), "linear: expected input and weight of one floating ",
           "dtype, got ", x.dtype(), " and ", w.dtype());
  check_arithmetic_dtype(x.dtype(), "linear");
  if (!b.defined()) return;
  detail::check_same_device(x, b, "linear");
  MG_CHECK(b.dim() == 1 && b.size(0) == w.size(0), "linear: expected a bias of shape ", Shape{w.size(0)},
           " for weight ", w.shape(), ", got ", b.shape());
  MG_CHECK(b.dtype() == w.dtype(), "linear: bias dtype ", b.dtype(), " differs from weight dtype ", w.dtype());
}

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, GemmInputs inputs) {
  check_linear(x, w, b);
  const int64_t out_features = w.size(0);
  const Tensor rows = as_rows(x);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor out = matmul_2d(rows, transpose(w, 0, 1), Tensor(), out_shape, inputs);
  if (b.defined() && out.numel() > 0) {
    const Tensor out_rows = out.view({rows.size(0), out_features});
    kernels::binary(kernels::BinaryOp::Add, out_rows, detail::broadcast_to(b, out_rows.shape()), out_rows);
  }
  return out;
}

TensorList linear_backward(const Tensor& g, const detail::SavedOperand& saved_x, const detail::SavedOperand& saved_w,
                           const Tensor& b, GemmInputs inputs) {
  const Tensor g_rows = as_rows(g);  // (R, out)
  const int64_t rows = g_rows.size(0);
  const Tensor &x = saved_x.tensor(), &w = saved_w.tensor();
  // A destination is written before the engine adds this node's other gradients to the leaf,
  // so it is used only by a tensor that is not also the input (linear(w, w), linear(b, w, b)).
  auto destination = [&x](const Tensor& t) { return x.is_same(t) ? Tensor() : grad_destination(t); };
  Tensor gx, gw, gb;
  if (is_grad_enabled() && inputs == GemmInputs::Float32) {  // create_graph: differentiable ops
    if (x.requires_grad()) gx = reshape(matmul(g_rows, w), x.shape());
    if (w.requires_grad()) gw = matmul(transpose(g_rows, 0, 1), as_rows(x));
    if (b.defined() && b.requires_grad()) gb = sum(g_rows, {0});
    return {gx, gw, gb};
  }
  if (x.requires_grad()) gx = matmul_2d(g_rows, saved_w.values(), Tensor(), {rows, w.size(1)}, inputs).view(x.shape());
  if (w.requires_grad())
    gw = matmul_2d(transpose(g_rows, 0, 1), as_rows(saved_x.values()), destination(w), w.shape(), inputs);
  if (b.defined() && b.requires_grad()) {
    gb = matmul_2d(full({1, rows}, 1.0, g.options()), g_rows, destination(b), b.shape(), inputs);
  }
  return {gx, gw, gb};
}

Tensor linear_node(const Tensor& input, const Tensor& weight, const Tensor& bias, Precision values) {
  const GemmInputs inputs = detail::gemm_inputs(values);
  auto forward = [&] { return linear_forward(input, weight, bias, inputs); };
  auto make_backward = [&] {
    return [x = detail::SavedOperand(input, values), w = detail::SavedOperand(weight, values), bias,
            inputs](const Tensor& g, const Tensor&) {
      return linear_backward(g, x, w, bias, inputs);
    };
  };
  return detail::differentiable("linear", {&input, &weight, &bias}, forward, make_backward, Saves::Inputs,
                                values == Precision::Float32);  // under autocast it reads rounded copies
}

}  // namespace

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  const auto lowered = [](Precision p, const auto&... x) { return linear_node(x..., p); };
  if (auto out = detail::autocast_lower(lowered, input, weight, bias)) return *out;
  return linear_node(input, weight, bias, Precision::Float32);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  const auto lowered = [](Precision p, const auto&... x) { return matmul_node(x..., p); };
  if (auto out = detail::autocast_lower(lowered, a, b)) return *out;
  return matmul_node(a, b, Precision::Float32);
}

}  // namespace mg
