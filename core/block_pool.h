// core/block_pool.h — internal: the bookkeeping of the CUDA caching allocator, with no CUDA in
// it, so that the tests can drive it on the CPU with a fake segment backend.
//
// The policy (size classes, splitting, stream-ordered reuse, coalescing) is explained in the
// design note at the top of core/cuda_allocator.cpp.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "multigrad/core/allocator.h"

namespace mg::detail {

// Where segments come from: cudaMalloc / cudaFree for a GPU, plain host memory in the tests.
struct SegmentBackend {
  std::function<void*(size_t nbytes)> allocate;  // null when out of memory; throws on other errors
  std::function<void(void* ptr, size_t nbytes)> release;
};

class BlockPool {
 public:
  using StreamId = const void*;  // a cudaStream_t; blocks are reused only on their own stream

  static constexpr size_t kMinBlockSize = 512;       // every block is a multiple of this
  static constexpr size_t kSmallSize = 1 << 20;      // requests up to 1 MiB use the small pool
  static constexpr size_t kSmallSegment = 2 << 20;   // segment size of the small pool
  static constexpr size_t kMinLargeAlloc = 10 << 20; // large requests below this share ...
  static constexpr size_t kLargeSegment = 20 << 20;  // ... a 20 MiB segment
  static constexpr size_t kRoundLarge = 2 << 20;     // larger ones get a segment of their own, rounded

  // `name` labels out-of-memory errors ("cuda:0").
  BlockPool(std::string name, SegmentBackend backend);
  // Returns every segment to the backend, including those of blocks still handed out.
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least nbytes for use on `stream`. When the backend is out of memory, releases
  // the cached segments and retries once, then throws naming the size and the statistics.
  void* allocate(size_t nbytes, StreamId stream);
  // Returns a block to the cache of its stream, merged with free neighbours.
  void deallocate(void* ptr);
  // Returns the free segments that are whole (not split) to the backend.
  void release_cached();

  // allocated: bytes of handed-out blocks (rounded sizes); reserved: bytes of segments.
  MemoryStats stats() const;
  void reset_peak();

  // The size a request is rounded to, and the size of the segment a cache miss obtains for it.
  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t rounded);

 private:
  struct Block;
  // Free blocks ordered by (stream, size, address): lower_bound finds the best fit on a stream.
  struct ByStreamAndSize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeBlocks = std::set<Block*, ByStreamAndSize>;

  Block* take_best_fit(FreeBlocks& pool, size_t size, StreamId stream);
  Block* new_segment(FreeBlocks& pool, size_t nbytes, size_t size, StreamId stream);
  void split(Block* block, size_t size);
  void merge_into(Block* block, Block* neighbour);
  void release_cached_locked();

  std::string name_;
  SegmentBackend backend_;
  mutable std::mutex mutex_;
  FreeBlocks small_pool_;
  FreeBlocks large_pool_;
  std::unordered_map<void*, Block*> live_;  // handed-out blocks by address
  int64_t allocated_ = 0;
  int64_t reserved_ = 0;
  int64_t peak_ = 0;
};

// An Allocator over a BlockPool: the CUDA caching allocator and the host allocators. Each
// allocation is for the stream `current_stream()` returns (null: the host's single stream).
class PoolAllocator final : public Allocator {
 public:
  PoolAllocator(std::string name, SegmentBackend backend,
                std::function<BlockPool::StreamId()> current_stream = nullptr)
      : pool_(std::move(name), std::move(backend)), current_stream_(std::move(current_stream)) {}

  void* allocate(size_t nbytes) override {
    return pool_.allocate(nbytes, current_stream_ ? current_stream_() : nullptr);
  }
  void deallocate(void* ptr, size_t) override {
    if (ptr != nullptr) pool_.deallocate(ptr);
  }
  MemoryStats stats() const override { return pool_.stats(); }
  void reset_peak() override { pool_.reset_peak(); }
  void empty_cache() override { pool_.release_cached(); }

 private:
  BlockPool pool_;
  std::function<BlockPool::StreamId()> current_stream_;
};

}  // namespace mg::detail
