// kernels/cpu/matmul.cpp — batched matrix product on the CPU.
//
//   out[b] = a[b] @ b_[b]     a (B, M, K), b_ (B, K, N), out (B, M, N) contiguous
//   out[b][m][n] = sum_k a[b][m][k] * b_[b][k][n]   (assigned, not accumulated)
//
// Float32 / Float64 go to OpenBLAS (cblas_sgemm / cblas_dgemm), one call per batch, row-major.
// Float32 operands that hold bfloat16 values (GemmInputs::BFloat16) go to oneDNN's bf16 GEMM
// where the CPU has one (matmul_bf16.h), after a pass that stores them as BFloat16 tensors in the
// layout BLAS would have read them in; elsewhere to cblas_sgemm like any Float32 operands, as do
// operands that hold binary16 values (GemmInputs::Float16: no fp16 GEMM here; the products are
// exact in float32 all the same).
// Each operand matrix is passed without a copy when BLAS can read it: inner stride 1 is NoTrans
// with ld = row stride, row stride 1 is Trans with ld = column stride (a transposed view costs
// nothing). Any other layout is first copied into a contiguous temporary with cpu::copy; a
// broadcast batch (batch stride 0) is copied once, not B times.
// Threads: cpu/blas.h runs each GEMM on the device's share of the cores (fixed blocks in
// deterministic mode); batches run one after another, as parallelising them on top would
// oversubscribe.
// Int64 has no BLAS: a plain i-k-j loop, contiguous chunks of the B*M output rows per thread,
// accumulated in int64.
// K == 0 gives zeros; M == 0 or N == 0 leaves nothing to do.
#include <climits>
#include <type_traits>

#include "multigrad/kernels/cpu/blas.h"
#include "multigrad/kernels/cpu/cpu_kernels.h"
#include "multigrad/kernels/cpu/matmul_bf16.h"
#include "multigrad/kernels/cpu/parallel.h"

namespace mg::kernels::cpu {
namespace {

// How BLAS reads one (rows, cols) operand matrix.
template <class T>
struct BlasOperand {
  const T* data;            // matrix 0 of the batch
  int64_t batch_stride;     // in elements; 0 when broadcast
  CBLAS_TRANSPOSE trans;    // CblasNoTrans: row-major; CblasTrans: column-major
  int64_t ld;               // leading dimension, >= the dimension BLAS reads contiguously
  Tensor keep_alive;        // the contiguous copy, when one was needed
};

// Describes matrix operand t (B, rows, cols) for BLAS; copies it when neither layout fits.
// A size-1 dim's stride is never used, so it places no constraint.
template <class T>
BlasOperand<T> blas_operand(const Tensor& t) {
  const int64_t rows = t.size(1), cols = t.size(2);
  const int64_t row_stride = t.stride(1), col_stride = t.stride(2);
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols))
    return {t.data<T>(), t.stride(0), CblasNoTrans, rows == 1 ? cols : row_stride, {}};
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows))
    return {t.data<T>(), t.stride(0), CblasTrans, cols == 1 ? rows : col_stride, {}};

  const int64_t batches = t.stride(0) == 0 ? 1 : t.size(0);
  Tensor source = t.as_strided({batches, rows, cols}, t.strides(), t.offset());
  Tensor dense = Tensor::empty(source.shape(), t.options());
  copy(source, dense);
  const int64_t batch_stride = t.stride(0) == 0 ? 0 : rows * cols;
  return {dense.data<T>(), batch_stride, CblasNoTrans, cols, dense};
}

// Float32 operand t (B, rows, cols), whose values bfloat16 holds, as dense BFloat16 matrices laid
// out as blas_operand reads t: a copy at half the bytes, rounded to nearest even (exact for such
// values). A vector's elements lie the same way in either layout; it is described row-major.
BlasOperand<BFloat16> bf16_operand(const Tensor& t) {
  const BlasOperand<float> f = blas_operand<float>(t);
  const int64_t rows = t.size(1), cols = t.size(2);
  const bool transposed = f.trans == CblasTrans;
  const int64_t stored_rows = transposed ? cols : rows, stored_cols = transposed ? rows : cols;  // ld-strided
  const int64_t batches = f.batch_stride == 0 ? 1 : t.size(0);
  Tensor values = Tensor::empty({batches, stored_rows, stored_cols}, {DType::BFloat16, t.device()});
  BFloat16* dst = values.data<BFloat16>();  // (batches, stored_rows, stored_cols)
  parallel_for(t.device(), batches * stored_rows, std::max<int64_t>(1, kGrain / stored_cols),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   const float* src = f.data + r / stored_rows * f.batch_stride + r % stored_rows * f.ld;
                   round_to_bf16(src, dst + r * stored_cols, stored_cols);
                 }
               });
  const bool vector = rows == 1 || cols == 1;
  return {dst, f.batch_stride == 0 ? 0 : stored_rows * stored_cols, vector ? CblasNoTrans : f.trans,
          vector ? cols : stored_cols, values};
}

