// kernels/cuda/handle_pool.cuh — per-thread handles of the CUDA libraries (cuBLAS, cuDNN).
//
// A library handle holds workspace, must not be used by two threads at once, and costs
// milliseconds to create. Each thread leases one handle per physical GPU from a process-wide
// pool on first use and returns it when the thread exits (as PyTorch does); every call binds
// the handle to the caller's stream. Lib describes the library:
//   struct Lib { using Handle = ...; static Handle create(); static void set_stream(Handle, cudaStream_t); };
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "multigrad/core/cuda_check.h"

namespace mg::kernels::cuda {

template <class Lib>
class HandlePool {
 public:
  using Handle = typename Lib::Handle;

  // Leaked: threads may exit (and return handles) during static destruction.
  static HandlePool& instance() {
    static auto* pool = new HandlePool;
    return *pool;
  }

  // A free handle for physical GPU `gpu`, or a new one (created on the current device, which
  // the caller has set to `gpu`).
  Handle acquire(int gpu) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (size_t(gpu) < free_.size() && !free_[size_t(gpu)].empty()) {
        Handle h = free_[size_t(gpu)].back();
        free_[size_t(gpu)].pop_back();
        return h;
      }
    }
    return Lib::create();
  }
  void release(int gpu, Handle h) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.size() <= size_t(gpu)) free_.resize(size_t(gpu) + 1);
    free_[size_t(gpu)].push_back(h);
  }

 private:
  std::mutex mutex_;
  std::vector<std::vector<Handle>> free_;  // by physical GPU
};

// The calling thread's handle for the current device, bound to `stream`.
template <class Lib>
typename Lib::Handle thread_handle(cudaStream_t stream) {
  using Handle = typename Lib::Handle;
  // The handles this thread leased, by physical GPU; returned to the pool at thread exit.
  struct ThreadHandles {
    std::vector<Handle> by_gpu;
    ~ThreadHandles() {
      for (size_t gpu = 0; gpu < by_gpu.size(); ++gpu)
        if (by_gpu[gpu] != nullptr) HandlePool<Lib>::instance().release(int(gpu), by_gpu[gpu]);
    }
  };
  thread_local ThreadHandles leased;
  int gpu = 0;
  MG_CUDA_CHECK(cudaGetDevice(&gpu));
  auto& handles = leased.by_gpu;
  if (handles.size() <= size_t(gpu)) handles.resize(size_t(gpu) + 1, nullptr);
  if (handles[size_t(gpu)] == nullptr) handles[size_t(gpu)] = HandlePool<Lib>::instance().acquire(gpu);
  Lib::set_stream(handles[size_t(gpu)], stream);
  return handles[size_t(gpu)];
}

}  // namespace mg::kernels::cuda
