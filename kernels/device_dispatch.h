// kernels/device_dispatch.h — how every kernel family's dispatch file (dispatch.cpp, conv.cpp,
// loss.cpp, norm.cpp, embedding.cpp, optim.cpp) picks the device: check that the tensors share
// one, then run kernels/cpu on a CPU device or kernels/cuda on the device's current stream.
// Internal to kernels/.
#pragma once

#include <initializer_list>

#include "multigrad/core/error.h"
#include "multigrad/core/tensor.h"

#if MG_WITH_CUDA
#include <cuda_runtime.h>

#include "multigrad/core/stream.h"
#endif

namespace mg::kernels {

// The device every defined tensor of an op is on; throws naming the first two that differ.
inline Device one_device(const char* name, std::initializer_list<const Tensor*> tensors) {
  const Device device = (*tensors.begin())->device();
  for (const Tensor* t : tensors)
    MG_CHECK(!t->defined() || t->device() == device, name, ": expected all tensors on one device, got ", device,
             " and ", t->device());
  return device;
}

#if MG_WITH_CUDA
// The calling thread's current stream on a CUDA device; the launchers make the device current.
inline cudaStream_t stream_for(const Device& device) {
  return static_cast<cudaStream_t>(current_stream(device).handle());
}
#endif

}  // namespace mg::kernels

// Runs cpu::fn(args...) on a CPU device, else cuda::fn(args..., stream) on a CUDA device.
#if MG_WITH_CUDA
#define MG_RUN_ON_DEVICE(device, name, fn, ...)                     \
  do {                                                              \
    if ((device).is_cpu()) return cpu::fn(__VA_ARGS__);             \
    return cuda::fn(__VA_ARGS__, ::mg::kernels::stream_for(device)); \
  } while (0)
#else
#define MG_RUN_ON_DEVICE(device, name, fn, ...)                                     \
  do {                                                                              \
    if ((device).is_cpu()) return cpu::fn(__VA_ARGS__);                             \
    MG_ERROR(name, ": multigrad was built without CUDA (tensor on ", device, ")"); \
  } while (0)
#endif
