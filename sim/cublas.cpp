// sim/cublas.cpp — the cuBLAS functions multigrad calls, with cuBLAS's documented semantics.
//
//   C[i] = alpha op(A[i]) op(B[i]) + beta C[i],   i < batchCount,   column-major:
//   element (r, c) of an ld-strided matrix is at r + c ld; op(X) is X (CUBLAS_OP_N) or its
//   transpose (CUBLAS_OP_T); op(A) is m x k, op(B) k x n, C m x n; A[i] = A + i strideA.
// With beta == 0, C is not read (NaN there does not propagate), as cuBLAS documents.
// Arguments are checked as cuBLAS checks them (CUBLAS_STATUS_INVALID_VALUE for a negative size
// or batch count, or a leading dimension below the rows its matrix is stored with), so a wrong
// transpose or leading dimension fails here, or gives a wrong product that the CUDA-vs-CPU tests
// see. The product runs on the handle's stream in the element type, one k-ordered sum per
// element (no FMA: -ffp-contract=off). cublasGemmStridedBatchedEx takes the one mixed form
// multigrad calls, bf16 or fp16 A and B (CUDA_R_16BF, CUDA_R_16F) with a float32 C and float32
// compute, and float32 throughout; any other combination is CUBLAS_STATUS_NOT_SUPPORTED.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <cstring>

#include <string>
#include <type_traits>

#include "multigrad/sim/ledger.h"
#include "multigrad/sim/state.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

// A bfloat16 value as cuBLAS reads CUDA_R_16BF: the top 16 bits of a float32.
struct Bf16 {
  uint16_t bits;
  explicit operator float() const {
    const uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};

// An IEEE binary16 value as cuBLAS reads CUDA_R_16F: sign, 5 exponent bits (bias 15), 10
// mantissa bits; exponent 0 a subnormal (mantissa x 2^-24), 31 Inf or NaN.
struct Fp16 {
  uint16_t bits;
  explicit operator float() const {
    const float sign = (bits & 0x8000u) != 0 ? -1.0f : 1.0f;
    const int exponent = (bits >> 10) & 0x1F, mantissa = bits & 0x3FF;
    if (exponent == 0) return sign * std::ldexp(float(mantissa), -24);
    if (exponent == 31) return mantissa != 0 ? std::numeric_limits<float>::quiet_NaN()
                                             : sign * std::numeric_limits<float>::infinity();
    return sign * std::ldexp(float(1024 + mantissa), exponent - 25);
  }
};

// The ledger's name of a GEMM's value type.
template <class V>
const char* type_name() {
  if constexpr (std::is_same_v<V, Bf16>) return "bf16";
  if constexpr (std::is_same_v<V, Fp16>) return "fp16";
  if constexpr (std::is_same_v<V, double>) return "f64";
  return "f32";
}

// A and B hold In (T, or Bf16 or Fp16 for T = float); alpha, beta, C and the sums are T.
template <class T, class In = T>
cublasStatus_t gemm_strided_batched(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                    int k, const T* alpha, const In* A, int lda, long long stride_a, const In* B,
                                    int ldb, long long stride_b, const T* beta, T* C, int ldc, long long stride_c,
                                    int batch) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool a_t = ta == CUBLAS_OP_T, b_t = tb == CUBLAS_OP_T;
  if ((ta != CUBLAS_OP_N && !a_t) || (tb != CUBLAS_OP_N && !b_t)) return CUBLAS_STATUS_INVALID_VALUE;
  if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  // A is stored (a_t ? k : m) rows by (a_t ? m : k) columns; likewise B; C m x n.
  if (lda < std::max(1, a_t ? k : m) || ldb < std::max(1, b_t ? n : k) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  if (mg::sim::ledger::on())
    mg::sim::ledger::record(
        "gemm", "\"m\": " + std::to_string(m) +
                    ", \"n\": " + std::to_string(n) + ", \"k\": " + std::to_string(k) + ", \"batch\": " +
                    std::to_string(batch) + ", \"transa\": " + (a_t ? "true" : "false") + ", \"transb\": " +
                    (b_t ? "true" : "false") + ", \"inputs\": \"" + type_name<In>() + "\", \"accumulate\": \"" +
                    type_name<T>() + "\", \"device\": " + std::to_string(mg::sim::stream_device(handle->stream)) +
                    ", \"stream\": " + std::to_string(mg::sim::ledger::stream_number(handle->stream)),
        true);
  if (mg::sim::ledger::record_only()) return CUBLAS_STATUS_SUCCESS;
  const T a = *alpha, b = *beta;  // host pointers (CUBLAS_POINTER_MODE_HOST), read at the call
  const cudaError_t err = mg::sim::enqueue(handle->stream, [=] {
    for (int i = 0; i < batch; ++i) {
      const In* Ai = A + i * stride_a;
      const In* Bi = B + i * stride_b;
      T* Ci = C + i * stride_c;
      for (int c = 0; c < n; ++c)
        for (int r = 0; r < m; ++r) {
          T sum = T(0);
          for (int p = 0; p < k; ++p) {
            const T x = T(a_t ? Ai[p + int64_t(r) * lda] : Ai[r + int64_t(p) * lda]);
            const T y = T(b_t ? Bi[c + int64_t(p) * ldb] : Bi[p + int64_t(c) * ldb]);
            sum += x * y;
          }
          T& out = Ci[r + int64_t(c) * ldc];
          out = b == T(0) ? a * sum : a * sum + b * out;
        }
    }
  });
  return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an unsupported value or parameter was passed to the function";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    default:
      return "unknown error";
  }
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                                         int n, int k, const float* alpha, const float* A, int lda,
                                         long long int stride_a, const float* B, int ldb, long long int stride_b,
                                         const float* beta, float* C, int ldc, long long int stride_c, int batch) {
  return gemm_strided_batched(handle, ta, tb, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                              stride_c, batch);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                                         int n, int k, const double* alpha, const double* A, int lda,
                                         long long int stride_a, const double* B, int ldb, long long int stride_b,
                                         const double* beta, double* C, int ldc, long long int stride_c, int batch) {
  return gemm_strided_batched(handle, ta, tb, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                              stride_c, batch);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                                          int n, int k, const void* alpha, const void* A, cudaDataType a_type, int lda,
                                          long long int stride_a, const void* B, cudaDataType b_type, int ldb,
                                          long long int stride_b, const void* beta, void* C, cudaDataType c_type,
                                          int ldc, long long int stride_c, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t) {
  if (c_type != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F || a_type != b_type) return CUBLAS_STATUS_NOT_SUPPORTED;
  const auto* a = static_cast<const float*>(alpha);
  const auto* b = static_cast<const float*>(beta);
  auto* c = static_cast<float*>(C);
  if (a_type == CUDA_R_16BF)
    return gemm_strided_batched(handle, ta, tb, m, n, k, a, static_cast<const Bf16*>(A), lda, stride_a,
                                static_cast<const Bf16*>(B), ldb, stride_b, b, c, ldc, stride_c, batch);
  if (a_type == CUDA_R_16F)
    return gemm_strided_batched(handle, ta, tb, m, n, k, a, static_cast<const Fp16*>(A), lda, stride_a,
                                static_cast<const Fp16*>(B), ldb, stride_b, b, c, ldc, stride_c, batch);
  if (a_type == CUDA_R_32F)
    return gemm_strided_batched(handle, ta, tb, m, n, k, a, static_cast<const float*>(A), lda, stride_a,
                                static_cast<const float*>(B), ldb, stride_b, b, c, ldc, stride_c, batch);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}
