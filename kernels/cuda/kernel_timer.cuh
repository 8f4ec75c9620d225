// kernels/cuda/kernel_timer.cuh — one launch's entry in the ledger of kernels/kernel_times.h.
//
// A KernelTimer around a launch or a library call records an event on `stream` when it is made and
// another when it goes out of scope, if timing is on; when it is off it costs one atomic load.
// MG_LAUNCH (launch.cuh) makes one for every kernel; cuBLAS and cuDNN calls make their own.
// `file` is __FILE__ (its stem names the family), `kernel` a string literal: both are kept as
// pointers.
#pragma once

#include <cuda_runtime.h>

namespace mg::kernels::cuda {

// Launches made on this thread inside the scope count toward `family` instead of their own
// file's: matmul.cu puts the casts of a bf16 GEMM's operands under "matmul".
class KernelFamilyScope {
 public:
  explicit KernelFamilyScope(const char* family);
  ~KernelFamilyScope();
  KernelFamilyScope(const KernelFamilyScope&) = delete;
  KernelFamilyScope& operator=(const KernelFamilyScope&) = delete;

 private:
  const char* previous_;
};

class KernelTimer {
 public:
  KernelTimer(const char* file, const char* kernel, cudaStream_t stream);
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

 private:
  const char* file_;
  const char* kernel_;
  cudaStream_t stream_;
  int gpu_ = -1;  // the physical GPU whose events these are; -1 when timing is off
  cudaEvent_t start_ = nullptr;
};

}  // namespace mg::kernels::cuda
