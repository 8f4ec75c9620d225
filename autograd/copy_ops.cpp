// autograd/copy_ops.cpp — ops that write new memory from old: contiguous, clone, to(device),
// to(dtype), cat, stack, copy_. Each copies at most once and returns its input unchanged when
// no copy is needed (contiguous of a contiguous tensor, to() of the same device or dtype).
//
// Derivatives: a copy passes the gradient through (to(device) copies it back to the input's
// device, to(dtype) casts it back); cat hands each input its slice. copy_ is not
// differentiable: writing in place into a tensor that requires grad is an error while grad
// mode is on (PyTorch's rule for leaves), and allowed under NoGradGuard (optimizer updates).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "multigrad/autograd/derivatives.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/kernels/kernels.h"

namespace mg {

Tensor detail::contiguous_as(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), {dtype, t.device()});
  if (out.numel() > 0) kernels::copy(t, out);
  return out;
}

namespace {

// The gradient of a copy is the output gradient, brought back to the input's device or dtype.
template <class Forward>
Tensor copy_differentiable(const char* name, const Tensor& x, Forward forward) {
  return detail::differentiable(name, {&x}, forward, [&] {
    return [device = x.device(), dtype = x.dtype()](const Tensor& g, const Tensor&) -> TensorList {
      return {to(to(g, device), dtype)};
    };
  }, Saves::None, true);
}

}  // namespace

Tensor contiguous(const Tensor& x) {
  detail::check_defined(x, "contiguous");
  return copy_differentiable("contiguous", x, [&] { return detail::contiguous_as(x, x.dtype()); });
}

Tensor clone(const Tensor& x) {
  detail::check_defined(x, "clone");
  return copy_differentiable("clone", x, [&] {
    Tensor out = Tensor::empty(x.shape(), x.options());
    if (out.numel() > 0) kernels::copy(x, out);
    return out;
  });
}

Tensor to(const Tensor& x, const Device& device) {
  detail::check_defined(x, "to");
  if (x.device() == device) return x;
  return copy_differentiable("to", x, [&] {
    Tensor src = contiguous(x);
    Tensor out = Tensor::empty(x.shape(), {x.dtype(), device});
    if (out.numel() > 0) kernels::copy_across_devices(src, out);
    return out;
  });
}

// A cast to an integral dtype ends the graph (its output cannot require grad).
Tensor to(const Tensor& x, DType dtype) {
  detail::check_defined(x, "to");
  if (x.dtype() == dtype) return x;
  return copy_differentiable("to", x, [&] {
    Tensor out = Tensor::empty(x.shape(), {dtype, x.device()});
    if (out.numel() > 0) kernels::copy(x, out);
    return out;
  });
}

void copy_(const Tensor& dst, const Tensor& src) {
  detail::check_defined(dst, "copy_");
  detail::check_defined(src, "copy_");
  MG_CHECK(!(is_grad_enabled() && dst.requires_grad()), "copy_: the destination (shape ", dst.shape(),
           ") requires grad and cannot be written in place; write under NoGradGuard or into a detach()ed tensor");
  for (int64_t d = 0; d < dst.dim(); ++d)
    MG_CHECK(dst.strides()[d] != 0 || dst.shape()[d] <= 1, "copy_: the destination (shape ", dst.shape(),
             ", strides ", dst.strides(), ") has several elements at one memory location");
  const Shape shape = broadcast_shapes(src.shape(), dst.shape(), "copy_");
  MG_CHECK(shape == dst.shape(), "copy_: source of shape ", src.shape(),
           " cannot be broadcast to the destination's shape ", dst.shape());
  Tensor from = to(src, dst.device());
  // kernels::copy needs disjoint operands: a source that shares memory with dst is read first,
  // unless it is dst itself.
  if (from.storage() == dst.storage()) {
    if (from.offset() == dst.offset() && from.shape() == dst.shape() && from.strides() == dst.strides())
      return;
    from = clone(from);
  }
  if (dst.numel() > 0) kernels::copy(detail::broadcast_to(from, shape), dst);
  dst.storage()->bump_version();  // a backward that saved dst would read other values (tape.h)
}

// The gradient of each input is its slice of the output gradient (views, no copy).
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  MG_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  for (const Tensor& t : tensors) detail::check_defined(t, "cat");
  // As in PyTorch, 1-d tensors of shape [0] are skipped whatever the others' shapes; `ref` is
  // the first tensor that takes part and fixes the rank.
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.shape()[0] == 0; };
  size_t ref = 0;
  while (ref + 1 < tensors.size() && skipped(tensors[ref])) ++ref;
  const Tensor& first = tensors[ref];
  MG_CHECK(first.dim() > 0, "cat: tensor ", ref, " is 0-d and cannot be concatenated");
  const int64_t d = wrap_dim(dim, first.dim(), "cat");

  DType dtype = first.dtype();
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_same_device(first, t, "cat");
    if (skipped(t)) continue;
    MG_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " has shape ", t.shape(), " but tensor ", ref,
             " has shape ", first.shape(), " (ranks differ)");
    for (int64_t k = 0; k < t.dim(); ++k)
      MG_CHECK(k == d || t.shape()[k] == first.shape()[k], "cat: sizes must match except in dim ", d,
               "; tensor ", i, " has shape ", t.shape(), " but tensor ", ref, " has shape ", first.shape());
    if (t.dtype() != dtype) dtype = promote_types(dtype, t.dtype(), "cat");
    shape[d] += t.shape()[d];
  }

  Tensor out = Tensor::empty(shape, {dtype, first.device()});
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    if (skipped(t) || t.numel() == 0) continue;
    const int64_t n = t.shape()[d];
    kernels::copy(t, slice(out, d, at, at + n));
    at += n;
  }
  const bool grad = is_grad_enabled() && std::any_of(tensors.begin(), tensors.end(),
                                                     [](const Tensor& t) { return t.requires_grad(); });
  if (!grad || !is_floating(dtype)) return out;
  TensorList shells;  // the inputs' shapes only
  for (const Tensor& t : tensors) shells.push_back(shell_of(t));
  record("cat", {out}, tensors, [tensors = std::move(shells), d, skipped](const TensorList& grads) {
    TensorList inputs_grads(tensors.size());
    int64_t at = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (skipped(tensors[i])) continue;
      const int64_t n = tensors[i].shape()[d];
      if (tensors[i].requires_grad()) inputs_grads[i] = slice(grads[0], d, at, at + n);
      at += n;
    }
    return inputs_grads;
  }, Saves::None, true);  // the inputs' shapes only
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  MG_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (const Tensor& t : tensors) detail::check_defined(t, "stack");
  const Shape& shape = tensors[0].shape();
  for (size_t i = 1; i < tensors.size(); ++i)
    MG_CHECK(tensors[i].shape() == shape, "stack: expected all tensors to have shape ", shape,
             ", but tensor ", i, " has shape ", tensors[i].shape());
  const int64_t d = wrap_dim(dim, int64_t(shape.size()) + 1, "stack");
  std::vector<Tensor> columns;
  columns.reserve(tensors.size());
  for (const Tensor& t : tensors) columns.push_back(unsqueeze(t, d));
  return cat(columns, d);  // differentiable through unsqueeze and cat
}

}  // namespace mg
