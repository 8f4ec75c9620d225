// kernels/cuda/norm.cu — fused batch and layer norm on CUDA (formulas in kernels/norm.h).
//
// ---- batch norm ----
// x (N, C, S) contiguous: channel c holds M = N * S values, N planes of S, C * S apart.
// Per-channel sums: one block per channel. Its threads walk the channel's values i = tid,
// tid + block, ... (consecutive threads read consecutive values of a plane: coalesced) and sum
// in float64; block reductions (cuda_utils.cuh) combine the threads.
//   batch_norm_stats_kernel:      sum x -> mean, then a second walk sum (x - mean)^2 -> var.
//   batch_norm_bwd_reduce_kernel: sum g and sum g * (x - mean); thread 0 writes grad_bias,
//                                 grad_weight and the channel's BatchNormGradInput
//                                 (norm_functors.h) into a (C) scratch array.
// Elementwise passes (forward, grad_x): a grid-stride loop over the N * C * S elements; the
// element's channel is (i / S) % C. The forward rebuilds its channel's BatchNormAffine per
// element from (C) arrays that stay in cache (a sqrt and a division, small next to the
// element's load and store); grad_x reads the channel's constants from the scratch array.
// One block per channel leaves most SMs idle when C is small; the elementwise passes, which
// move most of the bytes, use the whole GPU.
// Accumulation: float64, in the block's order (per-thread partials, then the shuffle tree), not
// the CPU's: the backends agree to rounding, not to the bit.
// Preconditions (asserted by the dispatch, kernels/norm.cpp): see kernels/norm.h. Outputs are
// assigned (=).
//
// ---- layer norm ----
// x (R, D) contiguous. layer_norm_fwd_kernel and layer_norm_bwd_x_kernel: one warp per row (a
// block of kRowsPerBlock warps); the lanes stride over D (consecutive lanes, consecutive values:
// coalesced), sum in float64 and combine by warp_reduce; the row is read again for each pass
// rather than kept in registers, which holds for any D. grad_weight and grad_bias in the CPU's
// two levels (kernels/norm.h): layer_norm_bwd_partials_kernel, a thread per (column, block of
// kLayerNormRowBlock rows) walking its rows in order (consecutive threads, consecutive columns:
// coalesced), so a (16384, 768) input fills the GPU with 1,536 blocks; then
// layer_norm_bwd_columns_kernel, a warp per column loading 32 blocks' partials at a time and one
// lane adding them in order. Both use unfused multiply-adds (mul_rn, add_rn): the CPU's bits.
#include <cuda_runtime.h>

#include <algorithm>

#include "multigrad/core/stream.h"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/norm.h"
#include "multigrad/kernels/norm_functors.h"

