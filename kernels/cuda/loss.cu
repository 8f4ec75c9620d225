// kernels/cuda/loss.cu — fused softmax cross-entropy on CUDA (formulas in kernels/loss.h).
//
// Forward: a block per row n of x (N, C), looping over rows when there are more rows than
// blocks (kBlocksPerSm per SM: cuda_utils.cuh). The block strides over the row twice: a max
// reduction (m), then a sum of exp(x - m) (s), both block reductions (cuda_utils.cuh); thread 0
// writes lse[n] = m + log s and losses[n] = lse[n] - x[n, t[n]]. The block is C rounded up to a
// warp, capped at kCrossEntropyBlock, so short rows (10 classes) do not idle a large block.
// A row whose target is outside [0, C) writes nothing and records its index in a BadIndexFlag
// (bad_index.cuh); the launcher reads the flag back — one 8-byte copy and a stream sync per
// forward — and throws naming the first bad target and C, like the CPU.
// Backward: one thread per element (grid-stride), grad = cross_entropy_grad(x, lse[n], c == t[n],
// g / N), with g read from device memory so the host never waits for the loss gradient.
// Accumulation: in the element type (Float32 rows sum in float32; the CPU sums in float64).
// Preconditions (asserted by the dispatch, kernels/loss.cpp): contiguous (N, C) logits, (N) Int64 targets and
// (N) lse/losses of the logits' dtype. Outputs are assigned (=).
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "multigrad/core/stream.h"
#include "multigrad/kernels/cuda/bad_index.cuh"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/loss.h"
#include "multigrad/kernels/loss_functors.h"

namespace mg::kernels::cuda {
namespace {

inline constexpr int kCrossEntropyBlock = 512;  // 16 warps per row: enough loads in flight per SM

// ============================== kernels ==============================

template <class T>
__global__ void cross_entropy_fwd_kernel(const T* logits, const int64_t* targets, T* losses, T* lse, int64_t rows,
                                         int64_t cols,
                                         unsigned long long* bad_row) {  // logits (N, C); targets, losses, lse (N)
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // the same rows for the whole block
    const T* x = logits + r * cols;
    const int64_t t = targets[r];
    if (t < 0 || t >= cols) {  // the same for every thread of the block: the block skips it together
      if (threadIdx.x == 0) report_bad_index(bad_row, r);
      continue;
    }
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = MaximumOp{}(m, x[c]);
    m = block_reduce(m, MaximumOp{}, -std::numeric_limits<T>::infinity());
    T s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += m_exp(x[c] - m);
    s = block_reduce(s, AddOp{}, T(0));
    if (threadIdx.x == 0) {
      const T l = m + m_log(s);
      lse[r] = l;
      losses[r] = l - x[t];
    }
  }
}

template <class T>
__global__ void cross_entropy_bwd_kernel(const T* logits, const int64_t* targets, const T* lse, const T* grad_loss,
                                         T* grad_logits, int64_t rows, int64_t cols) {  // logits, grad_logits (N, C)
  const T scale = *grad_loss / T(rows);
  const int64_t n = rows * cols;
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const int64_t r = i / cols, c = i - r * cols;
    grad_logits[i] = cross_entropy_grad(logits[i], lse[r], c == targets[r], scale);
  }
}

}  // namespace

// ============================== launchers ==============================

void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse,
                       cudaStream_t stream) {
  set_cuda_device(logits.device());
  const int64_t rows = logits.size(0), cols = logits.size(1);
  if (rows == 0) return;
  BadIndexFlag bad(logits.device(), stream);
  const int block = int(std::min<int64_t>(kCrossEntropyBlock, std::max<int64_t>(1, ceil_div(cols, kWarpSize)) * kWarpSize));
  MG_DISPATCH_FLOATING(logits.dtype(), "cross_entropy", [&] {
    using T = scalar_t;
    // reads the logits (max, then exp and sum: 4 operations each) and targets, writes a loss and an lse per row
    const LaunchCost cost =
        launch_cost(double(rows) * (double(cols) * sizeof(T) + 8 + 2.0 * sizeof(T)), 4.0 * double(rows * cols));
    MG_LAUNCH(cross_entropy_fwd_kernel<T>, grid_for(rows, 1), block, stream, cost, logits.data<T>(),
              targets.data<int64_t>(), losses.data<T>(), lse.data<T>(), rows, cols, bad.data());
    MG_CUDA_CHECK_LAUNCH(stream);
  });
  const int64_t row = bad.first_bad();
  if (row >= 0)
    MG_ERROR("cross_entropy: target ", bad.read(targets.data<int64_t>() + row), " (row ", row,
             ") is out of range [0, C) for C = ", cols);
}

void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_loss,
                       const Tensor& grad_logits, cudaStream_t stream) {
  set_cuda_device(logits.device());
  const int64_t rows = logits.size(0), cols = logits.size(1);
  if (rows * cols == 0) return;
  MG_DISPATCH_FLOATING(logits.dtype(), "cross_entropy backward", [&] {
    using T = scalar_t;
    // reads the logits, writes their gradient (subtract, exp, scale, the target's 1: 4 each); per row a target, an lse
    const LaunchCost cost = launch_cost(double(rows) * (2.0 * double(cols) * sizeof(T) + 8 + sizeof(T)),
                                        4.0 * double(rows * cols));
    MG_LAUNCH(cross_entropy_bwd_kernel<T>, grid_for(rows * cols, kElementwiseBlock), kElementwiseBlock, stream, cost,
              logits.data<T>(), targets.data<int64_t>(), lse.data<T>(), grad_loss.data<T>(), grad_logits.data<T>(),
              rows, cols);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

}  // namespace mg::kernels::cuda
