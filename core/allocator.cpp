// core/allocator.cpp — host allocators (one per CPU device, one for pinned memory) and the
// lookup of a device's allocator.
//
// Allocators are created on first use and never destroyed: a Storage keeps a pointer to its
// allocator, and that pointer must stay valid even after set_cpu_device_count shrinks the device
// count, and during static destruction at exit. The tables are therefore leaked on purpose.
//
// Statistics follow the caching allocator's rules: allocated counts rounded block sizes
// (multiples of 512 bytes), reserved the segments obtained from the system.
#include "multigrad/core/allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "multigrad/core/block_pool.h"
#include "multigrad/core/error.h"

#if MG_WITH_CUDA
#include <cuda_runtime.h>

#include "multigrad/core/cuda_allocator.h"
#endif

namespace mg {

namespace {

// A cache line, and the width of an AVX-512 vector.
constexpr size_t kHostAlignment = 64;

// Page-locked memory exists only with CUDA; pinned_allocator() asks for it only then.
void* host_alloc(size_t nbytes, bool page_locked) {
#if MG_WITH_CUDA
  if (page_locked) {
    void* ptr = nullptr;
    if (cudaHostAlloc(&ptr, nbytes, cudaHostAllocDefault) == cudaSuccess) return ptr;
    cudaGetLastError();  // an out-of-memory error must not stick to later CUDA calls
    return nullptr;
  }
#endif
  return std::aligned_alloc(kHostAlignment, nbytes);
}

void host_free(void* ptr, bool page_locked) {
#if MG_WITH_CUDA
  if (page_locked) {
    cudaFreeHost(ptr);
    return;
  }
#endif
  std::free(ptr);
}

// Host memory is cached the way CUDA memory is (core/block_pool.h, design note in
// core/cuda_allocator.cpp), with one stream: a training step frees and reallocates the same
// large buffers every iteration, and a fresh multi-MiB allocation from the C library is a new
// mmap whose pages fault in one by one on first touch (about 0.3 ms per MiB here, several
// times the cost of the elementwise op that fills it). Cached blocks are reused without faults.
std::unique_ptr<Allocator> make_host_allocator(const std::string& name, bool page_locked) {
  return std::make_unique<detail::PoolAllocator>(
      name, detail::SegmentBackend{[page_locked](size_t nbytes) { return host_alloc(nbytes, page_locked); },
                                   [page_locked](void* ptr, size_t) { host_free(ptr, page_locked); }});
}

// The CPU allocators, indexed by device; grows as devices are first used.
class CpuAllocatorTable {
 public:
  Allocator& get(int index) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (size_t(index) >= allocators_.size()) allocators_.resize(size_t(index) + 1);
    if (!allocators_[index]) {
      allocators_[index] = make_host_allocator(Device(DeviceType::CPU, index).str(), false);
    }
    return *allocators_[index];
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Allocator>> allocators_;  // the vector moves, the allocators do not
};

}  // namespace

Allocator& allocator_for(const Device& device) {
  check_device_exists(device);
  if (device.is_cpu()) {
    static auto* table = new CpuAllocatorTable;  // leaked: see the top of this file
    return table->get(device.index());
  }
#if MG_WITH_CUDA
  return detail::cuda_caching_allocator(device);
#else
  MG_ERROR(device, ": multigrad was built without CUDA");  // unreachable: check_device_exists threw
#endif
}

Allocator& pinned_allocator() {
#if MG_WITH_CUDA
  // cudaHostAlloc needs a working driver; without a GPU, ordinary aligned memory does the job.
  static Allocator* pinned = make_host_allocator("pinned host memory", device_count(DeviceType::CUDA) > 0).release();
#else
  static Allocator* pinned = make_host_allocator("pinned host memory", false).release();
#endif
  return *pinned;
}

MemoryStats memory_stats(const Device& device) { return allocator_for(device).stats(); }

void reset_peak_memory_stats(const Device& device) { allocator_for(device).reset_peak(); }

void empty_cache(const Device& device) { allocator_for(device).empty_cache(); }

}  // namespace mg
