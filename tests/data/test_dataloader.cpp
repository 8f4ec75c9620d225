// tests/data/test_dataloader.cpp — DataLoader: batches the same for any number of workers,
// partial and dropped last batches, an epoch started part-way, pinned memory, another device, transforms, a worker's
// exception reaching next(), and stopping mid-epoch without a hang.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "test_util.h"
#include "core/cpu_devices_guard.h"
#include "multigrad/data/data.h"

using mg::data::Batch;
using mg::data::DataLoader;
using mg::data::DataLoaderOptions;
using mg::data::Dataset;
using mg::data::Example;
using mg::data::TensorDataset;
using mg::test::require_error;

namespace {

// n examples: input i is (1, 2, 2) filled with i + (0, 0.25, 0.5, 0.75), target i.
std::shared_ptr<TensorDataset> counting(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) x.push_back(float(i) + 0.25f * float(j));
    y.push_back(i);
  }
  return std::make_shared<TensorDataset>(mg::tensor(x, {n, 1, 2, 2}), mg::tensor(y, {n}, {.dtype = mg::DType::Int64}));
}

// Every batch of one epoch, as (indices, input values, target values).
struct Seen {
  std::vector<std::vector<int64_t>> indices, targets;
  std::vector<std::vector<float>> inputs;
  bool operator==(const Seen&) const = default;
};

Seen run_epoch(DataLoader& loader, int64_t epoch, int64_t first_batch = 0) {
  Seen seen;
  loader.start_epoch(epoch, first_batch);
  while (auto b = loader.next()) {
    seen.indices.push_back(b->indices);
    seen.inputs.push_back(b->inputs.to_vector<float>());
    seen.targets.push_back(b->targets.to_vector<int64_t>());
  }
  return seen;
}

// Counting examples, but get_batch throws when it meets index `bad`.
class Failing : public Dataset {
 public:
  Failing(int64_t n, int64_t bad) : rows_(counting(n)), bad_(bad) {}
  int64_t size() const override { return rows_->size(); }
  Example get(int64_t i) const override {
    MG_CHECK(i != bad_, "Failing: example ", i, " is unreadable");
    return rows_->get(i);
  }

 private:
  std::shared_ptr<TensorDataset> rows_;
  int64_t bad_;
};

// Counting examples that take a while, so that workers are busy when the loader stops.
class Slow : public Dataset {
 public:
  explicit Slow(int64_t n) : rows_(counting(n)) {}
  int64_t size() const override { return rows_->size(); }
  Example get(int64_t i) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return rows_->get(i);
  }

 private:
  std::shared_ptr<TensorDataset> rows_;
};

}  // namespace

TEST_CASE("DataLoader batches are identical for 0, 1 and 3 workers", "[data]") {
  auto ds = counting(23);
  std::vector<Seen> runs;
  for (int workers : {0, 1, 3}) {
    DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .num_workers = workers, .prefetch = 1, .seed = 5});
    runs.push_back(run_epoch(loader, 0));
    runs.push_back(run_epoch(loader, 1));
  }
  REQUIRE(runs[0].indices.size() == 6);
  CHECK(runs[0] != runs[1]);  // epochs differ
  for (size_t r = 2; r < runs.size(); ++r) CHECK(runs[r] == runs[r % 2]);
  // Batch k is the k-th chunk of the sampler's order, with the matching rows.
  std::vector<int64_t> order = mg::data::RandomSampler(23, 5).indices(1);
  for (size_t k = 0; k < 6; ++k)
    for (size_t j = 0; j < runs[1].indices[k].size(); ++j) {
      int64_t i = order[k * 4 + j];
      CHECK(runs[1].indices[k][j] == i);
      CHECK(runs[1].targets[k][j] == i);
      CHECK(runs[1].inputs[k][j * 4 + 1] == float(i) + 0.25f);
    }
}

TEST_CASE("DataLoader started at batch F gives the epoch's batches F, F + 1, ... for any worker count", "[data]") {
  auto ds = counting(23);  // 6 batches of 4, the last partial
  DataLoader whole(ds, {.batch_size = 4, .shuffle = true, .seed = 5});
  const Seen all = run_epoch(whole, 1);
  for (int workers : {0, 1, 3}) {
    DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .num_workers = workers, .prefetch = 1, .seed = 5});
    for (int64_t first : {1, 4, 5, 6}) {
      INFO("workers " << workers << ", first batch " << first);
      const Seen rest = run_epoch(loader, 1, first);
      REQUIRE(rest.indices.size() == size_t(6 - first));
      CHECK(std::equal(rest.indices.begin(), rest.indices.end(), all.indices.begin() + first));
      CHECK(std::equal(rest.inputs.begin(), rest.inputs.end(), all.inputs.begin() + first));
    }
  }
  require_error([&] { whole.start_epoch(0, 7); }, {"first batch 7", "6 batches"});
  require_error([&] { whole.start_epoch(0, -1); }, {"first batch -1"});
  require_error([&] { whole.next(); }, {"start_epoch"});  // the failed start left no epoch running
}

