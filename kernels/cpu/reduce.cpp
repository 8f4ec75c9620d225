// kernels/cpu/reduce.cpp — row reductions on the CPU: sum, mean, max, min and argmax of each
// row of a contiguous (rows, cols) tensor into out (rows,).
//
//   sum  = x_0 + ... + x_{cols-1}    Float32 and Float64 accumulate in float64, Int64 in int64
//   mean = sum / cols                floating dtypes only; an empty row gives NaN
//   max, min                         NaN propagates (the first NaN of the row is the result)
//   argmax                           index of the first maximum; a NaN counts as the maximum,
//                                    so the first NaN wins
//
// Accumulation order, the rule that keeps results independent of the thread count: a row is
// cut into blocks of kBlock elements; each block is reduced on its own (left to right, the
// compiler may vectorise a sum within a block) and the block results are combined in block
// order. Work split: many rows -> contiguous chunks of rows per thread; fewer rows than
// threads -> the blocks of each row are shared among the threads. Both paths apply the same
// rule, so a row reduces to the same bits either way.
// Empty rows: sum 0, mean NaN; max, min and argmax throw (the functional API rejects them).
#include <cmath>
#include <limits>
#include <vector>

#include "multigrad/kernels/cpu/cpu_kernels.h"
#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/functors.h"

namespace mg::kernels::cpu {
namespace {

// Elements per block: 32 KiB of float64, which stays in L1 while it is summed.
constexpr int64_t kBlock = 4096;

// Sum of x[begin, end) in the accumulator type.
template <class T>
struct SumReducer {
  using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  Acc block(const T* x, int64_t begin, int64_t end) const {
    Acc acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; ++i) acc += Acc(x[i]);
    return acc;
  }
  Acc combine(Acc a, Acc b) const { return a + b; }
};

// Max or min (Op = MaximumOp / MinimumOp) of a non-empty range, NaN propagating.
template <class T, class Op>
struct ExtremumReducer {
  using Acc = T;
  Acc block(const T* x, int64_t begin, int64_t end) const {
    Acc acc = x[begin];
    for (int64_t i = begin + 1; i < end; ++i) acc = Op{}(acc, x[i]);
    return acc;
  }
  Acc combine(Acc a, Acc b) const { return Op{}(a, b); }
};

// (value, index) of the first maximum of a non-empty range; the first NaN beats everything.
template <class T>
struct ArgmaxReducer {
  struct Acc {
    T value;
    int64_t index;
  };
  Acc block(const T* x, int64_t begin, int64_t end) const {
    Acc best{x[begin], begin};
    for (int64_t i = begin; i < end; ++i) {
      if (m_isnan(x[i])) return {x[i], i};
      if (x[i] > best.value) best = {x[i], i};
    }
    return best;
  }
  // `a` comes from an earlier block than `b`, so ties keep `a`.
  Acc combine(Acc a, Acc b) const {
    if (m_isnan(a.value)) return a;
    if (m_isnan(b.value) || b.value > a.value) return b;
    return a;
  }
};

// out[r] = finish(reduction of row r) for every row of the contiguous (rows, cols) `in`;
// cols > 0.
template <class T, class Reducer, class Finish>
void reduce_each_row(const Device& device, const T* in, int64_t rows, int64_t cols,
                     const Reducer& reducer, const Finish& finish) {
  using Acc = typename Reducer::Acc;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  auto reduce_block = [&](int64_t r, int64_t k) {
    return reducer.block(in + r * cols, k * kBlock, std::min(cols, (k + 1) * kBlock));
  };

  if (blocks == 1 || rows >= cpu_thread_budget(device)) {
    const int64_t rows_per_thread = std::max<int64_t>(1, kGrain / cols);
    parallel_for(device, rows, rows_per_thread, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        Acc acc = reduce_block(r, 0);
        for (int64_t k = 1; k < blocks; ++k) acc = reducer.combine(acc, reduce_block(r, k));
        finish(r, acc);
      }
    });
    return;
  }
  // Few long rows: the threads share each row's blocks. One small vector per row, O(cols/kBlock).
  const int64_t blocks_per_thread = std::max<int64_t>(1, kGrain / kBlock);
  std::vector<Acc> partial(size_t(blocks), Acc{});
  for (int64_t r = 0; r < rows; ++r) {
    parallel_for(device, blocks, blocks_per_thread, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) partial[size_t(k)] = reduce_block(r, k);
    });
    Acc acc = partial[0];
    for (int64_t k = 1; k < blocks; ++k) acc = reducer.combine(acc, partial[size_t(k)]);
    finish(r, acc);
  }
}

