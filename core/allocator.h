// core/allocator.h — memory for tensors, and the statistics every device reports.
//
// Each device has one Allocator: cpu:N a 64-byte-aligned host allocator (64 bytes = a cache
// line and an AVX-512 vector) with its own counters; cuda:N the caching allocator of
// core/cuda_allocator.cpp. Pinned (page-locked) host memory has its own allocator, used by the
// data loader for copies that overlap compute.
#pragma once

#include <cstddef>
#include <cstdint>

#include "multigrad/core/device.h"

namespace mg {

struct MemoryStats {
  int64_t allocated = 0;  // bytes held by live tensors
  int64_t reserved = 0;   // bytes obtained from the system (>= allocated for caching allocators)
  int64_t peak = 0;       // largest `allocated` since start or reset_peak_memory_stats
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Never returns null: running out of memory throws mg::Error naming the device and size.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
  // Returns cached, unused blocks to the system (a no-op for non-caching allocators).
  virtual void empty_cache() {}
};

// The allocator of a device; throws if the device does not exist.
Allocator& allocator_for(const Device& device);
// Page-locked host memory when CUDA is available, else ordinary aligned host memory.
Allocator& pinned_allocator();

MemoryStats memory_stats(const Device& device);
void reset_peak_memory_stats(const Device& device);
void empty_cache(const Device& device);

}  // namespace mg
