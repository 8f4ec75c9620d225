// kernels/cpu/exp_rows.cpp — see exp_rows.h.
#include "multigrad/kernels/cpu/exp_rows.h"

#include "multigrad/kernels/cpu/isa.h"
#include "multigrad/kernels/functors.h"
#include "multigrad/kernels/loss_functors.h"

namespace mg::kernels::cpu {
namespace {

constexpr int kLanes = 16;  // partial sums: two AVX-512 or four AVX2 registers of doubles

// The three loops for one instruction set (cpu/isa.h).
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

MG_DEFINE_FOR_EACH_ISA(MG_EXP_ROW_LOOPS)
#undef MG_EXP_ROW_LOOPS

}  // namespace

double sum_exp_shifted(const float* x, int64_t n, float shift) { MG_CALL_BEST_ISA(sum_exp_shifted, x, n, shift); }

double exp_shifted(const float* x, float* out, int64_t n, float shift) {
  MG_CALL_BEST_ISA(exp_shifted, x, out, n, shift);
}

void cross_entropy_grad_row(const float* x, float* grad, int64_t n, float lse, int64_t target, float scale) {
  MG_CALL_BEST_ISA(cross_entropy_grad_row, x, grad, n, lse, target, scale);
}

}  // namespace mg::kernels::cpu