namespace mg::kernels::cuda {
namespace {

inline constexpr int kChannelBlock = 512;  // 16 warps per channel: enough loads in flight per SM
inline constexpr int kRowsPerBlock = 8;    // layer norm: one warp per row, 256 threads a block
inline constexpr int64_t kMaxGridY = 65535;  // gridDim.y's hardware limit
inline constexpr int kColumnWarps = 4;        // layer norm's column sums: a warp per column, 128 threads a block

// The scratch array of per-channel grad_x constants is allocated as a (C, 4) tensor of T.
inline constexpr int64_t kGradInputFields = 4;
static_assert(sizeof(BatchNormGradInput<float>) == kGradInputFields * sizeof(float));
static_assert(sizeof(BatchNormGradInput<double>) == kGradInputFields * sizeof(double));

// ============================== kernels ==============================

// Calls f(offset) for the values of channel c this thread visits: the channel's i-th value for
// i = threadIdx.x, threadIdx.x + blockDim.x, ... < N * S, at offset (n * C + c) * S + s with
// n = i / S, s = i % S. (n, s) advances by a fixed step: one division per thread, not per value.
template <class F>
__device__ void for_channel_values(const ChannelShape& sh, int64_t c, F&& f) {
  if (sh.n == 0 || sh.s == 0) return;
  const int64_t step_n = blockDim.x / sh.s, step_s = blockDim.x % sh.s;
  int64_t n = threadIdx.x / sh.s, s = threadIdx.x % sh.s;
  while (n < sh.n) {
    f((n * sh.c + c) * sh.s + s);
    n += step_n;
    s += step_s;
    if (s >= sh.s) {
      s -= sh.s;
      ++n;
    }
  }
}

// Block c: mean[c] and biased var[c] of x (N, C, S); mean, var (C).
template <class T>
__global__ void batch_norm_stats_kernel(const T* x, T* mean, T* var, ChannelShape sh) {
  const int64_t c = blockIdx.x;
  const double count = double(sh.n * sh.s);
  double sum = 0;
  for_channel_values(sh, c, [&](int64_t i) { sum += double(x[i]); });
  const double mu = block_reduce(sum, AddOp{}, 0.0) / count;
  double sq = 0;
  for_channel_values(sh, c, [&](int64_t i) {
    const double d = double(x[i]) - mu;
    sq += d * d;
  });
  sq = block_reduce(sq, AddOp{}, 0.0);
  if (threadIdx.x == 0) {
    mean[c] = T(mu);
    var[c] = T(sq / count);
  }
}

// Block c: the backward's sums over channel c of g, x (N, C, S) (x null: sum g only; need_sums
// false: none), then grad_weight[c], grad_bias[c] and per_channel[c] where not null.
// mean, var, weight (weight null: 1), grad_weight, grad_bias, per_channel: (C).
template <class T>
__global__ void batch_norm_bwd_reduce_kernel(const T* g, const T* x, const T* mean, const T* var, const T* weight,
                                             T eps, bool need_sums, T* grad_weight, T* grad_bias,
                                             BatchNormGradInput<T>* per_channel, ChannelShape sh) {
  const int64_t c = blockIdx.x;
  BatchNormGradSums sums;
  if (need_sums) {  // the same for every thread of the block: all reach the block reductions
    const double mu = double(mean[c]);
    double sum_g = 0, sum_gc = 0;
    for_channel_values(sh, c, [&](int64_t i) {
      sum_g += double(g[i]);
      if (x != nullptr) sum_gc += double(g[i]) * (double(x[i]) - mu);
    });
    sums.g = block_reduce(sum_g, AddOp{}, 0.0);
    sums.gc = block_reduce(sum_gc, AddOp{}, 0.0);
  }
  if (threadIdx.x != 0) return;
  const T invstd = batch_norm_invstd(var[c], eps);
  if (grad_weight != nullptr) grad_weight[c] = batch_norm_grad_weight(sums, invstd);
  if (grad_bias != nullptr) grad_bias[c] = T(sums.g);
  if (per_channel != nullptr)
    per_channel[c] = batch_norm_grad_input(mean[c], invstd, weight != nullptr ? weight[c] : T(1), sums, sh.n * sh.s);
}

// out = the channel's BatchNormAffine of x; x, out (N, C, S); mean, var, weight, bias (C),
// weight and bias null for 1 and 0.
template <class T>
__global__ void batch_norm_fwd_kernel(const T* x, const T* mean, const T* var, const T* weight, const T* bias, T eps,
                                      T* out, int64_t numel, int64_t C, int64_t S) {
  for (int64_t i = global_thread_index(); i < numel; i += grid_stride())
    out[i] = batch_norm_affine(mean, var, weight, bias, eps, (i / S) % C)(x[i]);
}

// grad_x = the channel's BatchNormGradInput of g (and of x with batch statistics; x is not read
// otherwise). g, x, grad_x (N, C, S); per_channel (C).
template <class T, bool kBatchStats>
__global__ void batch_norm_bwd_kernel(const T* g, const T* x, const BatchNormGradInput<T>* per_channel, T* grad_x,
                                      int64_t numel, int64_t C, int64_t S) {
  for (int64_t i = global_thread_index(); i < numel; i += grid_stride()) {
    const BatchNormGradInput<T> f = per_channel[(i / S) % C];
    if constexpr (kBatchStats) grad_x[i] = f(g[i], x[i]);
    else grad_x[i] = f(g[i]);
  }
}

// Row r = blockIdx.x * kRowsPerBlock + warp of x (R, D): its statistics into mean[r], rstd[r] and
// y = (x - mean) * rstd * w + b; weight, bias (D) or null for 1 and 0.
template <class T>
__global__ void layer_norm_fwd_kernel(const T* x, const T* weight, const T* bias, T eps, T* y, T* mean, T* rstd,
                                      int64_t rows, int64_t d) {
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (r >= rows) return;  // a whole warp leaves together: the warp reductions below stay full
  const T* xr = x + r * d;
  double sum = 0;
  for (int64_t j = lane; j < d; j += kWarpSize) sum += double(xr[j]);
  sum = warp_reduce(sum, AddOp{});
  const double mu = sum / double(d);
  double sq = 0;
  for (int64_t j = lane; j < d; j += kWarpSize) {
    const double dev = double(xr[j]) - mu;
    sq += dev * dev;
  }
  const LayerNormRow<T> row = layer_norm_row<T>(sum, warp_reduce(sq, AddOp{}), d, eps);
  if (lane == 0) mean[r] = row.mean, rstd[r] = row.rstd;
  for (int64_t j = lane; j < d; j += kWarpSize)
    y[r * d + j] = row(xr[j], weight != nullptr ? weight[j] : T(1), bias != nullptr ? bias[j] : T(0));
}

// Row r (as above) of grad_x from g, x (R, D), the row's mean and rstd, weight (D) or null.
template <class T>
__global__ void layer_norm_bwd_x_kernel(const T* g, const T* x, const T* mean, const T* rstd, const T* weight,
                                        T* grad_x, int64_t rows, int64_t d) {
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (r >= rows) return;
  const T* gr = g + r * d;
  const T* xr = x + r * d;
  const LayerNormRow<T> row{mean[r], rstd[r]};
  double sum_h = 0, sum_hx = 0;
  for (int64_t j = lane; j < d; j += kWarpSize) {
    const double h = double(gr[j]) * double(weight != nullptr ? weight[j] : T(1));
    sum_h += h;
    sum_hx += h * double(row.xhat(xr[j]));
  }
  const LayerNormGradRow<T> f = layer_norm_grad_row(row, warp_reduce(sum_h, AddOp{}), warp_reduce(sum_hx, AddOp{}), d);
  for (int64_t j = lane; j < d; j += kWarpSize)
    grad_x[r * d + j] = f(gr[j], xr[j], weight != nullptr ? weight[j] : T(1));
}

// Column j (x of the grid) of row block b (y, striding over the blocks): partials (blocks, 2, D)
// get the block's sums of g * xhat and of g over its rows, in order.
template <class T>
__global__ void layer_norm_bwd_partials_kernel(const T* g, const T* x, const T* mean, const T* rstd, double* partials,
                                               int64_t rows, int64_t d, int64_t blocks) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  for (int64_t b = blockIdx.y; b < blocks; b += gridDim.y) {
    double sum_gx = 0, sum_g = 0;
    for (int64_t r = b * kLayerNormRowBlock; r < std::min(rows, (b + 1) * kLayerNormRowBlock); ++r) {
      const T gv = g[r * d + j];
      sum_gx = add_rn(sum_gx, mul_rn(double(gv), double(LayerNormRow<T>{mean[r], rstd[r]}.xhat(x[r * d + j]))));
      sum_g = add_rn(sum_g, double(gv));
    }
    partials[(b * 2) * d + j] = sum_gx;
    partials[(b * 2 + 1) * d + j] = sum_g;
  }
}

// Column j: grad_weight[j] and grad_bias[j] (each null when not wanted) are the sums of the
// blocks' partials, block after block. A warp per column (kColumnWarps columns a block): its lanes
// load 32 blocks' partials at once into shared memory, then lane 0 adds them in order; the loads
// are what take time, and so 32 are in flight per column.
template <class T>
__global__ void layer_norm_bwd_columns_kernel(const double* partials, T* grad_weight, T* grad_bias, int64_t d,
                                              int64_t blocks) {
  __shared__ double staged[kColumnWarps][kWarpSize][2];
  const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
  for (int64_t first = int64_t(blockIdx.x) * kColumnWarps; first < d; first += int64_t(gridDim.x) * kColumnWarps) {
    const int64_t j = first + warp;
    double sum_gx = 0, sum_g = 0;
    for (int64_t b0 = 0; b0 < blocks; b0 += kWarpSize) {
      const int64_t b = b0 + lane;
      const bool loads = j < d && b < blocks;
      staged[warp][lane][0] = loads ? partials[(b * 2) * d + j] : 0.0;
      staged[warp][lane][1] = loads ? partials[(b * 2 + 1) * d + j] : 0.0;
      __syncthreads();
      if (lane == 0)
        for (int k = 0; k < int(std::min<int64_t>(kWarpSize, blocks - b0)); ++k) {
          sum_gx = add_rn(sum_gx, staged[warp][k][0]);
          sum_g = add_rn(sum_g, staged[warp][k][1]);
        }
      __syncthreads();
    }
    if (j < d && lane == 0) {
      if (grad_weight != nullptr) grad_weight[j] = T(sum_gx);
      if (grad_bias != nullptr) grad_bias[j] = T(sum_g);
    }
  }
}

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Threads per channel block: M rounded up to a warp, capped at kChannelBlock, so short channels
// do not idle a large block.
int channel_block(const ChannelShape& sh) {
  return int(std::clamp<int64_t>(ceil_div(sh.count(), kWarpSize) * kWarpSize, kWarpSize, kChannelBlock));
}

}  // namespace

