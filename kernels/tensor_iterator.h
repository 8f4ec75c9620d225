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

#include "multigrad/core/error.h"
#include "multigrad/core/macros.h"
#include "multigrad/core/shape.h"
#include "multigrad/core/tensor.h"

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

  // Calls body(offs) for every linear index in [begin, end), in row-major order, where offs
  // holds the element offset of every operand. The offsets are computed once at `begin` (one
  // division per dim); after that they advance like an odometer: the innermost dim is a run of
  // stride additions, and the outer dims carry once per run. No division per element.
  template <class Body>
  MG_HD void for_each_offsets(int64_t begin, int64_t end, Body&& body) const {
    if (begin >= end) return;
    int64_t idx[kMaxDims];
    int64_t offs[N];
    for (int k = 0; k < N; ++k) offs[k] = 0;
    int64_t rest = begin;
    for (int d = ndim - 1; d >= 0; --d) {
      idx[d] = rest % sizes[d];
      rest /= sizes[d];
      for (int k = 0; k < N; ++k) offs[k] += idx[d] * strides[k][d];
    }
    if (ndim == 0) {  // every dim had size 1: a single element
      body(offs);
      return;
    }
    const int inner = ndim - 1;
    for (int64_t i = begin; i < end;) {
      int64_t run = sizes[inner] - idx[inner];
      if (run > end - i) run = end - i;
      for (int64_t j = 0; j < run; ++j) {
        body(offs);
        for (int k = 0; k < N; ++k) offs[k] += strides[k][inner];
      }
      i += run;
      idx[inner] += run;
      // Carry: a dim that reached its size goes back to 0 and bumps the one outside it.
      for (int d = inner; d > 0 && idx[d] == sizes[d]; --d) {
        idx[d] = 0;
        idx[d - 1] += 1;
        for (int k = 0; k < N; ++k) offs[k] += strides[k][d - 1] - sizes[d] * strides[k][d];
      }
    }
  }
};

// Builds the layout of `operands` (output first), which must all have the output's shape.
template <int N>
StridedLayout<N> make_layout(std::initializer_list<const Tensor*> operands) {
  MG_CHECK(int(operands.size()) == N, "make_layout: expected ", N, " operands, got ", operands.size());
  const Tensor* ops[N] = {};
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
