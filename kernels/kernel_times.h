// kernels/kernel_times.h — GPU time per kernel, summed by kernel family: where a CUDA step's time
// goes, without a profiler.
//
// When on (set_kernel_timing(true), or MG_KERNEL_TIMES=1 in the environment at the first launch),
// every CUDA launch (MG_LAUNCH) and every cuBLAS / cuDNN call is bracketed by two CUDA events on
// its stream; take_kernel_times() waits for them and sums the intervals per (family, kernel).
// A family is the kernel's source file (kernels/cuda/norm.cu: "norm"), a kernel the name at
// the launch ("layer_norm_fwd_kernel", "cublas_gemm"). CPU ops record nothing.
//
// What an interval holds: from the moment the stream reached the start event to the moment it
// reached the stop event. When the GPU waits on the host (a launch-bound step), the launch's
// latency lands in the kernel's time; the step's wall time minus the sum is time no timed work
// ran (host work, copies, idle). Each launch costs two event records on the host (a few
// microseconds), so time a step with it off and take the split from separate steps with it on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mg {

struct KernelTime {
  std::string family{};  // the source file's stem: "elementwise", "attention", "matmul", ...
  std::string kernel{};  // the launched kernel or library call
  int64_t launches = 0;
  double ms = 0;       // summed over the launches
};

void set_kernel_timing(bool on);
bool kernel_timing();
// Waits for every interval recorded since the last call and returns their sums, largest first;
// the ledger is then empty. Empty when timing was off or the build has no CUDA.
std::vector<KernelTime> take_kernel_times();

}  // namespace mg