// Checks the layout both row kernels share; returns (rows, cols).
std::pair<int64_t, int64_t> check_rows(const char* name, const Tensor& in, const Tensor& out) {
  MG_CHECK(in.dim() == 2 && in.is_contiguous(), name, ": input must be contiguous (rows, cols), got shape ",
           in.shape(), " strides ", in.strides());
  MG_CHECK(out.is_contiguous() && out.numel() == in.size(0), name, ": output must be contiguous with ",
           in.size(0), " elements, got shape ", out.shape(), " strides ", out.strides());
  return {in.size(0), in.size(1)};
}

}  // namespace

void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out) {
  const char* name = op_name(op);
  const auto [rows, cols] = check_rows(name, in, out);
  MG_CHECK(in.dtype() == out.dtype(), name, ": input dtype ", in.dtype(), " differs from output dtype ",
           out.dtype());
  MG_CHECK(op != ReduceOp::Mean || is_floating(in.dtype()), "mean: expected a floating tensor, got ",
           in.dtype());
  MG_CHECK(cols > 0 || rows == 0 || op == ReduceOp::Sum || op == ReduceOp::Mean, name,
           ": cannot reduce an empty row (input shape ", in.shape(), ")");

  MG_DISPATCH_ARITH(in.dtype(), name, [&] {
    using T = scalar_t;
    T* o = out.data<T>();  // (rows,)
    if (rows == 0) return;
    if (cols == 0) {
      const double empty = op == ReduceOp::Sum ? 0.0 : std::numeric_limits<double>::quiet_NaN();
      for (int64_t r = 0; r < rows; ++r) o[r] = T(empty);
      return;
    }
    const T* x = in.data<T>();  // (rows, cols)
    switch (op) {
      case ReduceOp::Sum:
        return reduce_each_row(out.device(), x, rows, cols, SumReducer<T>{},
                               [&](int64_t r, auto acc) { o[r] = T(acc); });
      case ReduceOp::Mean:
        return reduce_each_row(out.device(), x, rows, cols, SumReducer<T>{},
                               [&](int64_t r, auto acc) { o[r] = T(double(acc) / double(cols)); });
      case ReduceOp::Max:
        return reduce_each_row(out.device(), x, rows, cols, ExtremumReducer<T, MaximumOp>{},
                               [&](int64_t r, T acc) { o[r] = acc; });
      case ReduceOp::Min:
        return reduce_each_row(out.device(), x, rows, cols, ExtremumReducer<T, MinimumOp>{},
                               [&](int64_t r, T acc) { o[r] = acc; });
    }
  });
}

void argmax_rows(const Tensor& in, const Tensor& out) {
  const auto [rows, cols] = check_rows("argmax", in, out);
  MG_CHECK(out.dtype() == DType::Int64, "argmax: output must be Int64, got ", out.dtype());
  MG_CHECK(cols > 0 || rows == 0, "argmax: cannot reduce an empty row (input shape ", in.shape(), ")");
  if (rows == 0) return;
  int64_t* o = out.data<int64_t>();  // (rows,)
  MG_DISPATCH_ARITH(in.dtype(), "argmax", [&] {
    using Reducer = ArgmaxReducer<scalar_t>;
    reduce_each_row(out.device(), in.data<scalar_t>(), rows, cols, Reducer{},
                    [&](int64_t r, typename Reducer::Acc acc) { o[r] = acc.index; });
  });
}

}  // namespace mg::kernels::cpu
