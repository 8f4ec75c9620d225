// kernels/cpu/blas.h — row-major GEMM through OpenBLAS for the CPU kernels (matmul, convolution),
// on a device's share of the cores.
//
//   C (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C     (beta 0: C is assigned)
//
// Normally one OpenBLAS call, which parallelises itself. Its thread count is process-wide, so it
// is set to cpu_thread_budget (the same for every CPU device), and callers issue GEMMs one after
// another rather than from inside an OpenMP region, which would oversubscribe the cores.
//
// OpenBLAS's result can depend on its thread count (measured: a (64, 784) @ (784, 256) product
// differs in the last bits between 1 and 2 threads), which would make training on two CPU
// devices (one thread each) differ from one device (two threads). So in deterministic mode
// (core/deterministic.h) C is cut into fixed blocks of kDeterministicBlock rows — or columns,
// when it has more columns than rows — each computed by single-threaded OpenBLAS, the blocks
// spread over the device's threads: the result then depends on the shapes alone.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <atomic>

#include "core/deterministic.h"
#include "core/device.h"
#include "kernels/cpu/parallel.h"

namespace mg::kernels::cpu {

// Rows (or columns) of C per block in deterministic mode: large enough that OpenBLAS's packing
// of the other operand is repeated only every 64 output rows, small enough to give every thread
// blocks to work on for training-sized products.
inline constexpr int kDeterministicBlock = 64;

// Sets OpenBLAS's threads; only when it changes, as the call takes a lock.
inline void set_blas_threads(int threads) {
  static std::atomic<int> current{0};
  if (current.exchange(threads) != threads) openblas_set_num_threads(threads);
}

inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a,
                      int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha, const double* a,
                      int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The GEMM above on `device`'s threads (see the file comment).
template <class T>
void gemm(const Device& device, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, T alpha, const T* a,
          int lda, const T* b, int ldb, T beta, T* c, int ldc) {
  if (!is_deterministic()) {
    set_blas_threads(cpu_thread_budget(device));
    blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  set_blas_threads(1);
  const bool by_rows = m >= n;
  const int extent = by_rows ? m : n;
  const int blocks = (extent + kDeterministicBlock - 1) / kDeterministicBlock;
  parallel_for(device, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      const int begin = int(blk) * kDeterministicBlock, size = std::min(kDeterministicBlock, extent - begin);
      if (by_rows) {  // rows [begin, begin + size) of op(A) and C
        const T* a_rows = ta == CblasNoTrans ? a + int64_t(begin) * lda : a + begin;
        blas_gemm(ta, tb, size, n, k, alpha, a_rows, lda, b, ldb, beta, c + int64_t(begin) * ldc, ldc);
      } else {  // columns [begin, begin + size) of op(B) and C
        const T* b_cols = tb == CblasNoTrans ? b + begin : b + int64_t(begin) * ldb;
        blas_gemm(ta, tb, m, size, k, alpha, a, lda, b_cols, ldb, beta, c + begin, ldc);
      }
    }
  });
}

}  // namespace mg::kernels::cpu
