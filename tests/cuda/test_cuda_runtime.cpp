// tests/cuda/test_cuda_runtime.cpp — the CUDA runtime around the kernels: copies between
// devices (kernels/cuda/copy.cu), memory statistics and the caching allocator, streams and
// events, logical devices, and the errors a wrong device gives.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "multigrad/kernels/kernels.h"
#if MG_WITH_CUDA
#include "multigrad/core/cuda_check.h"
#endif

using namespace mg;
using namespace mg::test;

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

// A Float32 CPU tensor in page-locked memory (what the data loader copies from).
Tensor pinned_tensor(const Shape& shape) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(numel_of(shape)) * sizeof(float), Device("cpu"), pinned_allocator());
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = DType::Float32;
  return Tensor(impl);
}

}  // namespace

TEST_CASE("cuda: host <-> device copies of every dtype are exact", "[cuda]") {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64, DType::BFloat16, DType::Float16, DType::Bool}) {
    INFO(dtype);
    for (int64_t n : odd_sizes()) {
      Tensor x = cpu_input({n}, DType::Float64, 90, 100.0).to(dtype);
      Tensor on_gpu = x.to(gpu());
      REQUIRE(on_gpu.device() == gpu());
      REQUIRE(on_gpu.dtype() == dtype);
      expect_equal(on_gpu.to(Device("cpu")), x);
    }
  }
  // A non-contiguous source is made contiguous on the way.
  Tensor m = cpu_input({17, 29}, DType::Float32, 91);
  expect_equal(m.transpose(0, 1).to(gpu()), m.transpose(0, 1).contiguous());
  expect_equal(zeros({0, 3}).to(gpu()), zeros({0, 3}));
}

TEST_CASE("cuda: non-blocking copies from pinned host memory are ordered before later work", "[cuda]") {
  Tensor values_on_cpu = cpu_input({kMiB + 3}, DType::Float32, 92);
  Tensor pinned = pinned_tensor({kMiB + 3});
  copy_(pinned, values_on_cpu);
  REQUIRE(pinned.storage()->pinned());
  Tensor on_gpu = Tensor::empty({kMiB + 3}, {DType::Float32, gpu()});
  kernels::copy_across_devices(pinned, on_gpu, /*non_blocking=*/true);  // the next op on the stream runs after it
  expect_equal((on_gpu * 1.0).to(Device("cpu")), values_on_cpu);
}

TEST_CASE("cuda: memory_stats rise with allocations and fall when they are freed", "[cuda]") {
  synchronize(gpu());
  MemoryStats before = memory_stats(gpu());
  MemoryStats during;
  {
    Tensor t = empty({4 * kMiB}, {.device = gpu()});  // 16 MiB
    during = memory_stats(gpu());
    REQUIRE(during.allocated >= before.allocated + 16 * kMiB);
    REQUIRE(during.reserved >= during.allocated);
    REQUIRE(during.peak >= during.allocated);
  }
  MemoryStats after = memory_stats(gpu());
  REQUIRE(after.allocated == before.allocated);
  REQUIRE(after.reserved >= after.allocated);
  REQUIRE(after.peak >= during.allocated);
}

TEST_CASE("cuda: the caching allocator reuses a freed block", "[cuda]") {
  synchronize(gpu());
  { Tensor warm = empty({3 * kMiB + 5}, {.device = gpu()}); }
  MemoryStats cached = memory_stats(gpu());
  for (int i = 0; i < 10; ++i) {
    Tensor again = empty({3 * kMiB + 5}, {.device = gpu()});
    REQUIRE(memory_stats(gpu()).reserved == cached.reserved);
  }
}

TEST_CASE("cuda: empty_cache and reset_peak_memory_stats", "[cuda]") {
  synchronize(gpu());
  { Tensor t = empty({8 * kMiB}, {.device = gpu()}); }
  REQUIRE(memory_stats(gpu()).reserved >= 32 * kMiB);
  empty_cache(gpu());
  MemoryStats emptied = memory_stats(gpu());
  REQUIRE(emptied.reserved < 32 * kMiB);
  reset_peak_memory_stats(gpu());
  REQUIRE(memory_stats(gpu()).peak == memory_stats(gpu()).allocated);
}

TEST_CASE("cuda: ops follow the current stream, and events order streams", "[cuda]") {
  Tensor x = cpu_input({kMiB + 3}, DType::Float32, 93);
  Tensor gx = x.to(gpu());
  Event ready(gpu());
  ready.record(current_stream(gpu()));  // gx is complete on the default stream from here
  Stream side = Stream::create(gpu());
  REQUIRE_FALSE(side == current_stream(gpu()));
  Tensor y;
  Event done(gpu());
  {
    StreamGuard guard(side);
    REQUIRE(current_stream(gpu()) == side);
    ready.wait(side);
    y = exp(gx) * 2.0;
    done.record(side);
  }
  REQUIRE_FALSE(current_stream(gpu()) == side);
  done.wait(current_stream(gpu()));
  done.synchronize();
  REQUIRE(done.query());
  expect_close(y, exp(x) * 2.0);
  side.synchronize();
}

