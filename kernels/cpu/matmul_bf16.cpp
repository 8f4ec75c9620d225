// kernels/cpu/matmul_bf16.cpp — bf16 GEMMs through oneDNN (see matmul_bf16.h).
#include "kernels/cpu/matmul_bf16.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/isa.h"

#if MG_WITH_ONEDNN
#include "kernels/cpu/onednn.h"
#endif

namespace mg::kernels::cpu {
namespace {

#define MG_ROUND_TO_BF16(suffix, attributes)                                                    \
  attributes void round_to_bf16##suffix(const float* src, BFloat16* dst, int64_t n) {         \
    _Pragma("omp simd") for (int64_t j = 0; j < n; ++j) dst[j].bits = BFloat16::round_from_float(src[j]); \
  }
MG_DEFINE_FOR_EACH_ISA(MG_ROUND_TO_BF16)
#undef MG_ROUND_TO_BF16

}  // namespace

void round_to_bf16(const float* src, BFloat16* dst, int64_t n) { MG_CALL_BEST_ISA(round_to_bf16, src, dst, n); }

#if MG_WITH_ONEDNN

namespace {

using dnnl::memory;

// A (rows, cols) matrix as BLAS describes it, in oneDNN's strides.
memory::dims strides(CBLAS_TRANSPOSE trans, int ld) {
  return trans == CblasNoTrans ? memory::dims{ld, 1} : memory::dims{1, ld};
}

// One block of C on the calling thread: oneDNN given one thread (it would size its work, and may
// split K, for omp_get_max_threads()); inside our OpenMP region its own loops run serially anyway.
// Descriptors and primitives come from oneDNN's primitive cache after the first call of a shape
// (~2 us against ~0.4 ms for the first).
void gemm_one_thread(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const BFloat16* a, int lda,
                     const BFloat16* b, int ldb, float* c, int ldc) {
  const OmpThreads one(1);
  dnnl::engine& engine = onednn_engine();
  const memory::desc a_desc({m, k}, memory::data_type::bf16, strides(ta, lda));
  const memory::desc b_desc({k, n}, memory::data_type::bf16, strides(tb, ldb));
  const memory::desc c_desc({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), engine);
  dnnl::stream stream(engine);
  dnnl::matmul(pd).execute(stream, {{DNNL_ARG_SRC, memory(a_desc, engine, const_cast<BFloat16*>(a))},
                                    {DNNL_ARG_WEIGHTS, memory(b_desc, engine, const_cast<BFloat16*>(b))},
                                    {DNNL_ARG_DST, memory(c_desc, engine, c)}});
  stream.wait();
}

bool runs_amx() {
  const auto amx = unsigned(dnnl_cpu_isa_avx512_core_amx);
  static const bool runs = (unsigned(dnnl_get_effective_cpu_isa()) & amx) == amx;
  return runs;
}

}  // namespace

bool runs_bf16_gemm() {
  // The ISAs are bit sets: AVX-512 BF16's bits are in AMX's too, not in AVX2 VNNI's larger value.
  const auto bf16 = unsigned(dnnl_cpu_isa_avx512_core_bf16);
  static const bool runs = (unsigned(dnnl_get_effective_cpu_isa()) & bf16) == bf16;
  return runs;
}

int bf16_gemm_flops_per_cycle() { return !runs_bf16_gemm() ? 0 : runs_amx() ? 1024 : 128; }

const char* bf16_gemm_isa_name() { return !runs_bf16_gemm() ? "none" : runs_amx() ? "AMX" : "AVX-512 BF16"; }

void gemm_bf16(const Device& device, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const BFloat16* a,
               int lda, const BFloat16* b, int ldb, float* c, int ldc) {
  MG_CHECK(runs_bf16_gemm(), "gemm_bf16: this build or CPU has no bf16 GEMM (runs_bf16_gemm() is false)");
  const int block = gemm_block(device, m, n, k, m);
  const int blocks = (m + block - 1) / block;
  parallel_for(device, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      const int begin = int(blk) * block, rows = std::min(block, m - begin);
      const BFloat16* a_rows = ta == CblasNoTrans ? a + int64_t(begin) * lda : a + begin;
      gemm_one_thread(ta, tb, rows, n, k, a_rows, lda, b, ldb, c + int64_t(begin) * ldc, ldc);
    }
  });
}

#else  // no oneDNN: the callers emulate

bool runs_bf16_gemm() { return false; }
int bf16_gemm_flops_per_cycle() { return 0; }
const char* bf16_gemm_isa_name() { return "none"; }

void gemm_bf16(const Device&, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, const BFloat16*, int, const BFloat16*,
               int, float*, int) {
  MG_ERROR("gemm_bf16: multigrad was built without oneDNN (runs_bf16_gemm() is false)");
}

#endif

}  // namespace mg::kernels::cpu
