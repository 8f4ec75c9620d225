// kernels/cuda/sgemm_native.cuh — the handwritten tiled SGEMM (sgemm_native.cu), used by
// batched_matmul (matmul.cu) for Float32 when MG_GEMM=native.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mg::kernels::cuda {

// c[b] = a[b] @ b_[b] for b < batch, every matrix row-major with unit inner stride:
//   a: (batch, M, K), row stride lda, batch stride stride_a (0 broadcasts one matrix)
//   b_: (batch, K, N), row stride ldb, batch stride stride_b
//   c: (batch, M, N) contiguous
// M, N, K, lda, ldb below 2^31. Enqueued on `stream`; the caller has set the device.
void sgemm_native(int64_t batch, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, int64_t stride_a,
                  const float* b_, int64_t ldb, int64_t stride_b, float* c, cudaStream_t stream);

}  // namespace mg::kernels::cuda
