// tests/train/test_parallelize.cpp — the train layer as research code calls it, with no CLI:
// train::parallelize lays an MLP out over rank threads (local backend) and train::train_step
// trains it. DDP, ZeRO-3 and a pipeline (stage threads, or a rank per stage) end bit-identical
// to one device accumulating the same micro-batches, clipping included; a dp x tp mesh ends
// bit-identical to its tp group accumulating the dp ranks' micro-batches (tensor parallelism's
// split sums round differently from one device's: tests/parallel/tensor/test_tensor_parallel.cpp bounds
// that). And the plans that do not compose are clear errors.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu_devices_guard.h"
#include "multigrad/train/parallelize.h"
#include "multigrad/train/step.h"
#include "parallel/parallel_test_util.h"

namespace {

using namespace mg;
using namespace mg::test;
using Bytes = std::vector<std::vector<unsigned char>>;

constexpr int64_t kBatch = 12;  // every rank count and micro-batch count here divides it or not: both occur
constexpr int kSteps = 3;

std::unique_ptr<optim::Optimizer> sgd_of(std::vector<optim::ParamGroup> groups) {
  return std::make_unique<optim::SGD>(std::move(groups), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}
std::vector<optim::ParamGroup> one_group(std::vector<Tensor> params) { return {{.params = std::move(params)}}; }

// Trains `m` on the batches, a train_step each, and returns the one-device model's parameters
// (tensor parallelism's gathered, ZeRO-3's and a pipeline's gathered first: collective).
Bytes train_parallel_model(train::ParallelModel& m, const train::Plan& plan, const std::vector<Batch>& batches,
                           const train::StepOptions& options, const Device& device) {
  const auto optimizer = train::make_optimizer(m, plan, one_group, sgd_of);
  train::Metrics metrics;
  int64_t step = 0;
  for (const Batch& b : batches)
    train::train_step(m, *optimizer, {b.inputs.to(device), b.targets.to(device), {}}, options, metrics, ++step);
  m.gather_parameters();
  m.model_state();  // tp: gathers the shards into the one-device model
  return parameter_bytes(m.one_device_model());
}

// The MLP (seed 1) trained in this process on `devices` (one, DataParallel's, or stage threads).
Bytes train_alone(const std::vector<Device>& devices, const train::Plan& plan, const train::StepOptions& options,
                  const std::vector<Batch>& batches) {
  const auto m = train::parallelize({make_model(ModelKind::Mlp, 1)}, devices, {}, plan);
  return train_parallel_model(*m, plan, batches, options, devices.front());
}

// The MLP (seed 1 on every rank) trained by `n` rank threads laid out as the mesh `dims`; every
// rank's one-device model, by rank.
std::vector<Bytes> train_ranks(int n, const parallel::MeshDims& dims, const train::Plan& plan,
                               const train::StepOptions& options, const std::vector<Batch>& batches) {
  std::vector<std::shared_ptr<nn::Module>> nets;  // built here: the global RNG is not for threads
  for (int r = 0; r < n; ++r) nets.push_back(make_model(ModelKind::Mlp, 1));
  std::vector<Bytes> got(size_t(n), Bytes{});
  parallel::run_ranks(cpu_devices(n), [&](parallel::Communicator& comm) {
    const parallel::DeviceMesh mesh(comm, dims);
    const auto m = train::parallelize({nets[size_t(comm.rank())]}, {comm.device()}, train::mesh_groups(mesh, comm), plan);
    got[size_t(comm.rank())] = train_parallel_model(*m, plan, batches, options, comm.device());
  });
  return got;
}

}  // namespace

TEST_CASE("train: DDP, ZeRO-3 and pipelines through parallelize and train_step equal one device's grad-accum",
          "[train][parallel]") {
  CpuDevicesGuard guard(4);
  DeterministicScope deterministic(true);
  const auto batches = make_batches(ModelKind::Mlp, kSteps, kBatch);
  // The reference: one device, each batch as 2 micro-batches accumulated in order, by hand.
  const auto reference = make_model(ModelKind::Mlp, 1);
  const Bytes initial = parameter_bytes(*reference);
  train_reference(*reference, batches, 2);
  const Bytes want = parameter_bytes(*reference);
  REQUIRE(want != initial);
  CHECK(train_alone({Device("cpu:0")}, {}, {.grad_accum = 2}, batches) == want);

  SECTION("DDP over 2 ranks") {
    for (const Bytes& rank : train_ranks(2, {{"dp", 2}}, {.data = "ddp"}, {}, batches)) CHECK(rank == want);
  }
  SECTION("ZeRO-3 over 2 ranks") {
    for (const Bytes& rank : train_ranks(2, {{"dp", 2}}, {.data = "zero3"}, {}, batches)) CHECK(rank == want);
  }
  SECTION("DataParallel over 2 devices") {
    CHECK(train_alone({Device("cpu:0"), Device("cpu:1")}, {.data = "dp"}, {}, batches) == want);
  }
  SECTION("a pipeline of 2 stages: stage threads, and a rank per stage") {
    const train::Plan plan{.pipeline = true, .pipeline_options = {.schedule = "1f1b", .micro_batches = 2}};
    CHECK(train_alone({Device("cpu:0"), Device("cpu:1")}, plan, {}, batches) == want);
    for (const Bytes& rank : train_ranks(2, {{"pp", 2}}, plan, {}, batches)) CHECK(rank == want);
  }
}

TEST_CASE("train: clipping through train_step clips every layout by the same bits as one device", "[train][parallel]") {
  CpuDevicesGuard guard(4);
  DeterministicScope deterministic(true);
  const auto batches = make_batches(ModelKind::Mlp, kSteps, kBatch);
  const train::StepOptions clipped{.clip_grad_norm = 0.05};  // well below the MLP's gradient norms here
  const Bytes want = train_alone({Device("cpu:0")}, {}, {.grad_accum = 2, .clip_grad_norm = 0.05}, batches);
  CHECK(want != train_alone({Device("cpu:0")}, {}, {.grad_accum = 2}, batches));  // it did clip
  for (const Bytes& rank : train_ranks(2, {{"dp", 2}}, {.data = "ddp"}, clipped, batches)) CHECK(rank == want);
  for (const Bytes& rank : train_ranks(2, {{"dp", 2}}, {.data = "zero3"}, clipped, batches)) CHECK(rank == want);
  const train::Plan pipeline{.pipeline = true, .pipeline_options = {.micro_batches = 2}};
  for (const Bytes& rank : train_ranks(2, {{"pp", 2}}, pipeline, clipped, batches)) CHECK(rank == want);
}

TEST_CASE("train: a dp x tp mesh through parallelize equals its tp group accumulating the dp micro-batches",
          "[train][parallel][tp]") {
  CpuDevicesGuard guard(4);
  DeterministicScope deterministic(true);
  const auto batches = make_batches(ModelKind::Mlp, kSteps, kBatch);
  for (const double clip : {0.0, 0.05}) {
    INFO("clip_grad_norm " << clip);
    const std::vector<Bytes> tp = train_ranks(2, {{"tp", 2}}, {}, {.grad_accum = 2, .clip_grad_norm = clip}, batches);
    CHECK(tp[0] == tp[1]);  // both ranks gathered the same one-device model
    for (const char* data : {"ddp", "zero3"}) {
      INFO("dp " << data);
      const std::vector<Bytes> mesh =
          train_ranks(4, {{"dp", 2}, {"tp", 2}}, {.data = data}, {.clip_grad_norm = clip}, batches);
      for (const Bytes& rank : mesh) CHECK(rank == tp[0]);
    }
  }
}

TEST_CASE("train: Metrics sums the pieces on the device as the host's doubles would, and reads them on request",
          "[train]") {
  // Losses whose sum rounds differently in another order: the device adds in the pieces' order.
  const std::vector<float> losses = {0.1f, 1e7f, 3.3f, -1e7f, 0.7f};
  const std::vector<int64_t> rows = {3, 1, 4, 1, 5};
  train::Metrics metrics;
  double want = 0;
  int64_t correct = 0, predictions = 0, samples = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    const Tensor loss = full({}, losses[i]);
    const Tensor targets = arange(rows[i], {.dtype = DType::Int64});
    // all right, or right only where the target is 0
    const Tensor predicted = i % 2 ? targets : full({rows[i]}, 0.0, {.dtype = DType::Int64});
    metrics.add(predicted, targets, loss);
    want += double(losses[i]) * double(rows[i]);
    correct += i % 2 ? rows[i] : 1, predictions += rows[i], samples += rows[i];
  }
  metrics.add(train::Totals{.loss_sum = 2.5, .correct = 1, .predictions = 2, .samples = 2});  // a pipeline's
  const train::Totals totals = metrics.totals();
  CHECK(totals.loss_sum == want + 2.5);
  CHECK(totals.correct == correct + 1);
  CHECK(totals.predictions == predictions + 2);
  CHECK(totals.samples == samples + 2);
  CHECK(train::Metrics().totals().loss() == 0);
}

