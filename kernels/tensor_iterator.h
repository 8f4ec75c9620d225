// kernels/tensor_iterator.h — the strides of an elementwise op, computed once per call.
//
// An elementwise op visits every index of the output shape; operand k reads element
//   sum_d index[d] * strides[k][d]
// where a broadcast dim has stride 0. Before the loop, dims are coalesced: neighbours d, d+1
// merge when every operand satisfies strides[d] == strides[d+1] * sizes[d+1], and size-1 dims
// are dropped. A contiguous tensor therefore becomes one dim of stride 1, and the backends take
// their vectorised path when every operand has done so (`contiguous`).
//
// Operand 0 is the output. The struct is trivially copyable so CUDA kernels take it by value.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/error.h"
#include "core/macros.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace mg::kernels {

template <int N>  // number of operands, output included
struct StridedLayout {
  int ndim = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};  // in elements
  bool contiguous = false;            // every operand is one dense run of stride 1

  // Element offsets (in elements) of every operand at row-major linear index i.
  MG_HD void offsets(int64_t i, int64_t (&out)[N]) const {
    for (int k = 0; k < N; ++k) out[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t idx = i % sizes[d];
      i /= sizes[d];
      for (int k = 0; k < N; ++k) out[k] += idx * strides[k][d];
    }
  }
};

// Builds the layout of `operands` (output first), which must all have the output's shape.
template <int N>
StridedLayout<N> make_layout(std::initializer_list<const Tensor*> operands) {
  MG_CHECK(int(operands.size()) == N, "make_layout: expected ", N, " operands, got ", operands.size());
  const Tensor* ops[N];
  int k = 0;
  for (const Tensor* t : operands) ops[k++] = t;
  const Shape& shape = ops[0]->shape();
  for (int j = 1; j < N; ++j)
    MG_CHECK(ops[j]->shape() == shape, "elementwise: operand shape ", ops[j]->shape(),
             " differs from output shape ", shape);

  StridedLayout<N> L;
  L.numel = numel_of(shape);
  // Keep the non-trivial dims, outermost first.
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    MG_CHECK(L.ndim < kMaxDims, "elementwise: more than ", kMaxDims, " dims after coalescing (shape ",
             shape, ")");
    L.sizes[L.ndim] = shape[d];
    for (int j = 0; j < N; ++j) L.strides[j][L.ndim] = ops[j]->strides()[d];
    ++L.ndim;
  }
  // Merge each dim into the one outside it where the strides allow.
  int merged = 0;
  for (int d = 0; d < L.ndim; ++d) {
    bool can_merge = merged > 0;
    for (int j = 0; j < N && can_merge; ++j)
      can_merge = L.strides[j][merged - 1] == L.strides[j][d] * L.sizes[d];
    if (can_merge) {
      L.sizes[merged - 1] *= L.sizes[d];
      for (int j = 0; j < N; ++j) L.strides[j][merged - 1] = L.strides[j][d];
    } else {
      L.sizes[merged] = L.sizes[d];
      for (int j = 0; j < N; ++j) L.strides[j][merged] = L.strides[j][d];
      ++merged;
    }
  }
  L.ndim = merged;
  L.contiguous = L.ndim <= 1;
  for (int j = 0; j < N && L.ndim == 1; ++j) L.contiguous = L.contiguous && L.strides[j][0] == 1;
  return L;
}

}  // namespace mg::kernels