TEST_CASE("DataLoader keeps a last partial batch", "[data]") {
  DataLoader loader(counting(10), {.batch_size = 4, .num_workers = 2});
  CHECK(loader.num_batches() == 3);
  CHECK(loader.num_examples() == 10);
  Seen s = run_epoch(loader, 0);
  CHECK(s.indices == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
}

TEST_CASE("DataLoader drop_last drops the partial batch", "[data]") {
  DataLoader loader(counting(10), {.batch_size = 4, .drop_last = true, .num_workers = 3});
  CHECK(loader.num_batches() == 2);
  CHECK(loader.num_examples() == 10);
  Seen s = run_epoch(loader, 0);
  CHECK(s.indices == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
  auto first = DataLoader(counting(3), {.batch_size = 4, .drop_last = true}).num_batches();
  CHECK(first == 0);
}

TEST_CASE("DataLoader follows a given sampler", "[data]") {
  auto sampler = std::make_shared<mg::data::DistributedSampler>(10, 3, 1, false);
  DataLoader loader(counting(10), {.batch_size = 3, .num_workers = 1}, sampler);
  CHECK(loader.num_examples() == 4);
  CHECK(run_epoch(loader, 0).indices == std::vector<std::vector<int64_t>>{{1, 4, 7}, {0}});
}

TEST_CASE("DataLoader pin_memory assembles batches in pinned memory", "[data]") {
  auto ds = counting(9);
  DataLoader pinned(ds, {.batch_size = 4, .num_workers = 2, .pin_memory = true});
  DataLoader plain(ds, {.batch_size = 4});
  pinned.start_epoch(0);
  auto b = pinned.next();
  REQUIRE(b);
  CHECK(b->inputs.storage()->pinned());
  CHECK(b->targets.storage()->pinned());
  CHECK(b->inputs.device() == mg::Device("cpu:0"));
  CHECK(run_epoch(pinned, 0) == run_epoch(plain, 0));
}

TEST_CASE("DataLoader delivers batches to device cpu:1", "[data]") {
  mg::test::CpuDevicesGuard guard(2);
  DataLoader loader(counting(7), {.batch_size = 3, .num_workers = 2, .pin_memory = true, .device = "cpu:1"});
  DataLoader host(counting(7), {.batch_size = 3});
  loader.start_epoch(0);
  auto b = loader.next();
  REQUIRE(b);
  CHECK(b->inputs.device() == mg::Device("cpu:1"));
  CHECK(b->targets.device() == mg::Device("cpu:1"));
  CHECK(run_epoch(loader, 0) == run_epoch(host, 0));
  require_error([] { DataLoader(counting(3), {.device = "cpu:5"}); }, {"cpu:5"});
}

TEST_CASE("DataLoader rethrows a dataset error through next", "[data]") {
  for (int workers : {0, 1, 3}) {
    INFO("workers " << workers);
    DataLoader loader(std::make_shared<Failing>(20, 9), {.batch_size = 2, .num_workers = workers});
    loader.start_epoch(0);
    for (int k = 0; k < 4; ++k) REQUIRE(loader.next());  // batches 0-3 hold 0..7
    require_error([&] { loader.next(); }, {"Failing: example 9 is unreadable"});
    require_error([&] { loader.next(); }, {"example 9"});  // until the next epoch
    loader.start_epoch(1);
    REQUIRE(loader.next());
  }
}

TEST_CASE("DataLoader stops busy workers on destruction and restart", "[data]") {
  auto ds = std::make_shared<Slow>(200);
  auto t0 = std::chrono::steady_clock::now();
  {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = 3, .prefetch = 2});
    loader.start_epoch(0);
    REQUIRE(loader.next());
    loader.start_epoch(1);  // restarts mid-epoch
    auto b = loader.next();
    REQUIRE(b);
    CHECK(b->indices == std::vector<int64_t>{0, 1});
  }  // workers are mid-epoch here, some blocked on full queues
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds < 1.0);  // a full epoch would take 200 x 2 ms / 3 workers and more
}

TEST_CASE("DataLoader applies normalize and flip the same for any worker count", "[data]") {
  auto ds = counting(15);
  DataLoaderOptions options{.batch_size = 4, .shuffle = true, .seed = 2};
  options.normalize = mg::data::Normalize{1.0, 2.0};
  options.flip = mg::data::RandomHorizontalFlip{0.5, 8};
  DataLoader serial(ds, options);
  options.num_workers = 3;
  DataLoader threaded(ds, options);
  Seen a = run_epoch(serial, 3), b = run_epoch(threaded, 3);
  CHECK(a == b);
  // Example i, row 0, is (i - 1) / 2 and (i - 0.75) / 2, in that order unless flipped.
  bool any_flipped = false, any_kept = false;
  for (size_t k = 0; k < a.indices.size(); ++k)
    for (size_t j = 0; j < a.indices[k].size(); ++j) {
      float i = float(a.indices[k][j]), first = a.inputs[k][j * 4], second = a.inputs[k][j * 4 + 1];
      bool kept = first == (i - 1.0f) / 2.0f && second == (i - 0.75f) / 2.0f;
      bool flipped = first == (i - 0.75f) / 2.0f && second == (i - 1.0f) / 2.0f;
      CHECK((kept || flipped));
      any_flipped |= flipped;
      any_kept |= kept;
    }
  CHECK(any_flipped);
  CHECK(any_kept);
}

TEST_CASE("DataLoader rejects bad options and next before start_epoch", "[data]") {
  auto ds = counting(4);
  require_error([&] { DataLoader(ds, {.batch_size = 0}); }, {"batch_size", "0"});
  require_error([&] { DataLoader(ds, {.num_workers = -1}); }, {"num_workers", "-1"});
  require_error([&] { DataLoader(ds, {.prefetch = 0}); }, {"prefetch", "0"});
  require_error([] { DataLoader(nullptr, {}); }, {"dataset"});
  DataLoader loader(ds, {});
  require_error([&] { loader.next(); }, {"start_epoch"});
}
