// kernels/index.h — ops along one dim that read, add or order elements by index: index_select,
// index_add, gather, scatter_add, sort, and the running sum cumsum.
//
// Every tensor here is contiguous and seen around the op's dim as 3-d (O, S, I): O the product of
// the sizes before the dim, I of those after it. The functional API (autograd/index_ops.cpp,
// autograd/embedding_ops.cpp) checks shapes and reshapes; the dispatch (kernels/index.cpp) checks
// the layouts below and that the tensors share one device.
//
//   index_select  out (O, n, I)[o, i, k]  = src (O, S, I)[o, index[i], k]        index (n)
//   index_add     out (O, S, I)[o, index[i], k] += src (O, n, I)[o, i, k]        index (n)
//   gather        out (O, n, I)[o, i, k]  = src (O, S, I)[o, index[o, i, k], k]  index (O, n, I)
//   scatter_add   out (O, S, I)[o, index[o, i, k], k] += src (O, n, I)[o, i, k]  index (O, n, I)
//   cumsum        out (O, L, I)[o, i, k]  = in[o, 0, k] + ... + in[o, i, k]   (reverse: i ... L-1)
//   sort          values, indices (R, L): each row of in (R, L) in order, stable: equal values
//                 keep their order of position; NaN is above every number (first when
//                 descending, last when ascending, as PyTorch); -0.0 and +0.0 are equal.
//
// Dtypes: Float32, Float64 or Int64, one for src, out, values; index and indices Int64.
// Bad indices: an index outside [0, S) is an mg::Error naming the first such position, the index
// and S, on both devices (CUDA: a flag read back after the kernel, kernels/cuda/bad_index.cuh: one
// 8-byte copy and a stream synchronisation). With check_indices = false an op trusts its indices
// and does not synchronise: the backwards, whose forwards checked them (an index out of range is
// then skipped, never written out of bounds).
// Determinism: the += ops add the contributions to one element in increasing i, onto out's value,
// on both devices (no atomics): CUDA's bits are the CPU's. So are cumsum's (a sequential sum per
// line) and sort's (a total order: ties broken by position).
#pragma once

#include <cstdint>

#include "multigrad/core/tensor.h"

#if MG_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mg::kernels {

// `name` prefixes the error messages ("embedding", "index_select").
void index_select(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, const char* name);
void index_add(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, const char* name);
void gather(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices);
void scatter_add(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices);
void cumsum(const Tensor& in, const Tensor& out, bool reverse);
void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending);

namespace cpu {
void index_select(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, const char* name);
void index_add(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, const char* name);
void gather(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices);
void scatter_add(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices);
void cumsum(const Tensor& in, const Tensor& out, bool reverse);
void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending);
}  // namespace cpu

#if MG_WITH_CUDA
namespace cuda {
void index_select(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, const char* name,
                  cudaStream_t stream);
void index_add(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, const char* name,
               cudaStream_t stream);
void gather(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, cudaStream_t stream);
void scatter_add(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, cudaStream_t stream);
void cumsum(const Tensor& in, const Tensor& out, bool reverse, cudaStream_t stream);
void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace mg::kernels