// ============================== launchers ==============================

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var, cudaStream_t stream) {
  set_cuda_device(x.device());
  const ChannelShape sh = channel_shape(x);
  if (sh.c == 0) return;
  MG_DISPATCH_FLOATING(x.dtype(), "batch_norm_stats", [&] {
    using T = scalar_t;
    // reads x once (a sum and a sum of squares: 3 operations per value), writes two values per channel
    const LaunchCost cost = launch_cost((double(x.numel()) + 2.0 * double(sh.c)) * sizeof(T), 3.0 * double(x.numel()));
    MG_LAUNCH(batch_norm_stats_kernel<T>, unsigned(sh.c), channel_block(sh), stream, cost, x.data<T>(),
              mean.data<T>(), var.data<T>(), sh);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                        const Tensor& bias, double eps, const Tensor& out, cudaStream_t stream) {
  set_cuda_device(x.device());
  const ChannelShape sh = channel_shape(x);
  const int64_t numel = x.numel();
  if (numel == 0) return;
  MG_DISPATCH_FLOATING(x.dtype(), "batch_norm_forward", [&] {
    using T = scalar_t;
    MG_LAUNCH(batch_norm_fwd_kernel<T>, grid_for(numel, kElementwiseBlock), kElementwiseBlock, stream,
              per_element(numel, 1, 1, sizeof(T), 4), x.data<T>(), mean.data<T>(), var.data<T>(),
              data_or_null<T>(weight), data_or_null<T>(bias), T(eps), out.data<T>(), numel, sh.c, sh.s);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

void batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& var,
                         const Tensor& weight, double eps, bool batch_stats, const Tensor& grad_x,
                         const Tensor& grad_weight, const Tensor& grad_bias, cudaStream_t stream) {
  set_cuda_device(grad_out.device());
  const ChannelShape sh = channel_shape(grad_out);
  if (sh.c == 0 || !(grad_x.defined() || grad_weight.defined() || grad_bias.defined())) return;
  const bool need_sums = grad_weight.defined() || grad_bias.defined() || (batch_stats && grad_x.defined());
  // Per-channel grad_x constants, from the caching allocator on this stream (released on return,
  // reused by the next call without a cudaMalloc).
  const Tensor per_channel = grad_x.defined() ? Tensor::empty({sh.c, kGradInputFields}, grad_out.options()) : Tensor();
  MG_DISPATCH_FLOATING(grad_out.dtype(), "batch_norm_backward", [&] {
    using T = scalar_t;
    auto* constants = reinterpret_cast<BatchNormGradInput<T>*>(data_or_null<T>(per_channel));
    // with sums: reads grad_out and x (4 operations per value); without, per-channel constants only
    const double values = need_sums ? double(grad_out.numel()) : 0;
    const LaunchCost reduce_cost =
        launch_cost((2.0 * values + double(sh.c) * (kGradInputFields + 4)) * sizeof(T), 4.0 * values);
    MG_LAUNCH(batch_norm_bwd_reduce_kernel<T>, unsigned(sh.c), need_sums ? channel_block(sh) : kWarpSize, stream,
              reduce_cost, grad_out.data<T>(), data_or_null<T>(x), mean.data<T>(), var.data<T>(),
              data_or_null<T>(weight), T(eps), need_sums, data_or_null<T>(grad_weight), data_or_null<T>(grad_bias),
              constants, sh);
    MG_CUDA_CHECK_LAUNCH(stream);
    const int64_t numel = grad_out.numel();
    if (constants == nullptr || numel == 0) return;
    const unsigned grid = grid_for(numel, kElementwiseBlock);
    if (batch_stats) {
      auto* kernel = &batch_norm_bwd_kernel<T, true>;
      MG_LAUNCH(kernel, grid, kElementwiseBlock, stream, per_element(numel, 2, 1, sizeof(T), 5), grad_out.data<T>(),
                x.data<T>(), constants, grad_x.data<T>(), numel, sh.c, sh.s);
    } else {
      auto* kernel = &batch_norm_bwd_kernel<T, false>;
      MG_LAUNCH(kernel, grid, kElementwiseBlock, stream, per_element(numel, 1, 1, sizeof(T), 2), grad_out.data<T>(),
                nullptr, constants, grad_x.data<T>(), numel, sh.c, sh.s);
    }
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                        const Tensor& mean, const Tensor& rstd, cudaStream_t stream) {
  set_cuda_device(x.device());
  const int64_t rows = mean.numel(), d = rows > 0 ? x.numel() / rows : 0;
  if (rows == 0) return;
  MG_DISPATCH_FLOATING(x.dtype(), "layer_norm_forward", [&] {
    using T = scalar_t;
    // reads x, weight, bias; writes out, mean, rstd (mean, variance, normalise, scale, shift: 8 per value)
    const LaunchCost cost = launch_cost((2.0 * double(rows) * d + 2.0 * d + 2.0 * rows) * sizeof(T), 8.0 * rows * d);
    MG_LAUNCH(layer_norm_fwd_kernel<T>, unsigned(ceil_div(rows, kRowsPerBlock)), kRowsPerBlock * kWarpSize, stream,
              cost, x.data<T>(), data_or_null<T>(weight), data_or_null<T>(bias), T(eps), out.data<T>(), mean.data<T>(),
              rstd.data<T>(), rows, d);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias, cudaStream_t stream) {
  set_cuda_device(grad_out.device());
  const int64_t rows = mean.numel(), d = rows > 0 ? grad_out.numel() / rows : 0;
  MG_DISPATCH_FLOATING(grad_out.dtype(), "layer_norm_backward", [&] {
    using T = scalar_t;
    if (grad_x.defined() && rows > 0) {
      // reads grad_out, x, mean, rstd, weight; writes grad_x (two row sums, then the gradient: 10 per value)
      const LaunchCost cost = launch_cost((3.0 * double(rows) * d + 2.0 * rows + d) * sizeof(T), 10.0 * rows * d);
      MG_LAUNCH(layer_norm_bwd_x_kernel<T>, unsigned(ceil_div(rows, kRowsPerBlock)), kRowsPerBlock * kWarpSize, stream,
                cost, grad_out.data<T>(), x.data<T>(), mean.data<T>(), rstd.data<T>(), data_or_null<T>(weight),
                grad_x.data<T>(), rows, d);
      MG_CUDA_CHECK_LAUNCH(stream);
    }
    if ((grad_weight.defined() || grad_bias.defined()) && d > 0) {
      const int64_t blocks = ceil_div(rows, kLayerNormRowBlock);
      const Tensor partials = Tensor::empty({blocks, 2, d}, {DType::Float64, grad_out.device()});
      if (blocks > 0) {
        // reads grad_out, x, mean, rstd; writes two float64 partials per column and block (5 per value)
        const LaunchCost cost =
            launch_cost((2.0 * double(rows) * d + 2.0 * rows) * sizeof(T) + 16.0 * double(blocks) * d, 5.0 * rows * d);
        const dim3 grid(unsigned(ceil_div(d, kElementwiseBlock)), unsigned(std::min(blocks, kMaxGridY)));
        MG_LAUNCH(layer_norm_bwd_partials_kernel<T>, grid, kElementwiseBlock, stream, cost, grad_out.data<T>(),
                  x.data<T>(), mean.data<T>(), rstd.data<T>(), partials.data<double>(), rows, d, blocks);
        MG_CUDA_CHECK_LAUNCH(stream);
      }
      // reads the partials, writes the two gradients
      const LaunchCost cost = launch_cost(16.0 * double(blocks) * d + 2.0 * d * sizeof(T), 2.0 * double(blocks) * d);
      MG_LAUNCH(layer_norm_bwd_columns_kernel<T>, grid_for(d, kColumnWarps), kColumnWarps * kWarpSize, stream, cost,
                partials.data<double>(), data_or_null<T>(grad_weight), data_or_null<T>(grad_bias), d, blocks);
      MG_CUDA_CHECK_LAUNCH(stream);
    }
  });
}

}  // namespace mg::kernels::cuda
