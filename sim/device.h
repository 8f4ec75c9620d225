// sim/device.h — CUDA's device side for kernels/cuda/*.cu compiled as C++ (MG_CUDA_SIM); the
// build force-includes it before every such file.
//
// The real CUDA headers give the types (dim3, float4, cudaStream_t, ...) and, under a host
// compiler, define __global__, __device__ and __host__ as nothing; this header adds what only
// nvcc knows:
//   - threadIdx, blockIdx, blockDim, gridDim: the running fiber's (sim/executor.h);
//   - __shared__: `static thread_local`. A block's threads are fibers of one OS thread and blocks
//     run one after another there, so such a variable is shared by the block and by nobody else
//     running at the same time (its value does not survive into the next block on real hardware
//     either; nothing may rely on it);
//   - __syncthreads, __shfl_xor_sync: the executor's barrier and warp exchange;
//   - atomics through std::atomic_ref, so they stay atomic should blocks ever run concurrently;
//   - the round-to-nearest intrinsics, plain operations here: the simulated build compiles with
//     -ffp-contract=off, so no multiply-add is fused (what the intrinsics forbid nvcc to do);
//   - __launch_bounds__, an optimisation hint with nothing to do.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "multigrad/sim/executor.h"

#undef __shared__
#define __shared__ static thread_local
#undef __launch_bounds__
#define __launch_bounds__(...)

#define threadIdx (::mg::sim::tls_thread->thread_idx)
#define blockIdx (::mg::sim::tls_thread->block_idx)
#define blockDim (::mg::sim::tls_thread->block_dim)
#define gridDim (::mg::sim::tls_thread->grid_dim)

inline void __syncthreads() { ::mg::sim::syncthreads(); }

template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  return ::mg::sim::shfl_xor(mask, value, lane_mask, width);
}

template <class T>
T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}

inline unsigned long long atomicMin(unsigned long long* address, unsigned long long value) {
  std::atomic_ref<unsigned long long> word(*address);
  unsigned long long old = word.load();
  while (value < old && !word.compare_exchange_weak(old, value)) {
  }
  return old;
}

inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline double __dadd_rn(double a, double b) { return a + b; }
