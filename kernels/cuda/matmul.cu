// kernels/cuda/matmul.cu — batched matrix product on CUDA: cuBLAS, or the handwritten SGEMM.
//
// What it computes: out[b] = a[b] @ b_[b] for a (B, M, K), b_ (B, K, N), out (B, M, N)
// contiguous; out is assigned (=). Float32 goes through cublasSgemmStridedBatched (or
// sgemm_native.cu when the environment has MG_GEMM=native, read at every call so a program or
// test can switch), Float64 through cublasDgemmStridedBatched. Int64 is not supported on CUDA.
// cuBLAS runs in its default math mode: no TF32, so Float32 products keep float32 precision.
// Float32 operands marked GemmInputs::BFloat16 (autocast's bf16 values) are copied into dense
// BFloat16 tensors (exact for such values; a broadcast matrix once) and multiplied by
// cublasGemmStridedBatchedEx: bf16 inputs, float32 accumulation and output, as oneDNN does on
// the CPU; GemmInputs::Float16 (fp16 values) likewise into dense Float16 tensors (CUDA_R_16F).
// MG_GEMM=native multiplies either in float32 instead (the same products).
//
// Row-major on a column-major library: cuBLAS sees the row-major (M, N) buffer of out as the
// column-major (N, M) matrix out^T, and out^T = b_^T a^T. So cuBLAS's "A" is our b_ and its "B" is
// our a, with m = N, n = M, k = K and ldc = N. An operand that is row-major (inner stride 1,
// row stride ld) already reads as its own transpose in column-major, so it is passed with
// CUBLAS_OP_N; a transposed operand (row stride 1, column stride ld) with CUBLAS_OP_T. Neither is
// copied. An operand with any other strides is copied to a contiguous temporary first; the
// temporary is freed on return, which is safe because the caching allocator hands its block out
// again only to later work on the same (current) stream.
// Batch strides pass through as they are, 0 included (a broadcast matrix is read by every batch).
//
// Handles: one cuBLAS handle per thread and GPU, bound to the caller's stream on every call
// (kernels/cuda/handle_pool.cuh).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "multigrad/core/cuda_check.h"
#include "multigrad/core/stream.h"
#include "multigrad/kernels/cuda/cuda_kernels.h"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/handle_pool.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/cuda/sgemm_native.cuh"

namespace mg::kernels::cuda {
namespace {

struct Cublas {
  using Handle = cublasHandle_t;
  static Handle create() {
    Handle h = nullptr;
    MG_CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }
  static void set_stream(Handle h, cudaStream_t stream) { MG_CUBLAS_CHECK(cublasSetStream(h, stream)); }
};

cublasHandle_t cublas_handle(cudaStream_t stream) { return thread_handle<Cublas>(stream); }

bool native_gemm_requested() {
  const char* v = std::getenv("MG_GEMM");
  return v != nullptr && std::string_view(v) == "native";
}

// ---- operand layouts ----

// How a BLAS reads one (rows, cols) matrix of an operand without copying it.
struct MatrixLayout {
  bool transposed;     // false: row-major (inner stride 1); true: column-major (row stride 1)
  int64_t ld;          // the stride between rows (row-major) or columns (transposed)
  int64_t batch_stride;
};

// The layout of matrix operand t (B, rows, cols), or nothing when BLAS cannot read its strides.
// A size-1 dim may have any stride; ld is then the smallest legal one.
std::optional<MatrixLayout> blas_layout(const Tensor& t, bool allow_transposed) {
  int64_t rows = t.size(1), cols = t.size(2), row_stride = t.stride(1), col_stride = t.stride(2);
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= std::max<int64_t>(1, cols)))
    return MatrixLayout{false, rows == 1 ? std::max<int64_t>(1, cols) : row_stride, t.stride(0)};
  if (allow_transposed && (rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= std::max<int64_t>(1, rows)))
    return MatrixLayout{true, cols == 1 ? std::max<int64_t>(1, rows) : col_stride, t.stride(0)};
  return std::nullopt;
}

// t itself when BLAS can read it, else a contiguous copy (enqueued on `stream`).
Tensor blas_readable(const Tensor& t, bool allow_transposed, cudaStream_t stream) {
  if (blas_layout(t, allow_transposed)) return t;
  Tensor dense = Tensor::empty(t.shape(), t.options());
  copy(t, dense, stream);
  return dense;
}

cublasOperation_t blas_op(const MatrixLayout& l) { return l.transposed ? CUBLAS_OP_T : CUBLAS_OP_N; }

// cuBLAS call for one dtype; arguments already in cuBLAS's column-major order (see the top).
void gemm_strided_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          const float* A, int lda, long long sa, const float* B, int ldb, long long sb, float* C,
                          int ldc, long long sc, int batch) {
  const float one = 1.f, zero = 0.f;
  MG_CUBLAS_CHECK(cublasSgemmStridedBatched(h, ta, tb, m, n, k, &one, A, lda, sa, B, ldb, sb, &zero, C, ldc, sc, batch));
}
void gemm_strided_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          const double* A, int lda, long long sa, const double* B, int ldb, long long sb, double* C,
                          int ldc, long long sc, int batch) {
  const double one = 1.0, zero = 0.0;
  MG_CUBLAS_CHECK(cublasDgemmStridedBatched(h, ta, tb, m, n, k, &one, A, lda, sa, B, ldb, sb, &zero, C, ldc, sc, batch));
}

