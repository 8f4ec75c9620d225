// sim/launch.h — a kernel launch in the simulated build (kernels/cuda/launch.cuh's MG_LAUNCH).
//
// The configuration is checked as the hardware checks it: 1 to 1024 threads per block, block
// dimensions up to (1024, 1024, 64), grid dimensions up to (2^31 - 1, 65535, 65535), none 0. A bad
// one, or an error the device already holds, makes the launch fail as on a GPU: nothing runs and
// the error is what cudaGetLastError returns next. Otherwise `call` (the kernel with its arguments,
// already evaluated) runs on every thread of the grid, in order on `stream` (sim/runtime.cpp);
// `bytes` and `flops` (what the launcher declares the launch costs) go into the ledger only.
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace mg::sim {

void launch_kernel(const char* kernel, dim3 grid, dim3 block, cudaStream_t stream, double bytes, double flops,
                   std::function<void()> call);

template <class Call>
void launch(const char* kernel, dim3 grid, dim3 block, cudaStream_t stream, double bytes, double flops, Call call) {
  launch_kernel(kernel, grid, block, stream, bytes, flops, std::function<void()>(std::move(call)));
}

}  // namespace mg::sim
