// kernels/cuda/cuda_utils.cuh — helpers shared by the CUDA kernel files: grid sizing, warp and
// block reductions, and IEEE-exact arithmetic where the CPU result must be matched bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "multigrad/core/cuda_check.h"

namespace mg::kernels::cuda {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;
// Default block for elementwise kernels: 8 warps keeps an SM's 64 warp slots full with 8 blocks
// and leaves the scheduler enough independent warps to hide memory latency.
inline constexpr int kElementwiseBlock = 256;
// Grid-stride kernels launch at most this many blocks per SM: enough resident warps for latency
// hiding; more blocks would only repeat the index arithmetic for nothing.
inline constexpr int kBlocksPerSm = 8;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Streaming multiprocessors of the current device (queried once per physical device).
inline int sm_count() {
  static std::mutex mutex;
  static std::vector<int> cached;
  int dev = 0;
  MG_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mutex);
  if (int(cached.size()) <= dev) cached.resize(size_t(dev) + 1, 0);
  if (cached[size_t(dev)] == 0)
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&cached[size_t(dev)], cudaDevAttrMultiProcessorCount, dev));
  return cached[size_t(dev)];
}

// Blocks for a grid-stride loop over `work` items with `block` threads: one item per thread up
// to kBlocksPerSm blocks per SM. Never 0 (callers return early on empty work).
inline unsigned grid_for(int64_t work, int block) {
  int64_t cap = int64_t(sm_count()) * kBlocksPerSm;
  return unsigned(std::max<int64_t>(1, std::min(ceil_div(work, block), cap)));
}

// Global index and stride of a 1-d grid-stride loop, in 64 bits (tensors may exceed 2^31).
__device__ __forceinline__ int64_t global_thread_index() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

// ---- reductions: `op` is associative (sum, max, ...); every lane ends with the full result ----

// The value of lane (lane ^ lane_mask). Kernel files overload it for their own structs (found by
// argument-dependent lookup), which makes warp_reduce and block_reduce work on them.
template <class T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  return __shfl_xor_sync(kFullMask, v, lane_mask);
}

// Butterfly reduction over the 32 lanes of a full warp.
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = op(v, shfl_xor(v, offset));
  return v;
}

// Reduces one value per thread of the block; every thread gets the result. Requires blockDim.x a
// multiple of 32 (at most 1024) and must be reached by every thread of the block. `identity`
// fills the lanes of the second stage that have no warp behind them.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T warp_results[kWarpSize];  // one partial per warp
  int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  int warps = blockDim.x / kWarpSize;
  v = warp_reduce(v, op);
  __syncthreads();  // warp_results may still be read by a previous call
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  v = lane < warps ? warp_results[lane] : identity;
  return warp_reduce(v, op);
}

// ---- arithmetic that must round like the CPU's: nvcc contracts a*b+c into one FMA (one
// rounding), g++ without -march does not; these intrinsics forbid the contraction. ----
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

}  // namespace mg::kernels::cuda
