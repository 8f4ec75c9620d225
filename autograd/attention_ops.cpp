// autograd/attention_ops.cpp — scaled dot-product attention (torch.nn.functional's), written
// from primitives: the reference that a fused kernel is checked against, and the one to read.
//
//   scores = q @ k^T * scale                     (..., L, S)   scale = 1/sqrt(E) unless given
//   scores[..., i, j] = -inf where j > i          when causal (the mask is aligned top-left, as
//                                                 PyTorch's is_causal: query i sees keys 0..i)
//   out    = softmax(scores, -1) @ v              (..., L, Ev)
// Its backward is the primitives' (matmul, where, softmax), so it keeps the (..., L, S) scores
// and probabilities for backward: memory quadratic in the sequence length.
#include <cmath>
#include <limits>

#include "autograd/factory.h"
#include "autograd/nn_ops.h"
#include "autograd/op_common.h"
#include "autograd/ops.h"

namespace mg {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                    std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
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

  const int64_t length = q.size(d - 2), keys = k.size(d - 2);
  const double s = scale ? *scale : 1.0 / std::sqrt(double(q.size(d - 1)));
  Tensor scores = matmul(q, transpose(k, -2, -1)) * s;  // (..., L, S)
  if (is_causal) {
    const TensorOptions index_options{DType::Int64, q.device()};
    const Tensor row = arange(length, index_options).view({length, 1});
    const Tensor col = arange(keys, index_options).view({1, keys});
    const Tensor hidden = gt(col, row);                   // (L, S): key j after query i
    const Tensor minus_inf = full({1}, -std::numeric_limits<double>::infinity(), {q.dtype(), q.device()});
    scores = where(hidden, minus_inf, scores);
  }
  return matmul(softmax(scores, -1), v);  // (..., L, Ev)
}

}  // namespace mg
