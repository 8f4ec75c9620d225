// kernels/cpu/softmax.cpp — softmax and log-softmax of each row of a contiguous (rows, cols)
// floating tensor on the CPU.
//
//   m = max_j x_j,   s = sum_j exp(x_j - m)
//   softmax:     out_j = exp(x_j - m) / s
//   log-softmax: out_j = x_j - m - log(s)
// Subtracting the row max keeps every exp() argument <= 0, so nothing overflows (rows such as
// (1000, -1000) are exact) and s >= 1. exp() runs in the element type (float: exp_poly in
// vector loops, kernels/cpu/exp_rows.h); s accumulates in float64 for both dtypes. A NaN
// anywhere in a row makes the whole row NaN, as in PyTorch.
// Work split: contiguous chunks of rows per thread (parallel.h); a row is never split.
// out may be the same tensor as in: each element is read before it is written.
#include <type_traits>

#include "multigrad/kernels/cpu/cpu_kernels.h"
#include "multigrad/kernels/cpu/exp_rows.h"
#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/functors.h"

namespace mg::kernels::cpu {
namespace {

template <class T>
void softmax_row(const T* x, T* out, int64_t cols, bool log) {  // x, out: (cols,)
  T m = x[0];
  for (int64_t j = 1; j < cols; ++j) m = MaximumOp{}(m, x[j]);
  if constexpr (std::is_same_v<T, float>) {  // vector loops (exp_rows.h)
    if (log) {
      const float log_s = float(std::log(sum_exp_shifted(x, cols, m)));
      for (int64_t j = 0; j < cols; ++j) out[j] = x[j] - m - log_s;
    } else {
      const float inv_s = float(1.0 / exp_shifted(x, out, cols, m));
      for (int64_t j = 0; j < cols; ++j) out[j] *= inv_s;
    }
    return;
  }
  double s = 0;
  if (log) {
    for (int64_t j = 0; j < cols; ++j) s += double(m_exp(x[j] - m));
    const T log_s = T(std::log(s));
    for (int64_t j = 0; j < cols; ++j) out[j] = x[j] - m - log_s;
  } else {
    for (int64_t j = 0; j < cols; ++j) {
      out[j] = m_exp(x[j] - m);
      s += double(out[j]);
    }
    const T inv_s = T(1.0 / s);
    for (int64_t j = 0; j < cols; ++j) out[j] *= inv_s;
  }
}

}  // namespace

void softmax_rows(const Tensor& in, const Tensor& out, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  MG_CHECK(in.dim() == 2 && in.is_contiguous(), name, ": input must be contiguous (rows, cols), got shape ",
           in.shape(), " strides ", in.strides());
  MG_CHECK(out.shape() == in.shape() && out.is_contiguous(), name, ": output must be contiguous ",
           in.shape(), ", got shape ", out.shape(), " strides ", out.strides());
  MG_CHECK(in.dtype() == out.dtype(), name, ": input dtype ", in.dtype(), " differs from output dtype ",
           out.dtype());
  const int64_t rows = in.size(0), cols = in.size(1);
  MG_DISPATCH_FLOATING(in.dtype(), name, [&] {
    if (rows == 0 || cols == 0) return;
    const scalar_t* x = in.data<scalar_t>();  // (rows, cols)
    scalar_t* o = out.data<scalar_t>();       // (rows, cols)
    // A row costs a few passes with an exp each: a thread pays for itself from ~kGrain/4 elements.
    const int64_t rows_per_thread = std::max<int64_t>(1, kGrain / 4 / cols);
    parallel_for(out.device(), rows, rows_per_thread, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) softmax_row(x + r * cols, o + r * cols, cols, log);
    });
  });
}

}  // namespace mg::kernels::cpu
