// kernels/cpu/blas.h — row-major GEMM through OpenBLAS for the CPU kernels (matmul, convolution),
// on a device's share of the cores.
//
//   C (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C     (beta 0: C is assigned)
//
// OpenBLAS always runs single-threaded here; the device's threads come from our own OpenMP
// (parallel.h): C is cut into blocks of rows — or columns, when it has more columns than rows —
// and each block is one single-threaded OpenBLAS call. Why not OpenBLAS's own threads: its
// pthreads spin (sched_yield) for a long while after every call, beside the OpenMP regions of the
// ops in between. On the Fashion-MNIST CNN step perf put ~25% of the time in the kernel's
// scheduler, and with a parallel build running beside it one conv layer took 75-628 ms against
// 55-61 ms split this way (benchmarks/NOTES.md). One threading system, whose idle threads sleep
// (OMP_WAIT_POLICY=PASSIVE), behaves on a shared machine.
// Blocks: normally one per thread of the device's budget (a multiple of 16 rows, the register
// tile's multiple), or the whole product on the calling thread when it is too small to share.
// OpenBLAS's result can depend on how C is cut (measured: a (64, 784) @ (784, 256) product
// differs in the last bits between its 1- and 2-thread runs), and a CPU device's budget depends
// on how many devices exist; so in deterministic mode (core/deterministic.h) the blocks are
// kDeterministicBlock rows or columns whatever the budget, and the result depends on the shapes
// alone — training on two CPU devices then matches one device bit for bit.
// Callers issue GEMMs one after another, not from inside an OpenMP region.
#pragma once

#include <cblas.h>

#include <algorithm>

#include "multigrad/core/deterministic.h"
#include "multigrad/core/device.h"
#include "multigrad/kernels/cpu/gemm_kernel.h"
#include "multigrad/kernels/cpu/parallel.h"

namespace mg::kernels::cpu {

// Rows (or columns) of C per block in deterministic mode: large enough that OpenBLAS's packing
// of the other operand is repeated only every 64 output rows, small enough to give every thread
// blocks to work on for training-sized products.
inline constexpr int kDeterministicBlock = 64;

// Products with fewer multiply-adds than this run on the calling thread: waking a second
// thread costs more than it saves.
inline constexpr double kShareGemmMacs = 1 << 18;

// OpenBLAS single-threaded (see the file comment), set again if something else changed it
// (bench_ops' cblas_sgemm baseline does); the first call warns about slow kernels (gemm_kernel.h).
inline void use_single_threaded_blas() {
  warn_once_if_slow_gemm_kernel();
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a,
                      int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha, const double* a,
                      int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Rows (or columns) of C per OpenBLAS call, out of `extent` (see the file comment).
inline int gemm_block(const Device& device, int m, int n, int k, int extent) {
  if (is_deterministic()) return kDeterministicBlock;
  if (double(m) * double(n) * double(k) < kShareGemmMacs) return std::max(extent, 1);
  const int threads = cpu_thread_budget(device);
  return std::max(16, ((extent + threads - 1) / threads + 15) / 16 * 16);
}

// The GEMM above on `device`'s threads (see the file comment).
template <class T>
void gemm(const Device& device, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, T alpha, const T* a,
          int lda, const T* b, int ldb, T beta, T* c, int ldc) {
  use_single_threaded_blas();
  const bool by_rows = m >= n;
  const int extent = by_rows ? m : n;
  const int block = gemm_block(device, m, n, k, extent);
  const int blocks = (extent + block - 1) / block;
  parallel_for(device, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      const int begin = int(blk) * block, size = std::min(block, extent - begin);
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