TEST_CASE("cuda: device properties", "[cuda]") {
  REQUIRE(device_count(DeviceType::CUDA) >= 1);
  REQUIRE(cuda_unavailable_reason().empty());
  CudaDeviceInfo info = cuda_device_info(0);
  REQUIRE_FALSE(info.name.empty());
  REQUIRE(info.total_memory > 0);
  REQUIRE(info.sm_count > 0);
  REQUIRE(info.major >= 1);
}

TEST_CASE("cuda: logical devices have their own memory and copy to each other", "[cuda]") {
  // cuda_main.cpp asks for two logical devices unless the environment chose otherwise.
  if (device_count(DeviceType::CUDA) < 2) {
    skip_test("only one CUDA device: set MG_CUDA_LOGICAL_DEVICES=2 to run this test");
    return;
  }
  Device d1("cuda:1");
  REQUIRE(cuda_physical_index(1) >= 0);
  Tensor x = cpu_input({1000, 33}, DType::Float32, 94);
  Tensor on0 = x.to(gpu());
  Tensor on1 = on0.to(d1);
  REQUIRE(on1.device() == d1);
  expect_equal(on1, x);
  expect_equal(on1.to(gpu()), x);
  // Memory domains are separate: allocating on cuda:1 leaves cuda:0's count alone.
  int64_t allocated0 = memory_stats(gpu()).allocated;
  Tensor big = empty({4 * kMiB}, {.device = d1});
  REQUIRE(memory_stats(gpu()).allocated == allocated0);
  REQUIRE(memory_stats(d1).allocated >= 16 * kMiB);
  // Ops on cuda:1 compute the same thing.
  expect_close(matmul(on1, on1.transpose(0, 1)), matmul(x, x.transpose(0, 1)));
  require_error([&] { add(on0, on1); }, {"cuda:0", "cuda:1"});
}

TEST_CASE("cuda: threads driving different devices at once", "[cuda]") {
  int devices = std::min(device_count(DeviceType::CUDA), 2);
  Tensor a = cpu_input({200, 150}, DType::Float32, 95), b = cpu_input({150, 60}, DType::Float32, 96);
  Tensor want = matmul(a, b);
  std::vector<Tensor> results(size_t(devices) * 2);
  std::vector<std::thread> threads;
  for (int t = 0; t < devices * 2; ++t)
    threads.emplace_back([&, t] {
      Device d(DeviceType::CUDA, t % devices);
      for (int rep = 0; rep < 5; ++rep) results[size_t(t)] = relu(matmul(a.to(d), b.to(d))).to(Device("cpu"));
    });
  for (auto& th : threads) th.join();
  for (const Tensor& r : results) expect_close(r, relu(want), 1e-4, 1e-4);  // a K=150 sum in two orders
}

TEST_CASE("cuda: wrong devices are clear errors", "[cuda]") {
  require_error([] { zeros({2}, {.device = Device("cuda:7")}); }, {"cuda:7"});
  Tensor c = ones({3});
  Tensor g = ones({3}, {.device = gpu()});
  require_error([&] { add(c, g); }, {"cpu:0", "cuda:0"});
  require_error([&] { matmul(g.reshape({1, 3}), c.reshape({3, 1})); }, {"cpu:0", "cuda:0"});
}

#if MG_WITH_CUDA
TEST_CASE("cuda: an error MG_CUDA_CHECK reports is not reported again by the next launch", "[cuda]") {
  int count = 0;
  MG_CUDA_CHECK(cudaGetDeviceCount(&count));
  require_error([&] { MG_CUDA_CHECK(cudaSetDevice(count + 5)); }, {"cudaSetDevice", "invalid device ordinal"});
  // The failed call's error was taken with its report: the next kernel's launch check is clean.
  Tensor g = ones({5}, {.device = gpu()});
  expect_equal(add(g, g).to(Device("cpu")), full({5}, 2.0));
  REQUIRE(cudaGetLastError() == cudaSuccess);
}
#endif

TEST_CASE("cuda: cuda_free_memory is the driver's free memory of the device's GPU, at most its total", "[cuda]") {
  const int64_t free = mg::cuda_free_memory(0);
  CHECK(free > 0);
  CHECK(free <= mg::cuda_device_info(0).total_memory);
  mg::test::require_error([] { mg::cuda_free_memory(mg::device_count(mg::DeviceType::CUDA)); }, {"no such device"});
}
