// kernels/cuda/reduce.cu — row reductions: sum, mean, max, min and argmax of each row.
//
// What it computes, for in (rows, cols) and out (rows), both contiguous:
//   sum:    out[r] = sum_c in[r, c]                 (0 for an empty row)
//   mean:   out[r] = sum_c in[r, c] / cols          (NaN for an empty row)
//   max/min:out[r] = max_c / min_c in[r, c]         (NaN anywhere in the row gives NaN)
//   argmax: out[r] = the first c where in[r, c] is the maximum; a NaN counts as the maximum
//           (the first NaN wins). Ties and order are resolved by (value, -index), a total order,
//           so the result does not depend on the reduction tree.
// The functional API reduces any set of dims by permuting them last and viewing (rows, cols).
//
// Work split: a group of threads per row; the grid loops over rows when there are more groups
// than its blocks (kBlocksPerSm per SM: cuda_utils.cuh), so any number of rows is covered.
//   - cols <= kWarpRowCols: one warp per row, kRowsPerBlock rows per block; lanes stride over the
//     row (neighbouring lanes read neighbouring elements: coalesced), then a butterfly
//     __shfl_xor_sync reduction in registers, no shared memory.
//   - longer rows: one block of kReduceBlock threads per row, threads stride over the row, then a
//     warp-shuffle reduction per warp and a second one over the warps' partials (cuda_utils.cuh).
//   - rows longer than kSplitCols: two passes (sum and mean; max and min too): the first reduces
//     fixed parts of kSplitCols elements of every row on blocks of their own, the second each
//     row's partials, so that one long row (a whole-tensor sum) uses the whole device. The parts
//     do not depend on the device, so neither does the result. argmax keeps one block per row.
// Accumulation: in the element type (Float32 in float32, Int64 in int64): each thread first sums
// its strided elements in order, then the shuffle tree combines the partials.
// Preconditions (asserted in the launchers): in and out contiguous, out has `rows` elements,
// argmax out is Int64. Values are assigned (=).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "multigrad/core/cuda_check.h"
#include "multigrad/core/stream.h"
#include "multigrad/kernels/cuda/cuda_kernels.h"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/functors.h"

