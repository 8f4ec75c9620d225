// core/block_pool.cpp — best-fit blocks carved from segments, split on allocation and merged
// on free. The why is in the design note of core/cuda_allocator.cpp.
#include "multigrad/core/block_pool.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "multigrad/core/error.h"

namespace mg::detail {

// A piece of a segment. The blocks of one segment form a doubly linked list in address order,
// so a freed block can find its neighbours to merge with.
struct BlockPool::Block {
  void* ptr = nullptr;
  size_t size = 0;
  StreamId stream = nullptr;
  FreeBlocks* pool = nullptr;  // the pool the block returns to when free
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;
};

bool BlockPool::ByStreamAndSize::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return std::less<StreamId>()(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return std::less<void*>()(a->ptr, b->ptr);
}

BlockPool::BlockPool(std::string name, SegmentBackend backend)
    : name_(std::move(name)), backend_(std::move(backend)) {}

BlockPool::~BlockPool() {
  std::vector<Block*> blocks(small_pool_.begin(), small_pool_.end());
  blocks.insert(blocks.end(), large_pool_.begin(), large_pool_.end());
  for (const auto& [ptr, block] : live_) blocks.push_back(block);
  // The first block of each segment holds the segment's address; its list holds the size.
  for (Block* head : blocks) {
    if (head->prev != nullptr) continue;
    size_t segment_bytes = 0;
    for (Block* b = head; b != nullptr; b = b->next) segment_bytes += b->size;
    backend_.release(head->ptr, segment_bytes);
  }
  for (Block* b : blocks) delete b;
}

size_t BlockPool::round_size(size_t nbytes) {
  return std::max(kMinBlockSize, (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize);
}

size_t BlockPool::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void* BlockPool::allocate(size_t nbytes, StreamId stream) {
  // Larger requests would overflow the rounding; no device has this much memory anyway.
  constexpr size_t kMaxRequest = size_t(1) << 62;
  MG_CHECK(nbytes <= kMaxRequest, name_, ": cannot allocate ", nbytes, " bytes");
  std::lock_guard<std::mutex> lock(mutex_);
  size_t size = round_size(nbytes);
  FreeBlocks& pool = size <= kSmallSize ? small_pool_ : large_pool_;
  Block* block = take_best_fit(pool, size, stream);
  if (block == nullptr) block = new_segment(pool, nbytes, size, stream);
  split(block, size);
  block->allocated = true;
  live_.emplace(block->ptr, block);
  allocated_ += int64_t(block->size);
  peak_ = std::max(peak_, allocated_);
  return block->ptr;
}

void BlockPool::deallocate(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  MG_CHECK(it != live_.end(), name_, ": deallocate(", ptr, ") of an address this allocator did not hand out");
  Block* block = it->second;
  live_.erase(it);
  allocated_ -= int64_t(block->size);
  block->allocated = false;
  if (block->prev != nullptr && !block->prev->allocated) merge_into(block, block->prev);
  if (block->next != nullptr && !block->next->allocated) merge_into(block, block->next);
  block->pool->insert(block);
}

void BlockPool::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

MemoryStats BlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {allocated_, reserved_, peak_};
}

void BlockPool::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = allocated_;
}

BlockPool::Block* BlockPool::take_best_fit(FreeBlocks& pool, size_t size, StreamId stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);  // the smallest free block on this stream that is big enough
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

BlockPool::Block* BlockPool::new_segment(FreeBlocks& pool, size_t nbytes, size_t size, StreamId stream) {
  size_t segment = segment_size(size);
  void* ptr = backend_.allocate(segment);
  if (ptr == nullptr) {
    // Cached segments of other sizes or streams may be what stands in the way.
    release_cached_locked();
    ptr = backend_.allocate(segment);
  }
  MG_CHECK(ptr != nullptr, name_, ": out of memory allocating ", nbytes, " bytes (a new segment of ",
           segment, " bytes; ", allocated_, " bytes allocated, ", reserved_,
           " bytes reserved by multigrad after releasing its cache)");
  reserved_ += int64_t(segment);
  Block* block = new Block;
  block->ptr = ptr;
  block->size = segment;
  block->stream = stream;
  block->pool = &pool;
  return block;
}

// Cuts `block` down to `size` when the remainder is worth keeping as a free block of its own:
// in the small pool any remainder of at least kMinBlockSize; in the large pool only one that is
// itself a large size, so that large segments are not whittled into small pieces that no
// large request can use.
void BlockPool::split(Block* block, size_t size) {
  size_t remaining = block->size - size;
  bool small = block->pool == &small_pool_;
  if (small ? remaining < kMinBlockSize : remaining <= kSmallSize) return;
  Block* rest = new Block;
  rest->ptr = static_cast<char*>(block->ptr) + size;
  rest->size = remaining;
  rest->stream = block->stream;
  rest->pool = block->pool;
  rest->prev = block;
  rest->next = block->next;
  if (rest->next != nullptr) rest->next->prev = rest;
  block->next = rest;
  block->size = size;
  rest->pool->insert(rest);
}

// Absorbs the free neighbour (just before or just after `block` in its segment) into `block`.
void BlockPool::merge_into(Block* block, Block* neighbour) {
  neighbour->pool->erase(neighbour);
  if (neighbour == block->prev) {
    block->ptr = neighbour->ptr;
    block->prev = neighbour->prev;
    if (block->prev != nullptr) block->prev->next = block;
  } else {
    block->next = neighbour->next;
    if (block->next != nullptr) block->next->prev = block;
  }
  block->size += neighbour->size;
  delete neighbour;
}

void BlockPool::release_cached_locked() {
  for (FreeBlocks* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      if (block->prev != nullptr || block->next != nullptr) {
        ++it;  // part of a segment that still has blocks in use
        continue;
      }
      backend_.release(block->ptr, block->size);
      reserved_ -= int64_t(block->size);
      it = pool->erase(it);
      delete block;
    }
  }
}

}  // namespace mg::detail
