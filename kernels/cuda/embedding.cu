// kernels/cuda/embedding.cu — embedding gather and scatter-add on CUDA (kernels/embedding.h).
//
// Forward: one thread per output element (grid-stride over n * D): out[i, d] =
// weight[indices[i], d]. Consecutive threads read and write consecutive d of one row, so both
// sides are coalesced. A thread whose index is outside [0, V) writes nothing and records its
// position i in a BadIndexFlag (bad_index.cuh); the launcher reads it back — one 8-byte copy and
// a stream synchronisation per forward — and throws naming the first bad index and V.
// Backward: deterministic, the CPU's bits. Each position i becomes the key indices[i] * n + i
// (n < 2^31 and V < 2^32 keep it inside int64); a bitonic sort of the keys (padded with INT64_MAX
// to m = the next power of two: log2(m)(log2(m)+1)/2 compare-and-swap launches of m/2 useful
// threads) groups the positions of one row, in increasing i. Then one thread per (sorted slot k,
// column d) whose slot starts a row's run reads grad_weight[row, d], adds the run's grad_out
// rows in increasing i and writes it back: the sequence of additions the CPU makes, so the result
// is bit-identical to the CPU and independent of block order (atomicAdd would not be: with
// repeated indices its rounding varies from run to run). Scratch: m int64 keys from the caching
// allocator on the stream.
// Preconditions (asserted by the dispatch, kernels/embedding.cpp): weight / grad_weight
// contiguous (V, D), out / grad_out contiguous (n, D), one floating dtype; indices (n) Int64.
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "multigrad/core/stream.h"
#include "multigrad/kernels/cuda/bad_index.cuh"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/embedding.h"

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

__global__ void embedding_keys_kernel(const int64_t* indices, int64_t* keys, int64_t n, int64_t m) {
  for (int64_t i = global_thread_index(); i < m; i += grid_stride())
    keys[i] = i < n ? indices[i] * n + i : std::numeric_limits<int64_t>::max();
}

// One stage (k, j) of the bitonic sort of keys[0, m): slot i and its partner i ^ j are put in
// increasing order where bit k of i is clear, in decreasing order where it is set.
__global__ void bitonic_stage_kernel(int64_t* keys, int64_t m, int64_t k, int64_t j) {
  for (int64_t i = global_thread_index(); i < m; i += grid_stride()) {
    const int64_t partner = i ^ j;
    if (partner <= i) continue;
    const int64_t a = keys[i], b = keys[partner];
    if (((i & k) == 0) == (a > b)) {
      keys[i] = b;
      keys[partner] = a;
    }
  }
}

template <class T>
__global__ void embedding_bwd_kernel(const T* grad_out, const int64_t* keys, T* grad_weight, int64_t n,
                                     int64_t dim) {  // grad_out (n, D), grad_weight (V, D), keys sorted
  const int64_t total = n * dim;
  for (int64_t e = global_thread_index(); e < total; e += grid_stride()) {
    const int64_t k = e / dim, d = e - k * dim;
    const int64_t row = keys[k] / n;
    if (k > 0 && keys[k - 1] / n == row) continue;  // not the first slot of its row's run
    T acc = grad_weight[row * dim + d];
    for (int64_t s = k; s < n && keys[s] / n == row; ++s) acc += grad_out[(keys[s] % n) * dim + d];
    grad_weight[row * dim + d] = acc;
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
  MG_CHECK(n < (int64_t(1) << 31) && grad_weight.size(0) < (int64_t(1) << 32),
           "embedding backward on CUDA: n = ", n, " indices and V = ", grad_weight.size(0),
           " rows overflow its int64 sort keys (n < 2^31, V < 2^32)");
  int64_t m = 1;
  while (m < n) m *= 2;
  const Tensor keys = Tensor::empty({m}, {DType::Int64, grad_weight.device()});
  int64_t* k_data = keys.data<int64_t>();
  MG_LAUNCH(embedding_keys_kernel, grid_for(m, kElementwiseBlock), kElementwiseBlock, stream,
            indices.data<int64_t>(), k_data, n, m);
  MG_CUDA_CHECK_LAUNCH(stream);
  for (int64_t k = 2; k <= m; k *= 2) {
    for (int64_t j = k / 2; j > 0; j /= 2) {
      MG_LAUNCH(bitonic_stage_kernel, grid_for(m, kElementwiseBlock), kElementwiseBlock, stream, k_data, m, k, j);
      MG_CUDA_CHECK_LAUNCH(stream);
    }
  }
  MG_DISPATCH_FLOATING(grad_weight.dtype(), "embedding backward", [&] {
    using T = scalar_t;
    MG_LAUNCH(embedding_bwd_kernel<T>, grid_for(n * dim, kElementwiseBlock), kElementwiseBlock, stream,
              grad_out.data<T>(), k_data, grad_weight.data<T>(), n, dim);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

}  // namespace mg::kernels::cuda
