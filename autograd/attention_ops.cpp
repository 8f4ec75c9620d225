// autograd/attention_ops.cpp — scaled dot-product attention (torch.nn.functional's), two ways:
//
//   scores = q @ k^T * scale                     (..., L, S)   scale = 1/sqrt(E) unless given
//   scores[..., i, j] = -inf where j > i          when causal (the mask is aligned top-left, as
//                                                 PyTorch's is_causal: query i sees keys 0..i)
//   out    = softmax(scores, -1) @ v              (..., L, Ev)
//
// scaled_dot_product_attention_math writes it from primitives (matmul, where, softmax): the
// reference, and the one to read; its backward is the primitives', so it keeps the (..., L, S)
// scores and probabilities for backward, memory quadratic in the sequence length.
// scaled_dot_product_attention runs the fused kernels of kernels/attention.h, one node on the
// tape that keeps q, k, v, out and one log-sum-exp per query row; its backward recomputes the
// probabilities; under create_graph it is the same gradient from primitives
// (attention_backward_composed), so second derivatives flow through it in float32 (PyTorch's
// fused attention has none). Where the fused kernels do not apply (head widths over 128 on CUDA) it is the
// math path. Inputs with other than 4 dims are viewed as (1, N, rows, cols) around the node, N
// the product of their batch dims (the reshapes record their own nodes). For 4-d input the output and the gradients of
// q, k, v are laid out as (B, rows, H, cols) and returned transposed, as a transformer's heads
// come from and go back to (B, T, H, D): merging the heads afterwards is then a view, not a copy.
#include <cmath>
#include <limits>

#include "multigrad/autograd/autocast.h"
#include "multigrad/autograd/derivatives.h"
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/kernels/attention.h"

namespace mg {
namespace {

// Checks the arguments (naming the shapes) and returns the scale.
double check_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<double> scale,
                       const char* op) {
  for (const Tensor* t : {&q, &k, &v}) detail::check_defined(*t, op);
  detail::check_same_device(q, k, op);
  detail::check_same_device(q, v, op);
  MG_CHECK(q.dim() >= 2 && q.dim() == k.dim() && q.dim() == v.dim(), op,
           ": expected query, key and value with one number of dims (at least 2), got ", q.shape(), ", ",
           k.shape(), " and ", v.shape());
  const int64_t d = q.dim();
  for (int64_t i = 0; i < d - 2; ++i)
    MG_CHECK(q.size(i) == k.size(i) && q.size(i) == v.size(i), op, ": batch dims differ: query ", q.shape(),
             ", key ", k.shape(), ", value ", v.shape());
  MG_CHECK(q.size(d - 1) == k.size(d - 1), op, ": query and key widths differ: ", q.shape(), " and ", k.shape());
  MG_CHECK(k.size(d - 2) == v.size(d - 2), op, ": key and value lengths differ: ", k.shape(), " and ",
           v.shape());
  MG_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), op,
           ": expected query, key and value of one floating dtype, got ", q.dtype(), ", ", k.dtype(), " and ",
           v.dtype());
  return scale ? *scale : 1.0 / std::sqrt(double(q.size(d - 1)));
}

// softmax(q @ k^T * scale, -1) from primitives, keys after the query hidden when causal:
// (..., L, S).
Tensor attention_weights(const Tensor& q, const Tensor& k, bool causal, double scale) {
  const int64_t length = q.size(-2), keys = k.size(-2);
  Tensor scores = matmul(q, transpose(k, -2, -1)) * scale;  // (..., L, S)
  if (causal) {
    const TensorOptions index_options{DType::Int64, q.device()};
    const Tensor row = arange(length, index_options).view({length, 1});
    const Tensor col = arange(keys, index_options).view({1, keys});
    const Tensor hidden = gt(col, row);                   // (L, S): key j after query i
    const Tensor minus_inf = full({1}, -std::numeric_limits<double>::infinity(), {q.dtype(), q.device()});
    scores = where(hidden, minus_inf, scores);
  }
  return softmax(scores, -1);
}

// The fused node's gradients as differentiable ops on live q, k, v (tape.h's live_input), for
// create_graph: with P the weights, dV = P^T G, dP = G V^T, dS = P (dP - rowsum(dP P)),
// dQ = dS K scale, dK = dS^T Q scale.
TensorList attention_backward_composed(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                       bool causal, double scale) {
  const Tensor p = attention_weights(q, k, causal, scale);
  const Tensor dp = matmul(g, transpose(v, -2, -1));
  const Tensor ds = p * (dp - sum(dp * p, {-1}, true));
  return {matmul(ds, k) * scale, matmul(transpose(ds, -2, -1), q) * scale, matmul(transpose(p, -2, -1), g)};
}

// t (B, H, rows, cols) cut from the tape, as the kernels take it: unit column stride and rows
// that do not overlap; else a contiguous copy.
Tensor kernel_operand(const Tensor& t) {
  const Tensor d = t.detach();
  const bool columns_ok = d.size(3) <= 1 || d.strides()[3] == 1;
  const bool rows_ok = d.size(2) <= 1 || d.strides()[2] >= d.size(3);
  return columns_ok && rows_ok ? d : detail::contiguous_as(d, d.dtype());
}

