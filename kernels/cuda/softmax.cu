// kernels/cuda/softmax.cu — softmax and log-softmax of each row.
//
// What it computes, for in and out (rows, cols), both contiguous and floating:
//   m = max_c x[c]                     (subtracted so that exp never overflows)
//   s = sum_c exp(x[c] - m)
//   softmax:     out[c] = exp(x[c] - m) / s
//   log-softmax: out[c] = (x[c] - m) - log(s)
// A row holding NaN gives NaN throughout; a row of -inf gives NaN, as in PyTorch.
//
// Work split: a block per row (a block loops over rows when there are more rows than blocks,
// kBlocksPerSm per SM: cuda_utils.cuh); its threads stride over the row three times (max, sum, write),
// each pass coalesced. The row max and sum are block reductions: warp shuffles, then one more
// shuffle over the warps' partials (cuda_utils.cuh). The block is the row length rounded up to a
// warp, capped at kSoftmaxBlock, so short rows do not leave most of a block idle.
// Accumulation: in the element type (Float32 rows sum in float32, per-thread partials in order,
// then the shuffle tree). Preconditions (asserted in the launcher): in and out contiguous with one
// (rows, cols) shape, Float32 or Float64. Values are assigned (=).
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "multigrad/core/cuda_check.h"
#include "multigrad/core/stream.h"
#include "multigrad/kernels/cuda/cuda_kernels.h"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/functors.h"

namespace mg::kernels::cuda {
namespace {

inline constexpr int kSoftmaxBlock = 512;  // 16 warps per row: enough loads in flight per SM

// ============================== kernels ==============================

template <class T>
__global__ void softmax_fwd_kernel(const T* in, T* out, int64_t rows, int64_t cols, bool log) {  // in, out (rows, cols)
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // the same rows for the whole block
    const T* x = in + r * cols;
    T* y = out + r * cols;

    T row_max = -std::numeric_limits<T>::infinity();
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) row_max = MaximumOp{}(row_max, x[c]);
    row_max = block_reduce(row_max, MaximumOp{}, -std::numeric_limits<T>::infinity());

    T sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += m_exp(x[c] - row_max);
    sum = block_reduce(sum, AddOp{}, T(0));

    if (log) {
      T log_sum = m_log(sum);
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) y[c] = (x[c] - row_max) - log_sum;
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) y[c] = m_exp(x[c] - row_max) / sum;
    }
  }
}

}  // namespace

// ============================== launcher ==============================

void softmax_rows(const Tensor& in, const Tensor& out, bool log, cudaStream_t stream) {
  const char* name = log ? "log_softmax" : "softmax";
  MG_CHECK(in.dim() == 2 && in.is_contiguous() && out.is_contiguous() && out.shape() == in.shape(), name,
           " (CUDA): expected contiguous (rows, cols) tensors of one shape, got ", in.shape(), " and ",
           out.shape());
  MG_CHECK(in.device() == out.device() && in.device().is_cuda(), name, " (CUDA): tensors on ", in.device(),
           " and ", out.device());
  set_cuda_device(out.device());
  int64_t rows = in.size(0), cols = in.size(1);
  if (rows == 0 || cols == 0) return;
  int block = int(std::min<int64_t>(kSoftmaxBlock, ceil_div(cols, kWarpSize) * kWarpSize));
  MG_DISPATCH_FLOATING(in.dtype(), name, [&] {
    using T = scalar_t;
    MG_LAUNCH(softmax_fwd_kernel<T>, grid_for(rows, 1), block, stream, per_element(rows * cols, 1, 1, sizeof(T), 4),
              in.data<T>(), out.data<T>(), rows, cols, log);  // max, exp, sum, divide
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

}  // namespace mg::kernels::cuda
