// tests/core/test_allocator.cpp — host allocators, memory statistics and Storage.
//
// Other tests may hold memory on cpu:0 while these run, so statistics are checked as changes.
// Host memory is cached like CUDA memory (core/block_pool.h): `allocated` counts block sizes,
// which are requests rounded up to a multiple of 512 bytes.
#include <cstdint>
#include <cstring>
#include <memory>

#include "test_util.h"
#include "cpu_devices_guard.h"

using mg::Device;
using mg::DeviceType;
using mg::test::CpuDevicesGuard;
using mg::test::require_error;

TEST_CASE("CPU allocator statistics rise and fall with allocations", "[core][allocator]") {
  Device cpu("cpu:0");
  mg::Allocator& alloc = mg::allocator_for(cpu);
  mg::MemoryStats before = mg::memory_stats(cpu);
  void* a = alloc.allocate(1000);
  void* b = alloc.allocate(24);
  mg::MemoryStats during = mg::memory_stats(cpu);
  CHECK(during.allocated == before.allocated + 1024 + 512);  // 1000 -> 1024, 24 -> 512
  CHECK(during.reserved >= during.allocated);
  CHECK(during.peak >= during.allocated);
  alloc.deallocate(a, 1000);
  alloc.deallocate(b, 24);
  mg::MemoryStats after = mg::memory_stats(cpu);
  CHECK(after.allocated == before.allocated);
  CHECK(after.peak >= before.allocated + 1024);
}

TEST_CASE("reset_peak_memory_stats brings the peak down to what is allocated", "[core][allocator]") {
  Device cpu("cpu:0");
  mg::Allocator& alloc = mg::allocator_for(cpu);
  void* big = alloc.allocate(1 << 20);
  alloc.deallocate(big, 1 << 20);
  CHECK(mg::memory_stats(cpu).peak >= mg::memory_stats(cpu).allocated + (1 << 20));
  mg::reset_peak_memory_stats(cpu);
  mg::MemoryStats reset = mg::memory_stats(cpu);
  CHECK(reset.peak == reset.allocated);
  void* small = alloc.allocate(64);
  CHECK(mg::memory_stats(cpu).peak == reset.allocated + 512);  // one minimum-size block
  alloc.deallocate(small, 64);
}

TEST_CASE("CPU devices keep separate statistics", "[core][allocator]") {
  CpuDevicesGuard guard(2);
  Device cpu0("cpu:0"), cpu1("cpu:1");
  CHECK(&mg::allocator_for(cpu0) != &mg::allocator_for(cpu1));
  mg::MemoryStats before0 = mg::memory_stats(cpu0), before1 = mg::memory_stats(cpu1);
  void* p = mg::allocator_for(cpu1).allocate(4096);
  CHECK(mg::memory_stats(cpu1).allocated == before1.allocated + 4096);
  CHECK(mg::memory_stats(cpu0).allocated == before0.allocated);
  mg::allocator_for(cpu1).deallocate(p, 4096);
  CHECK(mg::memory_stats(cpu1).allocated == before1.allocated);
}

TEST_CASE("CPU and pinned allocations are 64-byte aligned", "[core][allocator]") {
  for (mg::Allocator* alloc : {&mg::allocator_for(Device("cpu")), &mg::pinned_allocator()}) {
    for (size_t n : {1, 3, 63, 64, 65, 1000, 4097}) {
      void* p = alloc->allocate(n);
      INFO(n << " bytes");
      CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
      std::memset(p, 0xAB, n);  // the whole request is writable
      alloc->deallocate(p, n);
    }
  }
}

TEST_CASE("pinned allocator counts its own bytes", "[core][allocator]") {
  mg::Allocator& pinned = mg::pinned_allocator();
  int64_t before = pinned.stats().allocated;
  int64_t cpu_before = mg::memory_stats(Device("cpu")).allocated;
  void* p = pinned.allocate(512);
  CHECK(pinned.stats().allocated == before + 512);  // already a multiple of 512
  CHECK(mg::memory_stats(Device("cpu")).allocated == cpu_before);
  pinned.deallocate(p, 512);
  CHECK(pinned.stats().allocated == before);
}

