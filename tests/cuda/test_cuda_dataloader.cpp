// tests/cuda/test_cuda_dataloader.cpp — the DataLoader delivering to cuda:0: the copy runs on
// its own stream (data/dataloader.cpp), and every batch must equal the one a CPU loader gives.
#include <memory>

#include "cuda_test_util.h"

namespace {

std::shared_ptr<mg::data::TensorDataset> dataset() {
  mg::Tensor inputs = mg::test::cpu_input({50, 3, 4, 4});
  mg::Tensor targets = mg::arange(50, {.dtype = mg::DType::Int64});
  return std::make_shared<mg::data::TensorDataset>(inputs, targets);
}

void check_against_cpu(bool pin_memory, int workers) {
  INFO("pin_memory " << pin_memory << ", workers " << workers);
  auto data = dataset();
  mg::data::DataLoaderOptions options{.batch_size = 8, .shuffle = true, .num_workers = workers, .seed = 5};
  mg::data::DataLoader on_cpu(data, options);
  options.pin_memory = pin_memory;
  options.device = mg::test::gpu();
  mg::data::DataLoader on_gpu(data, options);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    on_cpu.start_epoch(epoch);
    on_gpu.start_epoch(epoch);
    while (auto want = on_cpu.next()) {
      auto got = on_gpu.next();
      REQUIRE(got.has_value());
      CHECK(got->inputs.device() == mg::test::gpu());
      // Work queued on the compute stream right after next() must see the copied data.
      mg::Tensor doubled = got->inputs * 2.0;
      CHECK(doubled.to_vector<float>() == (want->inputs * 2.0).to_vector<float>());
      CHECK(got->targets.to_vector<int64_t>() == want->targets.to_vector<int64_t>());
    }
    CHECK_FALSE(on_gpu.next().has_value());
  }
}

}  // namespace

TEST_CASE("cuda: DataLoader batches on cuda:0 equal the CPU loader's, pageable and pinned", "[cuda]") {
  check_against_cpu(false, 0);
  check_against_cpu(true, 0);
}

TEST_CASE("cuda: DataLoader workers copying on their own stream deliver every batch intact", "[cuda]") {
  check_against_cpu(true, 2);
  check_against_cpu(false, 3);
}

// PyTorch's idiom: a loader that pins its batches on the host, and a copy to the GPU in the
// training loop. When to() returns, the source may die: its pinned block goes back to the cache
// and the next batch of that size is assembled into it. A copy still queued behind slow work
// would then read the next batch (which is what an always-asynchronous pinned copy did).
TEST_CASE("cuda: to() from a pinned batch has read it before the next batch reuses its block", "[cuda]") {
  auto data = dataset();
  mg::data::DataLoaderOptions options{.batch_size = 8, .shuffle = true, .seed = 5};
  mg::data::DataLoader pageable(data, options);
  options.pin_memory = true;
  mg::data::DataLoader pinned(data, options);
  pageable.start_epoch(0);
  pinned.start_epoch(0);
  mg::Tensor slow = mg::randn({256, 256}, {.device = mg::test::gpu()});
  std::vector<mg::Tensor> on_gpu;
  std::vector<std::vector<float>> want;
  while (auto batch = pinned.next()) {
    for (int i = 0; i < 4; ++i) slow = mg::matmul(slow, slow) * (1.0 / 16);  // queued ahead of the copy
    on_gpu.push_back(batch->inputs.to(mg::test::gpu()));
    want.push_back(pageable.next()->inputs.to_vector<float>());
  }
  REQUIRE(on_gpu.size() == want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    INFO("batch " << k);
    CHECK(on_gpu[k].to_vector<float>() == want[k]);
  }
}
