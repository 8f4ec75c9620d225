// kernels/cpu/matmul_bf16.cpp — bf16 GEMMs through oneDNN (see matmul_bf16.h).
#include "multigrad/kernels/cpu/matmul_bf16.h"

#include <algorithm>
#include <unordered_map>

#include "multigrad/core/error.h"
#include "multigrad/kernels/cpu/blas.h"
#include "multigrad/kernels/cpu/isa.h"

#if MG_WITH_ONEDNN
#include "multigrad/kernels/cpu/onednn.h"
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

namespace {

// A GEMM's shape and layout: what a matmul primitive is made for.
struct GemmShape {
  CBLAS_TRANSPOSE ta, tb;
  int m, n, k, lda, ldb, ldc;
  bool operator==(const GemmShape&) const = default;
};
struct GemmShapeHash {
  size_t operator()(const GemmShape& s) const {
    size_t h = size_t(s.ta) * 2 + size_t(s.tb);
    for (int x : {s.m, s.n, s.k, s.lda, s.ldb, s.ldc}) h = h * 1000003u + size_t(x);
    return h;
  }
};

// A primitive and its operands' memory objects, whose data handles each call sets.
struct GemmPrimitive {
  dnnl::matmul matmul;
  memory a, b, c;
};

// Primitives made on this thread, one per shape: looking one up in oneDNN's own cache builds and
// hashes its descriptors again, ~2 us a call, as long as the product of a block of attention
// (64 x 128 x 32). A model has few shapes; past kMaxShapes the map starts over.
constexpr size_t kMaxShapes = 4096;
GemmPrimitive& primitive_for(const GemmShape& s) {
  thread_local std::unordered_map<GemmShape, GemmPrimitive, GemmShapeHash> made;
  if (auto it = made.find(s); it != made.end()) return it->second;
  if (made.size() >= kMaxShapes) made.clear();
  dnnl::engine& engine = onednn_engine();
  const memory::desc a_desc({s.m, s.k}, memory::data_type::bf16, strides(s.ta, s.lda));
  const memory::desc b_desc({s.k, s.n}, memory::data_type::bf16, strides(s.tb, s.ldb));
  const memory::desc c_desc({s.m, s.n}, memory::data_type::f32, memory::dims{s.ldc, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), engine);
  GemmPrimitive made_now{dnnl::matmul(pd), memory(a_desc, engine, DNNL_MEMORY_NONE),
                         memory(b_desc, engine, DNNL_MEMORY_NONE), memory(c_desc, engine, DNNL_MEMORY_NONE)};
  return made.emplace(s, std::move(made_now)).first->second;
}

}  // namespace

// One oneDNN call, given one thread (it would size its work, and may split K, for
// omp_get_max_threads()); inside our OpenMP region its own loops run serially anyway.
void gemm_bf16_on_thread(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const BFloat16* a, int lda,
                         const BFloat16* b, int ldb, float* c, int ldc) {
  MG_CHECK(runs_bf16_gemm(), "gemm_bf16: this build or CPU has no bf16 GEMM (runs_bf16_gemm() is false)");
  const OmpThreads one(1);
  GemmPrimitive& p = primitive_for({ta, tb, m, n, k, lda, ldb, ldc});
  p.a.set_data_handle(const_cast<BFloat16*>(a));
  p.b.set_data_handle(const_cast<BFloat16*>(b));
  p.c.set_data_handle(c);
  thread_local dnnl::stream stream(onednn_engine());
  p.matmul.execute(stream, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
  stream.wait();
}

void gemm_bf16(const Device& device, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const BFloat16* a,
               int lda, const BFloat16* b, int ldb, float* c, int ldc) {
  MG_CHECK(runs_bf16_gemm(), "gemm_bf16: this build or CPU has no bf16 GEMM (runs_bf16_gemm() is false)");
  const int block = gemm_block(device, m, n, k, m);
  const int blocks = (m + block - 1) / block;
  parallel_for(device, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      const int begin = int(blk) * block, rows = std::min(block, m - begin);
      const BFloat16* a_rows = ta == CblasNoTrans ? a + int64_t(begin) * lda : a + begin;
      gemm_bf16_on_thread(ta, tb, rows, n, k, a_rows, lda, b, ldb, c + int64_t(begin) * ldc, ldc);
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
void gemm_bf16_on_thread(CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, const BFloat16*, int, const BFloat16*, int,
                         float*, int) {
  MG_ERROR("gemm_bf16: multigrad was built without oneDNN (runs_bf16_gemm() is false)");
}

#endif

}  // namespace mg::kernels::cpu
