// tests/core/test_stream.cpp — streams and events. Without a GPU each call must throw a clear
// mg::Error; with one, the current stream, StreamGuard and events must behave.
#include "test_util.h"

using mg::Device;
using mg::DeviceType;
using mg::Event;
using mg::Stream;
using mg::test::require_error;

namespace {
bool have_cuda() { return mg::device_count(DeviceType::CUDA) > 0; }
}  // namespace

TEST_CASE("stream functions refuse CPU devices", "[core][stream]") {
  require_error([] { mg::current_stream(Device("cpu")); }, {"current_stream: expected a CUDA device, got cpu:0"});
  require_error([] { Stream::create(Device("cpu:0")); }, {"Stream::create", "cpu:0"});
  require_error([] { Event e(Device("cpu")); }, {"Event", "cpu:0"});
  require_error([] { mg::set_cuda_device(Device("cpu")); }, {"set_cuda_device", "cpu:0"});
  require_error([] { mg::synchronize(Device("cpu")); }, {"synchronize", "cpu:0"});
}

TEST_CASE("stream functions throw cleanly when there is no CUDA device", "[core][stream]") {
  if (have_cuda()) return;
  Device gpu("cuda:0");
  for (auto* fn : {+[](const Device& d) { mg::current_stream(d); }, +[](const Device& d) { Stream::create(d); },
                   +[](const Device& d) { mg::synchronize(d); }, +[](const Device& d) { mg::set_cuda_device(d); },
                   +[](const Device& d) { Event e(d); }}) {
    require_error([&] { fn(gpu); }, {"cuda:0"});
  }
  require_error([&] { Stream(gpu, nullptr).synchronize(); }, {"cuda:0"});
  require_error([&] { mg::StreamGuard guard(Stream(gpu, nullptr)); }, {"cuda:0"});
}

TEST_CASE("CUDA errors say why no device is available", "[core][stream]") {
  if (have_cuda()) return;
  try {
    mg::current_stream(Device("cuda:0"));
    FAIL("current_stream did not throw");
  } catch (const mg::Error& e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK((msg.find(mg::cuda_unavailable_reason()) != std::string::npos ||
           msg.find("built without CUDA") != std::string::npos));
  }
}

TEST_CASE("each thread starts on the device's default stream and StreamGuard switches it", "[core][stream]") {
  if (!have_cuda()) return;
  Device gpu("cuda:0");
  Stream original = mg::current_stream(gpu);
  CHECK(original.device() == gpu);
  CHECK(original.handle() != nullptr);
  CHECK(mg::current_stream(gpu) == original);
  Stream side = Stream::create(gpu);
  CHECK_FALSE(side == original);
  {
    mg::StreamGuard guard(side);
    CHECK(mg::current_stream(gpu) == side);
  }
  CHECK(mg::current_stream(gpu) == original);
}

TEST_CASE("events order streams and report completion", "[core][stream]") {
  if (!have_cuda()) return;
  Device gpu("cuda:0");
  Stream a = Stream::create(gpu), b = Stream::create(gpu);
  Event done(gpu);
  done.record(a);
  done.wait(b);
  done.synchronize();
  CHECK(done.query());
  b.synchronize();
  mg::synchronize(gpu);
}

TEST_CASE("the CUDA caching allocator reuses freed blocks", "[core][stream][allocator]") {
  if (!have_cuda()) return;
  Device gpu("cuda:0");
  mg::Allocator& alloc = mg::allocator_for(gpu);
  mg::MemoryStats before = alloc.stats();
  void* p = alloc.allocate(1000);
  CHECK(alloc.stats().allocated == before.allocated + 1024);
  CHECK(alloc.stats().reserved >= alloc.stats().allocated);
  alloc.deallocate(p, 1000);
  int64_t reserved = alloc.stats().reserved;
  void* q = alloc.allocate(1000);
  CHECK(alloc.stats().reserved == reserved);  // served from the cache, no cudaMalloc
  alloc.deallocate(q, 1000);
  mg::empty_cache(gpu);
  CHECK(mg::memory_stats(gpu).allocated == before.allocated);
}