TEST_CASE("an impossible host allocation throws naming the device and size", "[core][allocator]") {
  size_t huge = size_t(1) << 60;
  require_error([&] { mg::allocator_for(Device("cpu")).allocate(huge); },
                {"cpu:0", "out of memory", std::to_string(huge) + " bytes"});
}

TEST_CASE("allocator_for and memory_stats throw for missing devices", "[core][allocator]") {
  CpuDevicesGuard guard(2);
  require_error([] { mg::allocator_for(Device("cpu:5")); }, {"cpu:5: no such device", "2 CPU devices"});
  require_error([] { mg::memory_stats(Device("cpu:2")); }, {"cpu:2: no such device"});
  Device missing(DeviceType::CUDA, mg::device_count(DeviceType::CUDA));
  require_error([&] { mg::memory_stats(missing); }, {missing.str() + ": no such device"});
  require_error([&] { mg::empty_cache(missing); }, {"no such device"});
  mg::empty_cache(Device("cpu:1"));
}

TEST_CASE("Storage allocates through its device's allocator and frees on destruction", "[core][storage]") {
  CpuDevicesGuard guard(2);
  Device cpu1("cpu:1");
  int64_t before = mg::memory_stats(cpu1).allocated;
  {
    mg::Storage storage(300, cpu1);
    CHECK(storage.nbytes() == 300);
    CHECK(storage.device() == cpu1);
    CHECK(storage.data() != nullptr);
    CHECK_FALSE(storage.pinned());
    CHECK(mg::memory_stats(cpu1).allocated == before + 512);  // 300 rounds up to a block of 512
  }
  CHECK(mg::memory_stats(cpu1).allocated == before);
}

TEST_CASE("a zero-byte Storage allocates nothing", "[core][storage]") {
  Device cpu("cpu:0");
  int64_t before = mg::memory_stats(cpu).allocated;
  mg::Storage storage(0, cpu);
  CHECK(storage.data() == nullptr);
  CHECK(storage.nbytes() == 0);
  CHECK(mg::memory_stats(cpu).allocated == before);
}

TEST_CASE("a Storage from the pinned allocator says so", "[core][storage]") {
  int64_t before = mg::pinned_allocator().stats().allocated;
  {
    mg::Storage storage(128, Device("cpu:0"), mg::pinned_allocator());
    CHECK(storage.pinned());
    CHECK(mg::pinned_allocator().stats().allocated == before + 512);
  }
  CHECK(mg::pinned_allocator().stats().allocated == before);
}

TEST_CASE("memory on a CPU device stays valid after the device count shrinks", "[core][storage]") {
  CpuDevicesGuard guard(3);
  int64_t before = mg::memory_stats(Device("cpu:2")).allocated;
  auto storage = std::make_unique<mg::Storage>(64, Device("cpu:2"));
  mg::set_cpu_device_count(1);
  std::memset(storage->data(), 1, 64);  // still writable
  require_error([] { mg::Storage s(64, Device("cpu:2")); }, {"cpu:2: no such device"});
  storage.reset();  // returns its bytes to the allocator of the vanished device
  mg::set_cpu_device_count(3);
  CHECK(mg::memory_stats(Device("cpu:2")).allocated == before);
}

TEST_CASE("freed host memory is cached and reused without growing reserved", "[core][allocator]") {
  CpuDevicesGuard guard(2);
  Device cpu1("cpu:1");
  mg::Allocator& alloc = mg::allocator_for(cpu1);
  const size_t big = 64u << 20;  // a 16M-float tensor
  void* first = alloc.allocate(big);
  alloc.deallocate(first, big);
  const int64_t reserved = mg::memory_stats(cpu1).reserved;
  CHECK(reserved >= int64_t(big));
  void* second = alloc.allocate(big);
  CHECK(second == first);
  CHECK(mg::memory_stats(cpu1).reserved == reserved);
  alloc.deallocate(second, big);
  mg::empty_cache(cpu1);
  CHECK(mg::memory_stats(cpu1).reserved <= reserved - int64_t(big));
}
