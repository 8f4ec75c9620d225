// autograd/embedding_ops.cpp — embedding: index_select of the weight's rows, with an index_add
// backward (kernels/index.h).
//
//   forward   out[..., :] = weight[indices[...], :]            weight (V, D) -> (*indices.shape, D)
//   backward  grad_weight[indices[i], :] += grad_out[i, :]     (duplicates accumulate)
// The indices are flattened to (n) for the kernels; the backward saves them (not the weight).
// Under create_graph the backward is index_add, so second derivatives flow through it.
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/kernels/index.h"

namespace mg {

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  detail::check_defined(weight, "embedding");
  detail::check_defined(indices, "embedding");
  MG_CHECK(weight.dim() == 2, "embedding: expected weight of shape (V, D), got ", weight.shape());
  MG_CHECK(weight.dtype() == DType::Float32 || weight.dtype() == DType::Float64,
           "embedding: expected a Float32 or Float64 weight, got ", weight.dtype());
  MG_CHECK(indices.dtype() == DType::Int64, "embedding: expected Int64 indices, got ", indices.dtype());
  detail::check_same_device(weight, indices, "embedding");

  const int64_t vocab = weight.size(0), dim = weight.size(1), n = indices.numel();
  const Tensor w = detail::contiguous_as(weight, weight.dtype());  // (V, D)
  const Tensor flat = detail::contiguous_as(indices, DType::Int64);
  const Tensor idx = flat.as_strided({n}, {1}, flat.offset());     // (n)
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  Tensor out = Tensor::empty(out_shape, w.options());              // (*indices.shape, D)
  kernels::index_select(w.as_strided({1, vocab, dim}, {vocab * dim, dim, 1}, w.offset()), idx,
                        out.as_strided({1, n, dim}, {n * dim, dim, 1}, out.offset()), true, "embedding");
  if (any_requires_grad({&weight})) {
    const TensorOptions options = w.options();
    record("embedding", {out}, {weight, indices}, [idx, vocab, dim, n, options](const TensorList& grads) -> TensorList {
      if (!grads[0].defined()) return {Tensor(), Tensor()};
      if (is_grad_enabled())  // create_graph: the same sum as a differentiable op
        return {detail::index_add_unchecked(zeros({vocab, dim}, options), 0, idx,
                                            reshape(to(grads[0], options.dtype), {n, dim})),
                Tensor()};
      const Tensor grad_out = detail::contiguous_as(grads[0], options.dtype);
      Tensor grad_weight = zeros({vocab, dim}, options);  // (V, D)
      // The forward checked the indices: no second check (on CUDA, a synchronisation).
      kernels::index_add(grad_out.as_strided({1, n, dim}, {n * dim, dim, 1}, grad_out.offset()), idx,
                         grad_weight.view({1, vocab, dim}), false, "embedding backward");
      return {grad_weight, Tensor()};
    }, Saves::InputsAndOutputs, true);
  }
  return out;
}

}  // namespace mg
