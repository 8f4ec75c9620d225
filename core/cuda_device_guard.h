// core/cuda_device_guard.h — internal, for sources compiled with CUDA (MG_WITH_CUDA): makes a
// physical GPU current for a scope and restores the caller's afterwards, so that creating a
// stream, an event or a memory segment for one device never changes the calling thread's device.
#pragma once

#include <cuda_runtime.h>

#include "multigrad/core/cuda_check.h"

namespace mg::detail {

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int physical) {
    MG_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != physical) MG_CUDA_CHECK(cudaSetDevice(physical));
  }
  ~CudaDeviceGuard() { cudaSetDevice(previous_); }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace mg::detail
