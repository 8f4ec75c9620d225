// kernels/cpu/matmul_bf16.h — GEMMs whose operands hold bfloat16 values, multiplied in bfloat16
// by oneDNN's AVX-512 BF16 kernels (matmul_bf16.cpp).
//
//   C (m, n) = op(A) (m, k) @ op(B) (k, n)     A, B bfloat16; C float32, assigned
//
// Each product of two bf16 values is exact in float32 and the sums accumulate in float32, so the
// result is a float32 GEMM of the same values up to the order of the additions, except that
// VDPBF16PS treats bf16 subnormals (below 2^-126) as zero. On Zen 5 one thread ran these ~4x
// faster than OpenBLAS's float32 GEMM (benchmarks/NOTES.md), which is what autocast's bf16 matmuls
// and linears (autograd/autocast.h) come here for.
// Threads: C is cut into blocks of rows exactly as blas.h cuts a float32 GEMM (blas.h's
// gemm_block: a share per thread, or kDeterministicBlock rows in deterministic mode), and each
// block is one oneDNN call on one thread, so the result depends on the shapes alone in
// deterministic mode. Only rows are cut: a block of columns would be a strided destination, which
// oneDNN 2.6 hands to a slower kernel.
#pragma once

#include <cblas.h>

#include "multigrad/core/device.h"
#include "multigrad/core/dtype.h"

namespace mg::kernels::cpu {

// Whether this build and CPU multiply bf16 natively: oneDNN is linked and runs its AVX-512 BF16
// (or AMX) kernels. Elsewhere the callers multiply the same values in float32 (exact emulation).
bool runs_bf16_gemm();

// The peak bf16 FLOPs per cycle of one thread in the kernels gemm_bf16 runs, for MFU (cli/peak.h):
// AMX, 1024 (one TMUL: a 16x32 by 32x16 bf16 tile product every 16 cycles, Intel's figure per
// core); AVX-512 BF16, 128 (two FMA pipes x 16 float32 lanes x VDPBF16PS's 2 products, 2 FLOPs
// each). 0 when runs_bf16_gemm() is false. Like cpu/isa.h's float32 peak, an upper bound.
int bf16_gemm_flops_per_cycle();
const char* bf16_gemm_isa_name();  // "AMX", "AVX-512 BF16", or "none"

// dst[j] = src[j] rounded to bfloat16 (nearest even; NaN stays NaN), j < n: the pass that gives a
// GEMM its bf16 operands (and kernels::copy its Float32 -> BFloat16 casts), in the widest vectors
// this CPU has (cpu/isa.h).
void round_to_bf16(const float* src, BFloat16* dst, int64_t n);

// The GEMM above on `device`'s threads; requires runs_bf16_gemm(), and lda >= the stored rows'
// length as for BLAS (row-major; CblasTrans reads the operand column-major).
void gemm_bf16(const Device& device, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const BFloat16* a,
               int lda, const BFloat16* b, int ldb, float* c, int ldc);
// The same GEMM on the calling thread alone (one oneDNN call: for kernels that split the work
// themselves, as the attention's blocks do); m, n, k > 0.
void gemm_bf16_on_thread(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const BFloat16* a, int lda,
                         const BFloat16* b, int ldb, float* c, int ldc);

}  // namespace mg::kernels::cpu
