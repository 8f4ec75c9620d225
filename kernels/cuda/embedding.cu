// kernels/cuda/embedding.cu — embedding gather and scatter-add on CUDA (kernels/embedding.h).
//
// Forward: one thread per output element (grid-stride over n * D): out[i, d] =
// weight[indices[i], d]. Consecutive threads read and write consecutive d of one row, so both
// sides are coalesced. A thread whose index is outside [0, V) writes nothing and records its
// position i in a BadIndexFlag (bad_index.cuh); the launcher reads it back — one 8-byte copy and
// a stream synchronisation per forward — and throws naming the first bad index and V.
// Backward: one thread per grad_out element, atomicAdd(&grad_weight[indices[i], d], grad_out[i, d])
// (+=). Duplicated indices make threads add into one address: atomicAdd (native for float and,
// since sm_60, double) keeps that correct, but the order of the additions, hence the rounding,
// varies from run to run. The CPU backward is the deterministic reference.
// Preconditions (asserted by the dispatch, kernels/embedding.cpp): weight / grad_weight
// contiguous (V, D), out / grad_out contiguous (n, D), one floating dtype; indices (n) Int64.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/stream.h"
#include "kernels/cuda/bad_index.cuh"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/embedding.h"

namespace mg::kernels::cuda {
namespace {

// ============================== kernels ==============================

// `slots` = max(D, 1): with D == 0 there is nothing to copy, yet one thread per index still
// checks it, so an empty embedding rejects bad indices as the CPU does.
template <class T>
__global__ void embedding_fwd_kernel(const T* weight, const int64_t* indices, T* out, int64_t n, int64_t vocab,
                                     int64_t dim, int64_t slots,
                                     unsigned long long* bad_position) {  // weight (V, D), out (n, D)
  const int64_t total = n * slots;
  for (int64_t e = global_thread_index(); e < total; e += grid_stride()) {
    const int64_t i = e / slots, d = e - i * slots;
    const int64_t row = indices[i];
    if (row < 0 || row >= vocab) {
      report_bad_index(bad_position, i);
      continue;
    }
    if (d < dim) out[i * dim + d] = weight[row * dim + d];
  }
}

template <class T>
__global__ void embedding_bwd_kernel(const T* grad_out, const int64_t* indices, T* grad_weight, int64_t n,
                                     int64_t dim) {  // grad_out (n, D), grad_weight (V, D)
  const int64_t total = n * dim;
  for (int64_t e = global_thread_index(); e < total; e += grid_stride()) {
    const int64_t i = e / dim, d = e - i * dim;
    atomicAdd(grad_weight + indices[i] * dim + d, grad_out[e]);
  }
}

}  // namespace

// ============================== launchers ==============================

void embedding_fwd(const Tensor& weight, const Tensor& indices, const Tensor& out, cudaStream_t stream) {
  set_cuda_device(out.device());
  const int64_t vocab = weight.size(0), dim = weight.size(1), n = indices.size(0);
  if (n == 0) return;
  BadIndexFlag bad(out.device(), stream);
  const int64_t slots = std::max<int64_t>(dim, 1);
  MG_DISPATCH_FLOATING(weight.dtype(), "embedding", [&] {
    using T = scalar_t;
    MG_LAUNCH(embedding_fwd_kernel<T>, grid_for(n * slots, kElementwiseBlock), kElementwiseBlock, stream,
              weight.data<T>(), indices.data<int64_t>(), out.data<T>(), n, vocab, dim, slots, bad.data());
    MG_CUDA_CHECK_LAUNCH(stream);
  });
  const int64_t position = bad.first_bad();
  if (position >= 0)
    MG_ERROR("embedding: index ", bad.read(indices.data<int64_t>() + position), " (position ", position,
             ") is out of range [0, V) for V = ", vocab);
}

void embedding_bwd(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_weight, cudaStream_t stream) {
  set_cuda_device(grad_weight.device());
  const int64_t dim = grad_weight.size(1), n = indices.size(0);
  if (n * dim == 0) return;
  MG_DISPATCH_FLOATING(grad_weight.dtype(), "embedding backward", [&] {
    using T = scalar_t;
    MG_LAUNCH(embedding_bwd_kernel<T>, grid_for(n * dim, kElementwiseBlock), kElementwiseBlock, stream,
              grad_out.data<T>(), indices.data<int64_t>(), grad_weight.data<T>(), n, dim);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

}  // namespace mg::kernels::cuda
