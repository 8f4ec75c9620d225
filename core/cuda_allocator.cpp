// core/cuda_allocator.cpp — the CUDA caching allocator: one per logical CUDA device.
//
// Design note
// -----------
// cudaMalloc and cudaFree are slow (cudaFree also synchronises the whole device), and a
// training step frees and reallocates the same sizes every iteration. So memory is never given
// back to CUDA on free: it is cached and handed out again, and in the steady state no
// cudaMalloc happens at all. The bookkeeping lives in core/block_pool.{h,cpp}; this file only
// connects it to cudaMalloc/cudaFree and to streams.
//
// Segments and blocks. A cache miss obtains a *segment* with one cudaMalloc; a segment is cut
// into *blocks*, the units handed out. Every request is rounded up to a multiple of 512 bytes.
//   - Small requests (<= 1 MiB) come from a small pool of 2 MiB segments, so that a thousand
//     biases and norms do not each cost a cudaMalloc.
//   - Large requests below 10 MiB share 20 MiB segments; larger ones get a segment of their
//     own, rounded up to 2 MiB so that slightly different sizes can reuse it.
//   The two pools never lend to each other: small blocks do not fragment large segments.
//
// Best fit, split, coalesce. A request takes the smallest free block of its pool that fits.
// If the leftover is big enough to be useful (>= 512 B in the small pool, > 1 MiB in the large
// one) the block is split and the leftover stays free. On free, a block merges with free
// neighbours of its own segment, so that a split segment becomes whole again when all of its
// blocks are freed.
//
// Streams. A block belongs to the stream that was current on its device when it was allocated
// (core/stream.h), and is reused only for allocations on that same stream. Kernels on one
// stream run in order, so a block freed on the host while a kernel that uses it is still
// queued can safely be handed to the next allocation on that stream: the new user's kernels
// queue behind the old ones. No event or synchronisation is needed in that case. A tensor used
// on *another* stream is not covered: the caller must order that stream's work before the free
// (an Event recorded after the last use and waited on), or the memory could be reused while the
// other stream still reads it. (PyTorch's record_stream automates this; multigrad's
// communication streams order their work with events instead.)
//
// Out of memory. When cudaMalloc fails, the cache's whole free segments are released with
// cudaFree and the cudaMalloc is retried once; if it fails again the error names the device,
// the request and the statistics. empty_cache() releases the whole free segments on demand;
// split segments with a block in use stay.
//
// Statistics. allocated = bytes of blocks handed out (rounded sizes), reserved = bytes of
// segments obtained from cudaMalloc, peak = the largest `allocated`. One mutex per device
// guards the pool; cudaMalloc/cudaFree run under it.
//
// Logical devices (MG_CUDA_LOGICAL_DEVICES) that share a GPU each have their own allocator and
// their own segments.
//
// The whole file compiles only with CUDA (MG_WITH_CUDA); without it there are no CUDA devices.
#if MG_WITH_CUDA
#include "multigrad/core/cuda_allocator.h"

#include <memory>
#include <mutex>
#include <vector>

#include <cuda_runtime.h>

#include "multigrad/core/block_pool.h"
#include "multigrad/core/cuda_check.h"
#include "multigrad/core/cuda_device_guard.h"
#include "multigrad/core/stream.h"

namespace mg::detail {

namespace {

SegmentBackend cuda_backend(int physical) {
  SegmentBackend backend;
  backend.allocate = [physical](size_t nbytes) -> void* {
    CudaDeviceGuard guard(physical);
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it: the pool retries or reports out-of-memory itself
      return nullptr;
    }
    MG_CUDA_CHECK(err);
    return ptr;
  };
  backend.release = [physical](void* ptr, size_t) {
    CudaDeviceGuard guard(physical);
    MG_CUDA_CHECK(cudaFree(ptr));
  };
  return backend;
}

}  // namespace

Allocator& cuda_caching_allocator(const Device& device) {
  // Sized once: the number of logical devices is fixed for the life of the process. Leaked, as
  // the CPU allocators are (core/allocator.cpp), so storages freed at exit find their allocator.
  static std::mutex mutex;
  static auto* allocators = new std::vector<std::unique_ptr<Allocator>>(size_t(device_count(DeviceType::CUDA)));
  check_device_exists(device);
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*allocators)[size_t(device.index())];
  if (!slot) {
    slot = std::make_unique<PoolAllocator>(device.str(), cuda_backend(cuda_physical_index(device.index())),
                                           [device] { return current_stream(device).handle(); });
  }
  return *slot;
}

}  // namespace mg::detail

#endif  // MG_WITH_CUDA