// A new (B, H, rows, cols) tensor: stored as (B, rows, H, cols) when `interleaved`.
Tensor empty_heads(int64_t batch, int64_t heads, int64_t rows, int64_t cols, const TensorOptions& options,
                   bool interleaved) {
  if (!interleaved) return Tensor::empty({batch, heads, rows, cols}, options);
  return Tensor::empty({batch, rows, heads, cols}, options).transpose(1, 2);
}

// The fused node over 4-d q (B, H, L, E), k (B, H, S, E), v (B, H, S, F), whose values are those
// of `values` (what its backward may keep them in: detail::SavedOperand). Under autocast its
// backward reads the output rounded to that precision, as a bf16 (fp16) kernel's output is, and
// keeps it so; in float32 the output itself.
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                       bool interleaved, Precision values) {
  const int64_t batch = q.size(0), heads = q.size(1), length = q.size(2);
  const Tensor qo = kernel_operand(q), ko = kernel_operand(k), vo = kernel_operand(v);
  const kernels::GemmInputs inputs = detail::gemm_inputs(values);
  const bool lower = values != Precision::Float32;
  Tensor out, lse;  // (B, H, L, F), (B, H, L)
  return detail::differentiable(
      "scaled_dot_product_attention", {&q, &k, &v},
      [&] {
        out = empty_heads(batch, heads, length, v.size(3), q.options(), interleaved);
        lse = Tensor::empty({batch, heads, length}, q.options());
        kernels::attention_fwd(qo, ko, vo, causal, scale, out, lse, inputs);
        return out;
      },
      [&] {
        return [q = detail::SavedOperand(qo, values), k = detail::SavedOperand(ko, values),
                v = detail::SavedOperand(vo, values),
                rounded_out = detail::SavedOperand::rounded(lower ? out.detach() : Tensor(), values), lse, causal,
                scale, interleaved, inputs, lower](const Tensor& grad, const Tensor& saved_out) -> TensorList {
          if (is_grad_enabled() && !lower)  // create_graph
            return attention_backward_composed(grad, live_input(q.values(), 0), live_input(k.values(), 1),
                                               live_input(v.values(), 2), causal, scale);
          const Tensor g = kernel_operand(grad);  // (B, H, L, F)
          const Tensor qo = q.values(), ko = k.values(), vo = v.values();
          const Tensor o = saved_out.defined() ? saved_out : rounded_out.values();
          const int64_t b = qo.size(0), h = qo.size(1);
          TensorList grads{empty_heads(b, h, qo.size(2), qo.size(3), qo.options(), interleaved),
                           empty_heads(b, h, ko.size(2), ko.size(3), ko.options(), interleaved),
                           empty_heads(b, h, vo.size(2), vo.size(3), vo.options(), interleaved)};
          kernels::attention_bwd(g, qo, ko, vo, o, lse, causal, scale, grads[0], grads[1], grads[2], inputs);
          return grads;
        };
      },
      lower ? Saves::Inputs : Saves::InputsAndOutputs, !lower);
}

}  // namespace

Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                         std::optional<double> scale) {
  const auto same_op = [&](Precision, const auto&... x) {
    return scaled_dot_product_attention_math(x..., is_causal, scale);
  };
  if (auto out = detail::autocast_lower(same_op, q, k, v)) return *out;
  const double s = check_attention(q, k, v, scale, "scaled_dot_product_attention");
  return matmul(attention_weights(q, k, is_causal, s), v);  // (..., L, Ev)
}

namespace {

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal, std::optional<double> scale,
                 Precision values) {
  const double s = check_attention(q, k, v, scale, "scaled_dot_product_attention");
  const int64_t d = q.dim();
  const bool fused = (q.dtype() == DType::Float32 || q.dtype() == DType::Float64) &&
                     kernels::attention_fused_supports(q.device(), q.size(d - 1), v.size(d - 1));
  if (!fused) return scaled_dot_product_attention_math(q, k, v, is_causal, scale);
  if (d == 4) return fused_attention(q, k, v, is_causal, s, true, values);
  // (..., rows, cols) as (1, N, rows, cols), N the product of the batch dims.
  const int64_t n = numel_of(Shape(q.shape().begin(), q.shape().end() - 2));
  const auto heads = [n](const Tensor& t) { return reshape(t, {1, n, t.size(-2), t.size(-1)}); };
  Shape out_shape = q.shape();
  out_shape.back() = v.size(-1);
  return reshape(fused_attention(heads(q), heads(k), heads(v), is_causal, s, false, values), out_shape);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                    std::optional<double> scale) {
  const auto lowered = [&](Precision p, const auto&... x) { return attention(x..., is_causal, scale, p); };
  if (auto out = detail::autocast_lower(lowered, q, k, v)) return *out;
  return attention(q, k, v, is_causal, scale, Precision::Float32);
}

}  // namespace mg
