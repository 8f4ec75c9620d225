// kernels/cpu/loss.cpp — fused softmax cross-entropy on the CPU (formulas in kernels/loss.h).
//
// Forward, per row n of x (N, C): m = max_c x, s = sum_c exp(x - m) accumulated in float64,
// lse = m + log s, loss = lse - x[t]. Backward, per element: (exp(x - lse) - [c == t]) * g / N
// (kernels::cross_entropy_grad, shared with CUDA). Float rows run their exponentials in the
// vector loops of kernels/cpu/exp_rows.h (exp_poly), double rows through libm.
// Work split: contiguous chunks of rows per thread (parallel.h); a row is never split, so the
// result does not depend on the thread count.
// Layouts are checked by the dispatch (kernels/loss.cpp). Targets are all checked before any
// thread starts: an exception cannot leave an OpenMP region.
// Outputs are assigned (=).
#include <algorithm>
#include <cmath>

#include "multigrad/kernels/cpu/exp_rows.h"
#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/loss.h"
#include "multigrad/kernels/loss_functors.h"

namespace mg::kernels::cpu {
namespace {

// A row costs a few passes with an exp each: a thread pays for itself from ~kGrain/4 elements.
int64_t rows_per_thread(int64_t cols) { return std::max<int64_t>(1, kGrain / 4 / std::max<int64_t>(cols, 1)); }

// sum_c exp(row[c] - m) in float64; float rows in exp_rows.h's vector loop.
double row_sum_exp(const double* row, int64_t cols, double m) {
  double s = 0;
  for (int64_t c = 0; c < cols; ++c) s += m_exp(row[c] - m);
  return s;
}
double row_sum_exp(const float* row, int64_t cols, float m) { return sum_exp_shifted(row, cols, m); }

// One row of the gradient; float rows in exp_rows.h's vector loop.
void grad_row(const double* x, double* g, int64_t cols, double lse, int64_t target, double scale) {
  for (int64_t c = 0; c < cols; ++c) g[c] = cross_entropy_grad(x[c], lse, c == target, scale);
}
void grad_row(const float* x, float* g, int64_t cols, float lse, int64_t target, float scale) {
  cross_entropy_grad_row(x, g, cols, lse, target, scale);
}

}  // namespace

void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse) {
  const int64_t rows = logits.size(0), cols = logits.size(1);
  const int64_t* t = targets.data<int64_t>();  // (N)
  for (int64_t r = 0; r < rows; ++r)
    MG_CHECK(t[r] >= 0 && t[r] < cols, "cross_entropy: target ", t[r], " (row ", r, ") is out of range [0, C) for C = ",
             cols);
  MG_DISPATCH_FLOATING(logits.dtype(), "cross_entropy", [&] {
    using T = scalar_t;
    const T* x = logits.data<T>();  // (N, C)
    T* loss = losses.data<T>();     // (N)
    T* l = lse.data<T>();           // (N)
    parallel_for(logits.device(), rows, rows_per_thread(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* row = x + r * cols;
        T m = row[0];
        for (int64_t c = 1; c < cols; ++c) m = MaximumOp{}(m, row[c]);
        l[r] = m + T(std::log(row_sum_exp(row, cols, m)));
        loss[r] = l[r] - row[t[r]];
      }
    });
  });
}

void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_loss,
                       const Tensor& grad_logits) {
  const int64_t rows = logits.size(0), cols = logits.size(1);
  if (rows == 0) return;
  MG_DISPATCH_FLOATING(logits.dtype(), "cross_entropy backward", [&] {
    using T = scalar_t;
    const T* x = logits.data<T>();        // (N, C)
    const int64_t* t = targets.data<int64_t>();  // (N)
    const T* l = lse.data<T>();           // (N)
    T* gx = grad_logits.data<T>();        // (N, C)
    const T scale = *grad_loss.data<T>() / T(rows);
    parallel_for(logits.device(), rows, rows_per_thread(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) grad_row(x + r * cols, gx + r * cols, cols, l[r], t[r], scale);
    });
  });
}

}  // namespace mg::kernels::cpu
