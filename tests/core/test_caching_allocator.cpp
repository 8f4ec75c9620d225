// tests/core/test_caching_allocator.cpp — the bookkeeping of the CUDA caching allocator
// (core/block_pool.h), driven on the CPU by a fake segment backend that hands out host memory
// and records every call.
#include <cstdint>
#include <cstdlib>
#include <map>

#include "test_util.h"
#include "multigrad/core/block_pool.h"

using mg::detail::BlockPool;
using mg::test::require_error;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// Host memory standing in for cudaMalloc, with an optional capacity to simulate running out.
struct FakeDevice {
  size_t capacity = SIZE_MAX;
  std::map<void*, size_t> segments;  // live segments and their sizes
  int mallocs = 0, frees = 0;

  size_t in_use() const {
    size_t total = 0;
    for (const auto& [ptr, n] : segments) total += n;
    return total;
  }

  mg::detail::SegmentBackend backend() {
    mg::detail::SegmentBackend b;
    b.allocate = [this](size_t n) -> void* {
      if (in_use() + n > capacity) return nullptr;
      void* p = std::malloc(n);
      segments[p] = n;
      ++mallocs;
      return p;
    };
    b.release = [this](void* p, size_t n) {
      REQUIRE(segments.at(p) == n);  // released whole, with the size it was obtained with
      segments.erase(p);
      std::free(p);
      ++frees;
    };
    return b;
  }
};

// Two distinct stream identities.
int stream_a_tag, stream_b_tag;
const void* const kStreamA = &stream_a_tag;
const void* const kStreamB = &stream_b_tag;

char* bytes(void* p) { return static_cast<char*>(p); }

}  // namespace

TEST_CASE("block sizes round to 512 bytes and segments follow the size class", "[core][caching_allocator]") {
  CHECK(BlockPool::round_size(0) == 512);
  CHECK(BlockPool::round_size(1) == 512);
  CHECK(BlockPool::round_size(512) == 512);
  CHECK(BlockPool::round_size(513) == 1024);
  CHECK(BlockPool::segment_size(512) == 2 * MiB);      // small pool
  CHECK(BlockPool::segment_size(1 * MiB) == 2 * MiB);
  CHECK(BlockPool::segment_size(1 * MiB + 512) == 20 * MiB);  // shares a large segment
  CHECK(BlockPool::segment_size(10 * MiB) == 10 * MiB);       // a segment of its own
  CHECK(BlockPool::segment_size(11 * MiB + 512) == 12 * MiB); // rounded up to 2 MiB
}

TEST_CASE("small blocks are carved from one 2 MiB segment", "[core][caching_allocator]") {
  FakeDevice dev;
  BlockPool pool("fake:0", dev.backend());
  void* a = pool.allocate(1, kStreamA);
  void* b = pool.allocate(600, kStreamA);
  void* c = pool.allocate(512, kStreamA);
  CHECK(dev.mallocs == 1);
  CHECK(bytes(b) == bytes(a) + 512);   // the remainder after a's split
  CHECK(bytes(c) == bytes(b) + 1024);  // 600 bytes round to 1024
  mg::MemoryStats s = pool.stats();
  CHECK(s.allocated == 512 + 1024 + 512);
  CHECK(s.reserved == int64_t(2 * MiB));
  CHECK(s.peak == s.allocated);
  pool.deallocate(a);
  pool.deallocate(b);
  pool.deallocate(c);
  CHECK(pool.stats().allocated == 0);
  CHECK(pool.stats().reserved == int64_t(2 * MiB));  // cached, not returned
  CHECK(dev.frees == 0);
}

TEST_CASE("a freed block is reused for the next request on its stream", "[core][caching_allocator]") {
  FakeDevice dev;
  BlockPool pool("fake:0", dev.backend());
  void* a = pool.allocate(100 * KiB, kStreamA);
  pool.deallocate(a);
  void* again = pool.allocate(100 * KiB, kStreamA);
  CHECK(again == a);
  CHECK(dev.mallocs == 1);
  pool.deallocate(again);
}

TEST_CASE("best fit picks the smallest free block that is large enough", "[core][caching_allocator]") {
  FakeDevice dev;
  BlockPool pool("fake:0", dev.backend());
  // Carve a segment into [4K a][512 sep1][1K b][512 sep2][rest], then free a and b: two holes.
  void* a = pool.allocate(4 * KiB, kStreamA);
  pool.allocate(512, kStreamA);
  void* b = pool.allocate(1 * KiB, kStreamA);
  pool.allocate(512, kStreamA);
  pool.deallocate(a);
  pool.deallocate(b);
  CHECK(pool.allocate(1 * KiB, kStreamA) == b);  // the 1K hole, not the 4K one or the rest
  CHECK(pool.allocate(2 * KiB, kStreamA) == a);  // the 4K hole, split
  CHECK(pool.allocate(2 * KiB, kStreamA) == bytes(a) + 2 * KiB);  // its other half
  CHECK(dev.mallocs == 1);
}

TEST_CASE("freed neighbours coalesce and a whole segment can be released", "[core][caching_allocator]") {
  FakeDevice dev;
  BlockPool pool("fake:0", dev.backend());
  void* a = pool.allocate(512, kStreamA);
  void* b = pool.allocate(512, kStreamA);
  void* c = pool.allocate(512, kStreamA);
  pool.deallocate(a);
  pool.deallocate(c);  // merges with the free remainder after it
  pool.release_cached();
  CHECK(dev.frees == 0);  // b still splits the segment
  pool.deallocate(b);     // merges with both sides: the segment is whole again
  void* whole = pool.allocate(1 * MiB, kStreamA);  // the largest small request fits only a whole segment
  CHECK(whole == a);
  CHECK(dev.mallocs == 1);
  pool.deallocate(whole);
  pool.release_cached();
  CHECK(dev.frees == 1);
  CHECK(dev.segments.empty());
  CHECK(pool.stats().reserved == 0);
}