namespace mg::kernels::cuda {
namespace {

inline constexpr int64_t kWarpRowCols = 1024;  // up to 32 elements per lane: a warp keeps up
inline constexpr int kRowsPerBlock = 8;        // warp-per-row blocks: 8 warps = 256 threads
inline constexpr int kReduceBlock = 512;       // block-per-row: 16 warps in flight per long row
inline constexpr int64_t kSplitCols = 32768;   // longer rows reduce in parts of this many: 64 per thread

// The running best of an argmax: value and where it was seen.
template <class T>
struct ArgBest {
  T value;
  int64_t index;
};

// An argmax candidate is preferred when it is NaN (and the other is not), larger, or equal with
// a smaller index.
struct ArgmaxCombine {
  template <class T>
  MG_HD ArgBest<T> operator()(ArgBest<T> a, ArgBest<T> b) const {
    bool a_nan = m_isnan(a.value), b_nan = m_isnan(b.value);
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan && a.value != b.value) return a.value > b.value ? a : b;
    return a.index <= b.index ? a : b;
  }
};

// warp_reduce shuffles through shfl_xor (found here by argument-dependent lookup); an ArgBest
// crosses lanes one field at a time.
template <class T>
__device__ __forceinline__ ArgBest<T> shfl_xor(ArgBest<T> v, int lane_mask) {
  return {cuda::shfl_xor(v.value, lane_mask), cuda::shfl_xor(v.index, lane_mask)};
}

// ============================== kernels ==============================

// Reduces the row a thread group owns; every thread of the group gets the result.
// kWarpPerRow: the group is a warp (row = block row + warp), else the whole block (row = block).
template <bool kWarpPerRow, class Acc, class Op>
__device__ Acc reduce_group(Acc partial, Op op, Acc identity) {
  if constexpr (kWarpPerRow) return warp_reduce(partial, op);
  else return block_reduce(partial, op, identity);
}

// A thread's first row, the step to its next one (the grid loops over rows when there are more
// than its groups), its lane in the group and the group's width.
template <bool kWarpPerRow>
__device__ __forceinline__ void row_group(int64_t& first, int64_t& step, int& lane, int& width) {
  if constexpr (kWarpPerRow) {
    first = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
    step = int64_t(gridDim.x) * kRowsPerBlock;
    lane = threadIdx.x % kWarpSize;
    width = kWarpSize;
  } else {
    first = blockIdx.x;
    step = gridDim.x;
    lane = threadIdx.x;
    width = blockDim.x;
  }
}

// out[q] = op-reduction of part p = q % parts of row r = q / parts of in: elements
// [p * chunk, min((p + 1) * chunk, cols)); divided by mean_count unless it is -1 (a mean of no
// elements divides by 0: NaN). With parts = 1
// and chunk = cols, out[r] reduces the whole row r.
template <bool kWarpPerRow, class T, class Op>
__global__ void reduce_rows_kernel(const T* in, T* out, int64_t rows, int64_t cols, int64_t parts, int64_t chunk,
                                   Op op, T identity, int64_t mean_count) {  // in (rows, cols), out (rows * parts)
  int64_t first, step;
  int lane, width;
  row_group<kWarpPerRow>(first, step, lane, width);
  // A warp past the last row leaves; warp groups never sync block-wide, and a block's threads
  // share their rows when the block is the group.
  for (int64_t q = first; q < rows * parts; q += step) {
    const int64_t r = q / parts, begin = (q - r * parts) * chunk, end = std::min(begin + chunk, cols);
    const T* x = in + r * cols;
    T acc = identity;
    for (int64_t c = begin + lane; c < end; c += width) acc = op(acc, x[c]);
    acc = reduce_group<kWarpPerRow>(acc, op, identity);
    if (lane == 0) out[q] = mean_count >= 0 ? DivOp{}(acc, T(mean_count)) : acc;
  }
}

template <bool kWarpPerRow, class T>
__global__ void argmax_rows_kernel(const T* in, int64_t* out, int64_t rows, int64_t cols,
                                   T lowest) {  // in (rows, cols), out (rows)
  int64_t first, step;
  int lane, width;
  row_group<kWarpPerRow>(first, step, lane, width);
  for (int64_t row = first; row < rows; row += step) {
    const T* x = in + row * cols;
    const ArgBest<T> identity{lowest, std::numeric_limits<int64_t>::max()};
    ArgBest<T> best = identity;
    for (int64_t c = lane; c < cols; c += width) best = ArgmaxCombine{}(best, ArgBest<T>{x[c], c});
    best = reduce_group<kWarpPerRow>(best, ArgmaxCombine{}, identity);
    if (lane == 0) out[row] = best.index;
  }
}

// ============================== launchers ==============================

void check_rows_layout(const Tensor& in, const Tensor& out, const char* op) {
  MG_CHECK(in.dim() == 2 && in.is_contiguous(), op, " (CUDA): expected a contiguous (rows, cols) input, got shape ",
           in.shape(), " strides ", in.strides());
  MG_CHECK(out.is_contiguous() && out.numel() == in.size(0), op, " (CUDA): expected a contiguous output of ",
           in.size(0), " elements, got shape ", out.shape());
  MG_CHECK(in.device() == out.device() && in.device().is_cuda(), op, " (CUDA): tensors on ", in.device(), " and ",
           out.device());
}

}  // namespace

