// autograd/op_common.h — argument checks and layout helpers shared by the functional API's
// files (elementwise, reduce, shape, copy, matmul). Internal to autograd/; not public API.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "multigrad/core/tensor.h"

namespace mg::detail {

inline void check_defined(const Tensor& t, const char* op) {
  MG_CHECK(t.defined(), op, ": got an undefined tensor");
}

// "add: expected all tensors on one device, got cpu:0 and cpu:1"
inline void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  MG_CHECK(a.device() == b.device(), op, ": expected all tensors on one device, got ", a.device(), " and ",
           b.device());
}

// Strides that let a tensor of (old_shape, old_strides) be viewed as new_shape without a copy,
// or nothing when the layout does not allow it (PyTorch's computeStride). Both shapes hold
// the same number of elements.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides,
                                    const Shape& new_shape);

// A view of t with `shape`, which must be a broadcast of t's shape (broadcast_shapes already
// checked it): new leading dims and expanded size-1 dims get stride 0. Returns t when the
// shapes are equal.
Tensor broadcast_to(const Tensor& t, const Shape& shape);

// The view of t with its dims reordered by `perm` (a permutation of 0..dim-1, not checked).
Tensor permute_unchecked(const Tensor& t, const std::vector<int64_t>& perm);

// t as a contiguous tensor of `dtype`: t itself when it already is one, else one copy.
Tensor contiguous_as(const Tensor& t, DType dtype);

// mg::index_add without its argument checks and without the kernels' index check (on CUDA a
// synchronisation): for backwards whose indices are known good (autograd/index_ops.cpp).
Tensor index_add_unchecked(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);

}  // namespace mg::detail
