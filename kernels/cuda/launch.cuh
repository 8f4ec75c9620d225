// kernels/cuda/launch.cuh — the one way kernels are launched.
//
//   MG_LAUNCH(kernel, grid, block, stream, args...)
// is `kernel<<<grid, block, 0, stream>>>(args...)` under nvcc. In the simulated build
// (MG_CUDA_SIM, sim/README.md) the same line hands the kernel's name, its configuration and a call
// of it to the simulator, which checks the configuration as the hardware does and runs the
// grid's threads on the stream. The arguments are evaluated and copied at the launch, as
// <<<...>>> does, and the kernel's template arguments are deduced from them in the same way.
// A kernel whose name holds a comma (template arguments) goes through a local function pointer:
//   auto* kernel = &reduce_rows_kernel<true, T, Op>;  MG_LAUNCH(kernel, ...);
// Every launcher uses it and then checks the launch (MG_CUDA_CHECK_LAUNCH).
// With kernel timing on (kernels/kernel_times.h) each launch is also an interval in the ledger,
// named by this file's stem and `kernel` as written.
#pragma once

#include <cuda_runtime.h>

#include "multigrad/kernels/cuda/kernel_timer.cuh"

#if MG_CUDA_SIM
#include "multigrad/sim/launch.h"
#define MG_LAUNCH_NOW(kernel, grid, block, stream, ...)                                          \
  ::mg::sim::launch(#kernel, dim3(grid), dim3(block), stream,                                    \
                    [&](auto... mg_args_) { return [=] { kernel(mg_args_...); }; }(__VA_ARGS__))
#else
#define MG_LAUNCH_NOW(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif
#define MG_LAUNCH(kernel, grid, block, stream, ...)                                              \
  do {                                                                                           \
    const ::mg::kernels::cuda::KernelTimer mg_timer_(__FILE__, #kernel, stream);                 \
    MG_LAUNCH_NOW(kernel, grid, block, stream, __VA_ARGS__);                                     \
  } while (0)
