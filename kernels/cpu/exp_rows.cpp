// kernels/cpu/exp_rows.cpp — see exp_rows.h.
#include "kernels/cpu/exp_rows.h"

#include "kernels/functors.h"
#include "kernels/loss_functors.h"

namespace mg::kernels::cpu {
namespace {

constexpr int kLanes = 16;  // partial sums: two AVX-512 or four AVX2 registers of doubles

// The three loops for one instruction set; -ffp-contract=off (CMakeLists.txt) keeps the
// instruction sets' results bit-identical.
#define MG_EXP_ROW_LOOPS(suffix, attributes)                                                             \
  attributes double sum_exp_shifted##suffix(const float* x, int64_t n, float shift) {                   \
    const ExpNonPositiveOp exp;                                                                        \
    double partial[kLanes] = {};                                                                       \
    int64_t j = 0;                                                                                     \
    for (; j + kLanes <= n; j += kLanes) {                                                             \
      _Pragma("omp simd") for (int l = 0; l < kLanes; ++l) partial[l] += double(exp(x[j + l] - shift)); \
    }                                                                                                  \
    for (int l = 0; j + l < n; ++l) partial[l] += double(exp(x[j + l] - shift));                      \
    double s = 0;                                                                                      \
    for (int l = 0; l < kLanes; ++l) s += partial[l];                                                  \
    return s;                                                                                          \
  }                                                                                                    \
  attributes double exp_shifted##suffix(const float* x, float* out, int64_t n, float shift) {           \
    const ExpNonPositiveOp exp;                                                                        \
    double partial[kLanes] = {};                                                                       \
    int64_t j = 0;                                                                                     \
    for (; j + kLanes <= n; j += kLanes) {                                                             \
      _Pragma("omp simd") for (int l = 0; l < kLanes; ++l) {                                           \
        out[j + l] = exp(x[j + l] - shift);                                                            \
        partial[l] += double(out[j + l]);                                                              \
      }                                                                                                \
    }                                                                                                  \
    for (int l = 0; j + l < n; ++l) {                                                                  \
      out[j + l] = exp(x[j + l] - shift);                                                              \
      partial[l] += double(out[j + l]);                                                                \
    }                                                                                                  \
    double s = 0;                                                                                      \
    for (int l = 0; l < kLanes; ++l) s += partial[l];                                                  \
    return s;                                                                                          \
  }                                                                                                    \
  attributes void cross_entropy_grad_row##suffix(const float* x, float* grad, int64_t n, float lse,      \
                                                 int64_t target, float scale) {                         \
    _Pragma("omp simd") for (int64_t j = 0; j < n; ++j) grad[j] =                                      \
        cross_entropy_grad(x[j], lse, j == target, scale, ExpNonPositiveOp{});                         \
  }

MG_EXP_ROW_LOOPS(_baseline, )
#if defined(__x86_64__) && defined(__GNUC__)
MG_EXP_ROW_LOOPS(_avx2, __attribute__((target("avx2"))))
MG_EXP_ROW_LOOPS(_avx512, __attribute__((target("avx512f"))))
#endif
#undef MG_EXP_ROW_LOOPS

enum class Isa { Baseline, Avx2, Avx512 };

Isa best_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const Isa isa = __builtin_cpu_supports("avx512f") ? Isa::Avx512
                         : __builtin_cpu_supports("avx2")  ? Isa::Avx2
                                                           : Isa::Baseline;
  return isa;
#else
  return Isa::Baseline;
#endif
}

}  // namespace

#if defined(__x86_64__) && defined(__GNUC__)
#define MG_DISPATCH_ISA(fn, ...)                                   \
  switch (best_isa()) {                                            \
    case Isa::Avx512: return fn##_avx512(__VA_ARGS__);             \
    case Isa::Avx2: return fn##_avx2(__VA_ARGS__);                 \
    case Isa::Baseline: break;                                     \
  }                                                                \
  return fn##_baseline(__VA_ARGS__)
#else
#define MG_DISPATCH_ISA(fn, ...) return fn##_baseline(__VA_ARGS__)
#endif

double sum_exp_shifted(const float* x, int64_t n, float shift) { MG_DISPATCH_ISA(sum_exp_shifted, x, n, shift); }

double exp_shifted(const float* x, float* out, int64_t n, float shift) {
  MG_DISPATCH_ISA(exp_shifted, x, out, n, shift);
}

void cross_entropy_grad_row(const float* x, float* grad, int64_t n, float lse, int64_t target, float scale) {
  MG_DISPATCH_ISA(cross_entropy_grad_row, x, grad, n, lse, target, scale);
}

#undef MG_DISPATCH_ISA

}  // namespace mg::kernels::cpu
