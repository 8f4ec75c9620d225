// kernels/cpu/exp_rows.h — the exponentials of float softmax and cross-entropy rows, in vector
// loops (internal to kernels/cpu/).
//
// libm's expf is a scalar call: a (4096, 1000) cross-entropy spends most of its time there.
// These loops use ExpNonPositiveOp (exp_poly, kernels/functors.h) and are compiled for AVX-512,
// AVX2 and baseline x86-64, picked at run time (cpu/isa.h). Their arguments are
// x - shift <= 0 (shift = the row's max or its log-sum-exp).
// Sums accumulate in float64, element j into partial sum j % 16, the 16 partial sums added in
// order at the end: with no FMA contraction (-ffp-contract=off), the same operations in the same
// order whichever instruction set runs, so the same bits; and a row is never split, so the same
// for any thread count.
#pragma once

#include <cstdint>

namespace mg::kernels::cpu {

// sum_j e^(x_j - shift), j in [0, n).
double sum_exp_shifted(const float* x, int64_t n, float shift);
// out_j = e^(x_j - shift), and returns sum_j out_j (summed as above); out may be x.
double exp_shifted(const float* x, float* out, int64_t n, float shift);
// grad_j = cross_entropy_grad(x_j, lse, j == target, scale) (kernels/loss_functors.h).
void cross_entropy_grad_row(const float* x, float* grad, int64_t n, float lse, int64_t target, float scale);

}  // namespace mg::kernels::cpu