// T: the operands' element type: float or double (BLAS), or BFloat16 for Float32 tensors whose
// values bfloat16 holds (oneDNN; the output stays Float32).
template <class T>
void blas_matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr bool bf16 = std::is_same_v<T, BFloat16>;
  using Out = std::conditional_t<bf16, float, T>;
  const int64_t batches = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  const auto operand = [](const Tensor& t) {
    if constexpr (bf16) return bf16_operand(t);
    else return blas_operand<T>(t);
  };
  const BlasOperand<T> A = operand(a), B = operand(b);
  for (int64_t v : {m, n, k, A.ld, B.ld})
    MG_CHECK(v <= INT_MAX, "matmul: dimension ", v, " exceeds the BLAS int range (shapes ", a.shape(),
             " and ", b.shape(), ")");
  Out* c = out.data<Out>();  // (B, M, N)
  for (int64_t i = 0; i < batches; ++i) {
    const T* a_i = A.data + i * A.batch_stride;
    const T* b_i = B.data + i * B.batch_stride;
    if constexpr (bf16) {
      gemm_bf16(out.device(), A.trans, B.trans, int(m), int(n), int(k), a_i, int(A.ld), b_i, int(B.ld),
                c + i * m * n, int(n));
    } else {
      gemm(out.device(), A.trans, B.trans, int(m), int(n), int(k), T(1), a_i, int(A.ld), b_i, int(B.ld), T(0),
           c + i * m * n, int(n));
    }
  }
}

void int_matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t m = out.size(1), n = out.size(2), k = a.size(2);
  const int64_t* pa = a.data<int64_t>();  // (B, M, K), strides sa
  const int64_t* pb = b.data<int64_t>();  // (B, K, N), strides sb
  int64_t* c = out.data<int64_t>();       // (B, M, N)
  const Strides sa = a.strides(), sb = b.strides();
  // One output row costs k * n multiply-adds.
  const int64_t rows_per_thread = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, k * n));
  parallel_for(out.device(), out.size(0) * m, rows_per_thread, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t batch = row / m, i = row % m;
      int64_t* c_row = c + row * n;
      for (int64_t j = 0; j < n; ++j) c_row[j] = 0;
      for (int64_t p = 0; p < k; ++p) {
        const int64_t a_ip = pa[batch * sa[0] + i * sa[1] + p * sa[2]];
        const int64_t* b_row = pb + batch * sb[0] + p * sb[1];
        for (int64_t j = 0; j < n; ++j) c_row[j] += a_ip * b_row[j * sb[2]];
      }
    }
  });
}

}  // namespace

void batched_matmul(const Tensor& a, const Tensor& b, const Tensor& out, GemmInputs inputs) {
  MG_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3 && a.size(0) == b.size(0) &&
               a.size(2) == b.size(1) && out.size(0) == a.size(0) && out.size(1) == a.size(1) &&
               out.size(2) == b.size(2),
           "matmul: expected (B, M, K) @ (B, K, N) -> (B, M, N), got ", a.shape(), " @ ", b.shape(),
           " -> ", out.shape());
  MG_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "matmul: dtypes differ (", a.dtype(),
           ", ", b.dtype(), " -> ", out.dtype(), ")");
  MG_CHECK(out.is_contiguous(), "matmul: output must be contiguous, got strides ", out.strides());
  if (out.numel() == 0) return;
  if (a.size(2) == 0) return fill(out, 0.0);
  switch (out.dtype()) {
    case DType::Float32:
      if (inputs == GemmInputs::BFloat16 && runs_bf16_gemm()) return blas_matmul<BFloat16>(a, b, out);
      return blas_matmul<float>(a, b, out);
    case DType::Float64: return blas_matmul<double>(a, b, out);
    case DType::Int64: return int_matmul(a, b, out);
    default: break;
  }
  check_arithmetic_dtype(out.dtype(), "matmul");
  MG_ERROR("matmul: unsupported dtype ", out.dtype());
}

}  // namespace mg::kernels::cpu
