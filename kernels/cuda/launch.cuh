// kernels/cuda/launch.cuh — the one way kernels are launched.
//
//   MG_LAUNCH(kernel, grid, block, stream, cost, args...)
// is `kernel<<<grid, block, 0, stream>>>(args...)` under nvcc. `cost` (a LaunchCost) is what the
// launch moves and computes, declared here, at the one place the launcher knows the shapes. In
// the simulated build (MG_CUDA_SIM, sim/README.md) the same line hands the kernel's name, its
// configuration, its cost and a call of it to the simulator, which checks the configuration as
// the hardware does, writes the launch into the ledger (sim/ledger.h; the cost model prices it)
// and runs the grid's threads on the stream. The arguments are evaluated and copied at the
// launch, as <<<...>>> does, and the kernel's template arguments are deduced from them in the
// same way. A kernel whose name holds a comma (template arguments) goes through a local function
// pointer:
//   auto* kernel = &reduce_rows_kernel<true, T, Op>;  MG_LAUNCH(kernel, ...);
// Every launcher uses it and then checks the launch (MG_CUDA_CHECK_LAUNCH).
// With kernel timing on (kernels/kernel_times.h) each launch is also a timed interval there,
// named by this file's stem and `kernel` as written.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "multigrad/kernels/cuda/kernel_timer.cuh"

namespace mg::kernels::cuda {

// A launch's cost. `bytes`: what it reads from and writes to device memory if each element it
// touches moves once (its compulsory traffic: re-reads that a cache may serve are not counted);
// `flops`: its floating-point operations, a multiply-add counted as 2, an exp, a division or a
// comparison as 1. A GPU build evaluates and drops it.
struct LaunchCost {
  double bytes = 0;
  double flops = 0;
};

// A LaunchCost as a call: a braced {bytes, flops} in MG_LAUNCH's arguments would be split at its comma.
inline LaunchCost launch_cost(double bytes, double flops) { return {bytes, flops}; }

// The cost of a pass over `n` elements reading `reads` and writing `writes` values of `value_bytes`
// each, doing `flops_per_element` operations: the elementwise kernels' shape of cost.
inline LaunchCost per_element(int64_t n, int reads, int writes, int value_bytes, double flops_per_element = 0) {
  return {double(n) * (reads + writes) * value_bytes, double(n) * flops_per_element};
}

}  // namespace mg::kernels::cuda

#if MG_CUDA_SIM
#include "multigrad/sim/launch.h"
#define MG_LAUNCH_NOW(kernel, grid, block, stream, cost, ...)                                    \
  ::mg::sim::launch(#kernel, dim3(grid), dim3(block), stream, (cost).bytes, (cost).flops,        \
                    [&](auto... mg_args_) { return [=] { kernel(mg_args_...); }; }(__VA_ARGS__))
#else
#define MG_LAUNCH_NOW(kernel, grid, block, stream, cost, ...) \
  ((void)::mg::kernels::cuda::LaunchCost(cost), kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__))
#endif
#define MG_LAUNCH(kernel, grid, block, stream, cost, ...)                                        \
  do {                                                                                           \
    const ::mg::kernels::cuda::KernelTimer mg_timer_(__FILE__, #kernel, stream);                 \
    MG_LAUNCH_NOW(kernel, grid, block, stream, cost, __VA_ARGS__);                               \
  } while (0)