void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out, cudaStream_t stream) {
  check_rows_layout(in, out, "reduce_rows");
  set_cuda_device(out.device());
  int64_t rows = in.size(0), cols = in.size(1);
  if (rows == 0) return;
  MG_DISPATCH_ARITH(in.dtype(), "reduce_rows", [&] {
    using T = scalar_t;
    const T* x = in.data<T>();
    T* y = out.data<T>();
    // out (rows * parts) = the reduction of parts of `chunk` elements of each row of in (rows, cols).
    auto launch = [&](auto combine, T identity, const T* in, T* out, int64_t rows, int64_t cols, int64_t parts,
                      int64_t chunk, int64_t mean_count) {
      using Op = decltype(combine);
      const LaunchCost cost =
          launch_cost(double(rows) * (double(cols) + double(parts)) * sizeof(T), double(rows * cols));
      if (chunk <= kWarpRowCols) {
        auto* kernel = &reduce_rows_kernel<true, T, Op>;
        MG_LAUNCH(kernel, grid_for(ceil_div(rows * parts, kRowsPerBlock), 1), kRowsPerBlock * kWarpSize, stream, cost,
                  in, out, rows, cols, parts, chunk, combine, identity, mean_count);
      } else {
        auto* kernel = &reduce_rows_kernel<false, T, Op>;
        MG_LAUNCH(kernel, grid_for(rows * parts, 1), kReduceBlock, stream, cost, in, out, rows, cols, parts, chunk,
                  combine, identity, mean_count);
      }
      MG_CUDA_CHECK_LAUNCH(stream);
    };
    auto run = [&](auto combine, T identity, bool mean) {
      const int64_t mean_count = mean ? cols : -1;
      if (cols <= kSplitCols) return launch(combine, identity, x, y, rows, cols, 1, cols, mean_count);
      // Long rows in two passes, so that a whole-tensor sum fills the device: fixed parts of
      // kSplitCols elements (the same parts on every GPU, hence the same result), then each
      // row's partials.
      const int64_t parts = ceil_div(cols, kSplitCols);
      Tensor partial = Tensor::empty({rows, parts}, in.options());
      launch(combine, identity, x, partial.data<T>(), rows, cols, parts, kSplitCols, -1);
      launch(combine, identity, partial.data<T>(), y, rows, parts, 1, parts, mean_count);
    };
    // Max/Min start from -inf/+inf (the extremes for Int64): any element, NaN included, replaces it.
    constexpr bool kFloat = std::numeric_limits<T>::has_infinity;
    const T lowest = kFloat ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
    const T highest = kFloat ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
    switch (op) {
      case ReduceOp::Sum: return run(AddOp{}, T(0), false);
      case ReduceOp::Mean: return run(AddOp{}, T(0), true);
      case ReduceOp::Max: return run(MaximumOp{}, lowest, false);
      case ReduceOp::Min: return run(MinimumOp{}, highest, false);
    }
    MG_ERROR("reduce_rows (CUDA): unknown op ", int(op));
  });
}

void argmax_rows(const Tensor& in, const Tensor& out, cudaStream_t stream) {
  check_rows_layout(in, out, "argmax");
  MG_CHECK(out.dtype() == DType::Int64, "argmax (CUDA): output must be Int64, got ", out.dtype());
  set_cuda_device(out.device());
  int64_t rows = in.size(0), cols = in.size(1);
  if (rows == 0) return;
  MG_CHECK(cols > 0, "argmax (CUDA): rows of length 0 have no maximum (shape ", in.shape(), ")");
  MG_DISPATCH_ARITH(in.dtype(), "argmax", [&] {
    using T = scalar_t;
    constexpr bool kFloat = std::numeric_limits<T>::has_infinity;
    const T lowest = kFloat ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
    const LaunchCost cost = launch_cost(double(rows) * (double(cols) * sizeof(T) + 8), double(rows * cols));
    if (cols <= kWarpRowCols) {
      auto* kernel = &argmax_rows_kernel<true, T>;
      MG_LAUNCH(kernel, grid_for(ceil_div(rows, kRowsPerBlock), 1), kRowsPerBlock * kWarpSize, stream, cost,
                in.data<T>(), out.data<int64_t>(), rows, cols, lowest);
    } else {
      auto* kernel = &argmax_rows_kernel<false, T>;
      MG_LAUNCH(kernel, grid_for(rows, 1), kReduceBlock, stream, cost, in.data<T>(), out.data<int64_t>(), rows, cols,
                lowest);
    }
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

}  // namespace mg::kernels::cuda
