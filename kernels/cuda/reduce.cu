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
// Work split: a group of threads per row.
//   - cols <= kWarpRowCols: one warp per row, kRowsPerBlock rows per block; lanes stride over the
//     row (neighbouring lanes read neighbouring elements: coalesced), then a butterfly
//     __shfl_xor_sync reduction in registers, no shared memory.
//   - longer rows: one block of kReduceBlock threads per row, threads stride over the row, then a
//     warp-shuffle reduction per warp and a second one over the warps' partials (cuda_utils.cuh).
// Accumulation: in the element type (Float32 in float32, Int64 in int64): each thread first sums
// its strided elements in order, then the shuffle tree combines the partials.
// Preconditions (asserted in the launchers): in and out contiguous, out has `rows` elements,
// argmax out is Int64. Values are assigned (=).
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "core/cuda_check.h"
#include "core/stream.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/functors.h"

namespace mg::kernels::cuda {
namespace {

inline constexpr int64_t kWarpRowCols = 1024;  // up to 32 elements per lane: a warp keeps up
inline constexpr int kRowsPerBlock = 8;        // warp-per-row blocks: 8 warps = 256 threads
inline constexpr int kReduceBlock = 512;       // block-per-row: 16 warps in flight per long row

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

template <bool kWarpPerRow>
__device__ __forceinline__ void row_group(int64_t& row, int& lane, int& width) {
  if constexpr (kWarpPerRow) {
    row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
    lane = threadIdx.x % kWarpSize;
    width = kWarpSize;
  } else {
    row = blockIdx.x;
    lane = threadIdx.x;
    width = blockDim.x;
  }
}

// out[r] = op-reduction of in[r, :], divided by cols when `mean`.
template <bool kWarpPerRow, class T, class Op>
__global__ void reduce_rows_kernel(const T* in, T* out, int64_t rows, int64_t cols, Op op, T identity,
                                   bool mean) {  // in (rows, cols), out (rows)
  int64_t row;
  int lane, width;
  row_group<kWarpPerRow>(row, lane, width);
  if (row >= rows) return;  // a whole warp past the last row; warp groups never sync block-wide
  const T* x = in + row * cols;
  T acc = identity;
  for (int64_t c = lane; c < cols; c += width) acc = op(acc, x[c]);
  acc = reduce_group<kWarpPerRow>(acc, op, identity);
  if (lane == 0) out[row] = mean ? DivOp{}(acc, T(cols)) : acc;
}

template <bool kWarpPerRow, class T>
__global__ void argmax_rows_kernel(const T* in, int64_t* out, int64_t rows, int64_t cols,
                                   T lowest) {  // in (rows, cols), out (rows)
  int64_t row;
  int lane, width;
  row_group<kWarpPerRow>(row, lane, width);
  if (row >= rows) return;
  const T* x = in + row * cols;
  const ArgBest<T> identity{lowest, std::numeric_limits<int64_t>::max()};
  ArgBest<T> best = identity;
  for (int64_t c = lane; c < cols; c += width) best = ArgmaxCombine{}(best, ArgBest<T>{x[c], c});
  best = reduce_group<kWarpPerRow>(best, ArgmaxCombine{}, identity);
  if (lane == 0) out[row] = best.index;
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
    auto run = [&](auto combine, T identity, bool mean) {
      using Op = decltype(combine);
      if (cols <= kWarpRowCols)
        reduce_rows_kernel<true, T, Op><<<unsigned(ceil_div(rows, kRowsPerBlock)), kRowsPerBlock * kWarpSize, 0,
                                          stream>>>(x, y, rows, cols, combine, identity, mean);
      else
        reduce_rows_kernel<false, T, Op><<<unsigned(rows), kReduceBlock, 0, stream>>>(x, y, rows, cols, combine,
                                                                                       identity, mean);
      MG_CUDA_CHECK_LAUNCH(stream);
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
    if (cols <= kWarpRowCols)
      argmax_rows_kernel<true, T><<<unsigned(ceil_div(rows, kRowsPerBlock)), kRowsPerBlock * kWarpSize, 0, stream>>>(
          in.data<T>(), out.data<int64_t>(), rows, cols, lowest);
    else
      argmax_rows_kernel<false, T><<<unsigned(rows), kReduceBlock, 0, stream>>>(in.data<T>(), out.data<int64_t>(),
                                                                                 rows, cols, lowest);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

}  // namespace mg::kernels::cuda
