// kernels/cpu/blas.h — row-major GEMM through OpenBLAS for the CPU kernels that build their own
// products (convolution), with OpenBLAS's thread count held at the device's budget.
//
//   C (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C     (beta 0: C is assigned)
//
// OpenBLAS parallelises each call itself; its thread count is process-wide, so it is set to
// cpu_thread_budget (the same for every CPU device) and callers issue GEMMs one after another
// rather than from inside an OpenMP region, which would oversubscribe the cores.
#pragma once

#include <cblas.h>

#include <atomic>

#include "core/device.h"

namespace mg::kernels::cpu {

// Sets OpenBLAS's threads to the device's budget; only when it changes, as the call takes a lock.
inline void use_blas_threads(const Device& device) {
  static std::atomic<int> current{0};
  const int threads = cpu_thread_budget(device);
  if (current.exchange(threads) != threads) openblas_set_num_threads(threads);
}

inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha, const double* a,
                 int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace mg::kernels::cpu