TEST_CASE("train: parallelize refuses plans that do not compose, naming them", "[train][parallel]") {
  CpuDevicesGuard guard(2);
  const auto net = make_model(ModelKind::Mlp, 1);
  const std::vector<Device> one{Device("cpu:0")};
  require_error([&] { train::parallelize({net}, one, {}, {.data = "zero4"}); },
                {"data 'zero4'", "none, dp, ddp, zero1, zero2, zero3"});
  require_error([&] { train::parallelize({net}, one, {}, {.data = "ddp"}); }, {"data 'ddp'", "groups.dp"});
  require_error([&] { train::parallelize({net}, {}, {}, {}); }, {"no devices"});
  const auto zero_pipeline = rank_errors(parallel::run_ranks, cpu_devices(2), [&](parallel::Communicator& comm) {
    train::parallelize({net}, {comm.device()}, {.world = &comm, .dp = &comm}, {.data = "zero2", .pipeline = true});
  });
  require_contains(zero_pipeline[0], {"zero2 does not compose with a pipeline"});
  const auto expert = rank_errors(parallel::run_ranks, cpu_devices(2), [&](parallel::Communicator& comm) {
    const parallel::DeviceMesh mesh(comm, {{"ep", 2}});
    train::mesh_groups(mesh, comm);
  });
  require_contains(expert[1], {"ep=2", "'ep'", "dp, tp and pp"});
}
