// kernels/embedding.h — embedding lookup (a row gather) and its backward (a row scatter-add).
//
//   forward:  out[i, :] = weight[indices[i], :]                 (assigned, =)
//   backward: grad_weight[indices[i], :] += grad_out[i, :]      (accumulated, +=; an index that
//             appears k times receives the sum of its k rows; the caller zeroes grad_weight)
//
// Contract (autograd/embedding_ops.cpp checks shapes and devices and flattens the indices):
//   weight and grad_weight contiguous (V, D), out and grad_out contiguous (n, D), all one
//   floating dtype (Float32 or Float64); indices contiguous Int64 (n).
//   An index outside [0, V) is an mg::Error naming the first such index and V, in the forward,
//   on the CPU and on CUDA (a device flag read back after the kernel: one 8-byte copy and a
//   stream synchronisation per call, kernels/cuda/bad_index.cuh). The backward trusts indices
//   that passed the forward.
//   Order of accumulation: duplicates are added in increasing position i, onto grad_weight's
//   value, on both devices (CUDA sorts the positions by row first): CUDA's bits are the CPU's.
#pragma once

#include "multigrad/core/tensor.h"

#if MG_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mg::kernels {

void embedding_fwd(const Tensor& weight, const Tensor& indices, const Tensor& out);
void embedding_bwd(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_weight);

namespace cpu {
void embedding_fwd(const Tensor& weight, const Tensor& indices, const Tensor& out);
void embedding_bwd(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_weight);
}  // namespace cpu

#if MG_WITH_CUDA
namespace cuda {
void embedding_fwd(const Tensor& weight, const Tensor& indices, const Tensor& out, cudaStream_t stream);
void embedding_bwd(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_weight, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace mg::kernels