TEST_CASE("blocks are reused only on the stream they were allocated on", "[core][caching_allocator]") {
  FakeDevice dev;
  BlockPool pool("fake:0", dev.backend());
  void* a = pool.allocate(4 * KiB, kStreamA);
  pool.deallocate(a);
  void* b = pool.allocate(4 * KiB, kStreamB);
  CHECK(b != a);
  CHECK(dev.mallocs == 2);  // stream B got its own segment
  void* a2 = pool.allocate(4 * KiB, kStreamA);
  CHECK(a2 == a);
  CHECK(pool.stats().reserved == int64_t(4 * MiB));
  pool.deallocate(b);
  pool.deallocate(a2);
}

TEST_CASE("large requests share 20 MiB segments or get their own", "[core][caching_allocator]") {
  FakeDevice dev;
  BlockPool pool("fake:0", dev.backend());
  void* a = pool.allocate(3 * MiB, kStreamA);
  void* b = pool.allocate(3 * MiB, kStreamA);
  CHECK(dev.mallocs == 1);
  CHECK(bytes(b) == bytes(a) + 3 * MiB);
  CHECK(pool.stats().reserved == int64_t(20 * MiB));
  // Too big for the 14 MiB left: rounds to 16 MiB + 512 in a segment of 18 MiB, split.
  void* c = pool.allocate(16 * MiB + 1, kStreamA);
  CHECK(dev.mallocs == 2);
  CHECK(pool.stats().reserved == int64_t(38 * MiB));
  CHECK(pool.stats().allocated == int64_t(22 * MiB + 512));
  // A small request never comes from a large segment.
  void* d = pool.allocate(1 * KiB, kStreamA);
  CHECK(dev.mallocs == 3);
  for (void* p : {a, b, c, d}) pool.deallocate(p);
}

TEST_CASE("a large block is not split off a remainder of 1 MiB or less", "[core][caching_allocator]") {
  FakeDevice dev;
  BlockPool pool("fake:0", dev.backend());
  void* a = pool.allocate(19 * MiB + 512 * KiB, kStreamA);  // own segment of 20 MiB, 0.5 MiB over
  CHECK(pool.stats().allocated == int64_t(20 * MiB));  // the whole segment is the block
  pool.deallocate(a);
  void* b = pool.allocate(18 * MiB, kStreamA);  // leaves 2 MiB: split
  CHECK(b == a);
  CHECK(pool.stats().allocated == int64_t(18 * MiB));
  pool.deallocate(b);
}

TEST_CASE("out of memory releases the cache and retries once", "[core][caching_allocator]") {
  FakeDevice dev;
  dev.capacity = 20 * MiB;
  BlockPool pool("fake:0", dev.backend());
  pool.deallocate(pool.allocate(1 * KiB, kStreamA));  // leaves a cached 2 MiB segment
  void* big = pool.allocate(3 * MiB, kStreamA);       // 2 + 20 MiB > capacity: release, retry
  CHECK(dev.frees == 1);
  CHECK(pool.stats().reserved == int64_t(20 * MiB));
  pool.deallocate(big);
}

TEST_CASE("out of memory after the retry throws naming the device, size and stats", "[core][caching_allocator]") {
  FakeDevice dev;
  dev.capacity = 4 * MiB;
  BlockPool pool("fake:3", dev.backend());
  void* held = pool.allocate(1 * MiB, kStreamA);
  require_error([&] { pool.allocate(5 * MiB, kStreamA); },
                {"fake:3: out of memory allocating 5242880 bytes", "1048576 bytes allocated", "2097152 bytes reserved"});
  CHECK(pool.stats().allocated == int64_t(1 * MiB));  // the failure changed nothing
  pool.deallocate(held);
}

TEST_CASE("caching allocator peak follows allocations and resets", "[core][caching_allocator]") {
  FakeDevice dev;
  BlockPool pool("fake:0", dev.backend());
  void* a = pool.allocate(4 * KiB, kStreamA);
  void* b = pool.allocate(8 * KiB, kStreamA);
  pool.deallocate(b);
  CHECK(pool.stats().peak == int64_t(12 * KiB));
  pool.reset_peak();
  CHECK(pool.stats().peak == int64_t(4 * KiB));
  pool.deallocate(a);
  CHECK(pool.stats().peak == int64_t(4 * KiB));
}

TEST_CASE("freeing an unknown address is an error", "[core][caching_allocator]") {
  FakeDevice dev;
  BlockPool pool("fake:0", dev.backend());
  void* a = pool.allocate(512, kStreamA);
  require_error([&] { pool.deallocate(bytes(a) + 8); }, {"fake:0", "did not hand out"});
  pool.deallocate(a);
  require_error([&] { pool.deallocate(a); }, {"did not hand out"});  // double free
}

TEST_CASE("destroying the pool returns every segment", "[core][caching_allocator]") {
  FakeDevice dev;
  {
    BlockPool pool("fake:0", dev.backend());
    pool.allocate(512, kStreamA);                          // live, in a split segment
    pool.deallocate(pool.allocate(3 * MiB, kStreamA));     // cached
    pool.allocate(12 * MiB, kStreamB);                     // live, own segment
    CHECK(dev.segments.size() == 3);
  }
  CHECK(dev.segments.empty());
  CHECK(dev.frees == 3);
}