void check_blas_int(int64_t v, const char* what) {
  MG_CHECK(v <= 2147483647, "matmul (CUDA): ", what, " = ", v, " exceeds cuBLAS's 32-bit sizes");
}

// Operand t (B, rows, cols) as a dense row-major copy in `inputs`' 16-bit dtype (one matrix when
// t's batch is broadcast: stride 0), enqueued on `stream`, and its layout.
std::pair<Tensor, MatrixLayout> half_copy(const Tensor& t, GemmInputs inputs, cudaStream_t stream) {
  const bool broadcast = t.stride(0) == 0;
  const Tensor source = broadcast ? t.slice(0, 0, 1) : t;
  Tensor dense =
      Tensor::empty(source.shape(), {inputs == GemmInputs::BFloat16 ? DType::BFloat16 : DType::Float16, t.device()});
  copy(source, dense, stream);
  return {dense, MatrixLayout{false, std::max<int64_t>(1, t.size(2)), broadcast ? 0 : t.size(1) * t.size(2)}};
}

}  // namespace

// ============================== launcher ==============================

void batched_matmul(const Tensor& a, const Tensor& b_, const Tensor& out, GemmInputs inputs, cudaStream_t stream) {
  MG_CHECK(a.dim() == 3 && b_.dim() == 3 && out.dim() == 3, "matmul (CUDA): expected 3-d operands, got ", a.shape(),
           ", ", b_.shape(), " and ", out.shape());
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  MG_CHECK(a.size(0) == B && a.size(1) == M && b_.size(0) == B && b_.size(1) == K && b_.size(2) == N,
           "matmul (CUDA): shapes ", a.shape(), " @ ", b_.shape(), " do not give ", out.shape());
  MG_CHECK(out.is_contiguous(), "matmul (CUDA): output must be contiguous, got strides ", out.strides());
  MG_CHECK(a.dtype() == b_.dtype() && a.dtype() == out.dtype(), "matmul (CUDA): dtypes ", a.dtype(), ", ",
           b_.dtype(), " and ", out.dtype(), " differ");
  MG_CHECK(a.dtype() != DType::Int64, "matmul: Int64 is not supported on CUDA");
  set_cuda_device(out.device());
  if (out.numel() == 0) return;
  if (K == 0) {  // an empty sum: BLAS may skip the write, so zero out explicitly
    MG_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, size_t(out.numel()) * out.element_size(), stream));
    return;
  }

  const KernelFamilyScope family("matmul");  // the operands' copies and casts count as the GEMM's
  if (a.dtype() == DType::Float32 && native_gemm_requested()) {
    Tensor a_rows = blas_readable(a, /*allow_transposed=*/false, stream);
    Tensor b_rows = blas_readable(b_, /*allow_transposed=*/false, stream);
    MatrixLayout la = *blas_layout(a_rows, false), lb = *blas_layout(b_rows, false);
    sgemm_native(B, M, N, K, a_rows.data<float>(), la.ld, la.batch_stride, b_rows.data<float>(), lb.ld,
                 lb.batch_stride, out.data<float>(), stream);
    return;
  }

  for (auto [v, what] : {std::pair{M, "M"}, {N, "N"}, {K, "K"}, {B, "batch"}}) check_blas_int(v, what);
  if (inputs != GemmInputs::Float32 && a.dtype() == DType::Float32) {
    const auto [a16, la] = half_copy(a, inputs, stream);
    const auto [b16, lb] = half_copy(b_, inputs, stream);
    const cudaDataType type = inputs == GemmInputs::BFloat16 ? CUDA_R_16BF : CUDA_R_16F;
    const float one = 1.f, zero = 0.f;
    // out^T (N, M) = b_^T (N, K) @ a^T (K, M), column-major, as below.
    const KernelTimer timer(__FILE__, "cublas_gemm_ex", stream);
    MG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(cublas_handle(stream), CUBLAS_OP_N, CUBLAS_OP_N, int(N), int(M), int(K),
                                               &one, b16.data_ptr(), type, int(lb.ld), lb.batch_stride, a16.data_ptr(),
                                               type, int(la.ld), la.batch_stride, &zero, out.data_ptr(), CUDA_R_32F,
                                               int(N), M * N, int(B), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  Tensor a_blas = blas_readable(a, /*allow_transposed=*/true, stream);
  Tensor b_blas = blas_readable(b_, /*allow_transposed=*/true, stream);
  MatrixLayout la = *blas_layout(a_blas, true), lb = *blas_layout(b_blas, true);
  check_blas_int(la.ld, "lda");
  check_blas_int(lb.ld, "ldb");
  cublasHandle_t handle = cublas_handle(stream);
  MG_DISPATCH_FLOATING(a.dtype(), "matmul", [&] {
    using T = scalar_t;
    const KernelTimer timer(__FILE__, std::is_same_v<T, float> ? "cublas_sgemm" : "cublas_dgemm", stream);
    // out^T (N, M) = b_^T (N, K) @ a^T (K, M), column-major.
    gemm_strided_batched(handle, blas_op(lb), blas_op(la), int(N), int(M), int(K), b_blas.data<T>(), int(lb.ld),
                         lb.batch_stride, a_blas.data<T>(), int(la.ld), la.batch_stride, out.data<T>(), int(N),
                         M * N, int(B));
  });
}

}  // namespace mg::kernels::cuda
