// tests/parallel/data/test_ddp.cpp — DistributedDataParallel (parallel/data/ddp.cpp) on the local backend:
// equivalence with one device accumulating the same micro-batches (bit-identical in
// deterministic mode, close without it), buckets, overlap with backward, no_sync, and the
// errors (different models, unused parameters, wrong device).
//
// Rank threads only record; the test thread checks after run_ranks returns (Catch2 assertions
// are not thread-safe).
#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include "core/cpu_devices_guard.h"
#include "multigrad/kernels/kernels.h"
#include "parallel/parallel_test_util.h"

using mg::Device;
using mg::Tensor;
using mg::parallel::Communicator;
using mg::parallel::DistributedDataParallel;
using mg::parallel::ReduceOp;
using mg::parallel::run_ranks;
using namespace mg::test;

namespace {

std::shared_ptr<mg::nn::Module> train_one_device(ModelKind kind, int parts, const std::vector<Batch>& batches) {
  auto model = make_model(kind, 1);
  train_reference(*model, batches, parts);
  return model;
}

}  // namespace

TEST_CASE("ddp deterministic: 2 and 4 ranks equal --grad-accum bit for bit, mlp and cnn with batch norm",
          "[parallel][ddp]") {
  CpuDevicesGuard guard(4);
  DeterministicScope deterministic(true);
  for (ModelKind kind : {ModelKind::Mlp, ModelKind::CnnWithBatchNorm}) {
    // 10 examples: 4 ranks get 3, 3, 2, 2 — an uneven split is exact too with reduce_op Sum.
    const auto batches = make_batches(kind, 4, 10);
    for (int ranks : {2, 4}) {
      INFO(model_name(kind) << ", " << ranks << " ranks");
      const auto reference = parameter_bytes(*train_one_device(kind, ranks, batches));
      // Ranks 1, 2, ... start from seeds 101, 201, ...: DDP's broadcast must make them equal.
      const auto models = train_ddp(run_ranks, cpu_devices(ranks), kind, batches, 100);
      for (int r = 0; r < ranks; ++r) {
        INFO("rank " << r);
        REQUIRE(parameter_bytes(*models[size_t(r)]) == reference);
      }
    }
  }
}

namespace {

// Two ranks train the mlp with DDP's averaging, each on its half of every batch of 8; with
// `optimizer_first`, in PyTorch's usual order: the optimizer over the model's parameters, then
// model.to(the rank's device), then DDP.
std::vector<std::shared_ptr<mg::nn::Module>> train_ddp_avg(const std::vector<Batch>& batches, bool optimizer_first) {
  // Rank r's loss is the mean over its half, not scaled: Avg makes it the mean over the batch.
  std::vector<std::shared_ptr<mg::nn::Module>> models{make_model(ModelKind::Mlp, 1), make_model(ModelKind::Mlp, 2)};
  run_ranks(cpu_devices(2), [&](Communicator& comm) {
    const auto model = models[size_t(comm.rank())];
    std::optional<mg::optim::SGD> sgd;
    if (optimizer_first) sgd.emplace(model->parameters(), mg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    model->to(comm.device());
    DistributedDataParallel ddp(model, comm);
    if (!optimizer_first) sgd.emplace(ddp.parameters(), mg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    for (const Batch& b : batches) {
      sgd->zero_grad();
      const auto chunk = mg::parallel::split_batch(8, 2)[size_t(comm.rank())];
      const Tensor x = b.inputs.slice(0, chunk.begin, chunk.end).to(comm.device());
      const Tensor y = b.targets.slice(0, chunk.begin, chunk.end).to(comm.device());
      mg::cross_entropy(ddp.forward(x), y).backward();
      sgd->step();
    }
  });
  return models;
}

}  // namespace

TEST_CASE("ddp averaging (PyTorch's default) on an even split equals --grad-accum bit for bit", "[parallel][ddp]") {
  // Avg divides the sum by 2, and the one-device run scales each half's loss by 1/2: both exact.
  CpuDevicesGuard guard(2);
  DeterministicScope deterministic(true);
  const auto batches = make_batches(ModelKind::Mlp, 3, 8);
  const auto reference = parameter_bytes(*train_one_device(ModelKind::Mlp, 2, batches));
  const auto models = train_ddp_avg(batches, /*optimizer_first=*/false);
  REQUIRE(parameter_bytes(*models[0]) == reference);
  REQUIRE(parameter_bytes(*models[1]) == reference);
}

TEST_CASE("ddp trains every rank when the optimizer was made before the model moved to its device",
          "[parallel][ddp]") {
  CpuDevicesGuard guard(2);
  DeterministicScope deterministic(true);
  const auto batches = make_batches(ModelKind::Mlp, 3, 8);
  const auto reference = parameter_bytes(*train_one_device(ModelKind::Mlp, 2, batches));
  const auto models = train_ddp_avg(batches, /*optimizer_first=*/true);
  REQUIRE(parameter_bytes(*models[0]) == reference);
  REQUIRE(parameter_bytes(*models[1]) == reference);
}

TEST_CASE("ddp with the ring all-reduce agrees with one device within 1e-5", "[parallel][ddp]") {
  CpuDevicesGuard guard(3);
  const auto batches = make_batches(ModelKind::CnnWithBatchNorm, 3, 9);
  const auto reference = parameter_values(*train_one_device(ModelKind::CnnWithBatchNorm, 3, batches));
  const auto models = train_ddp(run_ranks, cpu_devices(3), ModelKind::CnnWithBatchNorm, batches, 100);
  for (const auto& model : models) {
    const auto got = parameter_values(*model);
    for (size_t p = 0; p < got.size(); ++p) require_close(got[p], reference[p], 1e-5, 1e-6);
  }
}

TEST_CASE("ddp buckets hold the parameters in reverse order, the first one capped smaller", "[parallel][ddp]") {
  CpuDevicesGuard guard(2);
  // mlp 12-16-8-3: 0.weight 768 B, 0.bias 64 B, 2.weight 512 B, 2.bias 32 B, 4.weight 96 B, 4.bias 12 B.
  std::vector<std::vector<std::vector<std::string>>> names(2);
  run_ranks(cpu_devices(2), [&](Communicator& comm) {
    auto model = make_model(ModelKind::Mlp, 1);
    model->to(comm.device());
    DistributedDataParallel ddp(model, comm, {.bucket_cap_mb = 700.0 / 1024 / 1024, .first_bucket_mb = 120.0 / 1024 / 1024});
    names[size_t(comm.rank())] = ddp.bucket_names();
  });
  const std::vector<std::vector<std::string>> want{
      {"4.bias", "4.weight"}, {"2.bias", "2.weight", "0.bias"}, {"0.weight"}};
  REQUIRE(names[0] == want);
  REQUIRE(names[1] == want);
}

TEST_CASE("ddp gradients are written into aligned bucket slots and equal a plain backward's", "[parallel][ddp]") {
  CpuDevicesGuard guard(1);
  const Batch batch = make_batches(ModelKind::Mlp, 1, 6)[0];
  auto plain = make_model(ModelKind::Mlp, 1);
  mg::cross_entropy(plain->forward(batch.inputs), batch.targets).backward();
  auto model = make_model(ModelKind::Mlp, 1);
  run_ranks(cpu_devices(1), [&](Communicator& comm) {
    DistributedDataParallel ddp(model, comm, {.bucket_cap_mb = 700.0 / 1024 / 1024, .first_bucket_mb = 120.0 / 1024 / 1024});
    for (int step = 0; step < 2; ++step) {  // the second backward adds into the buckets
      mg::cross_entropy(ddp.forward(batch.inputs), batch.targets).backward();
    }
    const auto want = plain->named_parameters();
    const auto got = model->named_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      INFO(got[i].first);
      const Tensor g = got[i].second.grad();
      CHECK(reinterpret_cast<uintptr_t>(g.data_ptr()) % 64 == 0);
      require_close(g, values(mul(want[i].second.grad(), 2.0)), 1e-6, 1e-7);
    }
    // Buckets {4.*}, {2.*, 0.bias}, {0.weight} (the bucket test above): slots of one memory.
    CHECK(model->named_parameters()[4].second.grad().storage() == model->named_parameters()[5].second.grad().storage());
    CHECK(model->named_parameters()[1].second.grad().storage() == model->named_parameters()[2].second.grad().storage());
  });
  // Without the DDP wrapper the parameters' first gradients are their own again.
  for (const Tensor& p : model->parameters()) p.set_grad(Tensor());
  mg::cross_entropy(model->forward(batch.inputs), batch.targets).backward();
  CHECK(model->named_parameters()[4].second.grad().storage() != model->named_parameters()[5].second.grad().storage());
}

TEST_CASE("ddp starts a bucket's all-reduce while backward still computes earlier layers", "[parallel][ddp]") {
  CpuDevicesGuard guard(2);
  std::vector<std::vector<std::string>> logs(2);
  std::vector<mg::parallel::DDPStats> stats(2);
  run_ranks(cpu_devices(2), [&](Communicator& inner) {
    auto& log = logs[size_t(inner.rank())];
    // Logs each operation as it is called, so the test sees when DDP started its all-reduces.
    mg::parallel::CountingCommunicator comm(inner, [&](const std::string& op) { log.push_back(op); });
    auto model = make_model(ModelKind::Mlp, 1);
    model->to(comm.device());
    // Buckets {4.*}, {2.*}, {0.bias}, {0.weight} (sizes as in the bucket test above).
    DistributedDataParallel ddp(model, comm, {.bucket_cap_mb = 560.0 / 1024 / 1024, .first_bucket_mb = 120.0 / 1024 / 1024});
    // Registered after DDP's hooks, so each runs after DDP has taken the gradient.
    for (const auto& [name, p] : model->named_parameters()) {
      mg::on_grad_ready(p, [&log, name = name](const Tensor&) { log.push_back("ready " + name); });
    }
    const auto batches = make_batches(ModelKind::Mlp, 2, 4);
    for (const Batch& b : batches) {
      log.push_back("step");
      mg::cross_entropy(ddp.forward(b.inputs.to(comm.device())), b.targets.to(comm.device())).backward();
    }
    stats[size_t(inner.rank())] = ddp.stats();
  });
  for (int r = 0; r < 2; ++r) {
    const auto& log = logs[size_t(r)];
    INFO("rank " << r);
    // Per step: four all-reduces, the first (the last layer's bucket) started before the first
    // layer's gradients were computed, the last ones right after (the first layer's weight and
    // bias come from one linear node, in either order).
    std::vector<size_t> steps;
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i] == "step") steps.push_back(i);
    }
    REQUIRE(steps.size() == 2);
    steps.push_back(log.size());
    for (size_t s = 0; s < 2; ++s) {
      const std::vector<std::string> one(log.begin() + ptrdiff_t(steps[s]), log.begin() + ptrdiff_t(steps[s + 1]));
      INFO("step " << s);
      const auto first_reduce = std::find(one.begin(), one.end(), "all_reduce");
      const auto first_layer_ready = std::find(one.begin(), one.end(), "ready 0.weight");
      CHECK(std::count(one.begin(), one.end(), "all_reduce") == 4);
      CHECK(first_reduce < std::find(one.begin(), one.end(), "ready 0.bias"));
      CHECK(first_reduce < first_layer_ready);
      CHECK((one.back() == "ready 0.weight" || one.back() == "ready 0.bias"));
    }
    CHECK(stats[size_t(r)].steps == 2);
    CHECK(stats[size_t(r)].comm_ms > 0);
    CHECK(stats[size_t(r)].overlap() >= 0);
    CHECK(stats[size_t(r)].overlap() <= 1);
  }
}

TEST_CASE("ddp no_sync accumulates locally, the next backward all-reduces the sum", "[parallel][ddp]") {
  CpuDevicesGuard guard(2);
  DeterministicScope deterministic(true);
  // Each rank takes 2 of the 4 micro-batches: rank r micro-batches r and r + 2 (one device
  // accumulates 0, 1, 2, 3; here rank 0 holds 0 + 2 and rank 1 holds 1 + 3, so the sums differ
  // in order: compare within rounding).
  const auto batches = make_batches(ModelKind::Mlp, 3, 8);
  const auto reference = parameter_values(*train_one_device(ModelKind::Mlp, 4, batches));
  std::vector<std::shared_ptr<mg::nn::Module>> models{make_model(ModelKind::Mlp, 1), make_model(ModelKind::Mlp, 1)};
  std::vector<int64_t> steps(2);
  run_ranks(cpu_devices(2), [&](Communicator& comm) {
    const auto model = models[size_t(comm.rank())];
    model->to(comm.device());
    DistributedDataParallel ddp(model, comm, {.reduce_op = ReduceOp::Sum});
    mg::optim::SGD sgd = make_sgd(ddp);
    for (const Batch& b : batches) {
      sgd.zero_grad();
      const auto chunks = mg::parallel::split_batch(8, 4);
      for (int k : {comm.rank(), comm.rank() + 2}) {
        const auto& c = chunks[size_t(k)];
        const Tensor x = b.inputs.slice(0, c.begin, c.end).to(comm.device());
        const Tensor y = b.targets.slice(0, c.begin, c.end).to(comm.device());
        if (k < 2) {
          auto no_sync = ddp.no_sync();
          scaled_loss(ddp.forward(x), y, 8).backward();
        } else {
          scaled_loss(ddp.forward(x), y, 8).backward();
        }
      }
      sgd.step();
    }
    steps[size_t(comm.rank())] = ddp.stats().steps;
  });
  CHECK(steps == std::vector<int64_t>{3, 3});  // one all-reduced backward per step
  for (const auto& model : models) {
    const auto got = parameter_values(*model);
    for (size_t p = 0; p < got.size(); ++p) require_close(got[p], reference[p], 1e-5, 1e-6);
  }
}

TEST_CASE("ddp broadcasts rank 0's parameters and buffers at construction", "[parallel][ddp]") {
  CpuDevicesGuard guard(3);
  std::vector<std::shared_ptr<mg::nn::Module>> models;
  for (int r = 0; r < 3; ++r) models.push_back(make_model(ModelKind::CnnWithBatchNorm, 10 + uint64_t(r)));
  mg::kernels::fill(models[2]->named_buffers()[0].second, 5.0);  // rank 2's running_mean differs
  const auto want = parameter_bytes(*models[0]);
  const auto want_buffer = bytes_of(models[0]->named_buffers()[0].second);
  run_ranks(cpu_devices(3), [&](Communicator& comm) {
    models[size_t(comm.rank())]->to(comm.device());
    DistributedDataParallel ddp(models[size_t(comm.rank())], comm);
  });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(parameter_bytes(*models[size_t(r)]) == want);
    CHECK(bytes_of(models[size_t(r)]->named_buffers()[0].second) == want_buffer);
  }
}

TEST_CASE("ddp refuses ranks with different models, naming the first difference on every rank", "[parallel][ddp]") {
  CpuDevicesGuard guard(2);
  std::vector<std::string> errors(2);
  run_ranks(cpu_devices(2), [&](Communicator& comm) {
    auto model = comm.rank() == 0 ? mg::nn::mlp({12, 16, 3}) : mg::nn::mlp({12, 17, 3});
    model->to(comm.device());
    try {
      DistributedDataParallel ddp(model, comm);
    } catch (const mg::Error& e) {
      errors[size_t(comm.rank())] = e.what();
    }
  });
  for (const auto& e : errors) {
    INFO(e);
    CHECK(e.find("different models") != std::string::npos);
    CHECK(e.find("'0.weight' [16, 12] Float32 on rank 0 but '0.weight' [17, 12] Float32 on rank 1") !=
          std::string::npos);
  }
}

namespace {

// Uses only its first layer when `skip` is set: the second's parameters get no gradient.
class Skipping : public mg::nn::Cloneable<Skipping> {
 public:
  Skipping() {
    register_module("first", std::make_shared<mg::nn::Linear>(4, 3));
    register_module("second", std::make_shared<mg::nn::Linear>(3, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = child("first")->forward(x);
    return skip ? h : child("second")->forward(h);
  }
  std::string name() const override { return "Skipping"; }
  bool skip = true;
};

}  // namespace

TEST_CASE("ddp names an unused parameter, or reduces zeros for it with find_unused_parameters", "[parallel][ddp]") {
  CpuDevicesGuard guard(2);
  std::vector<std::string> errors(2);
  std::vector<std::vector<double>> unused_grads(2), used_grads(2);
  run_ranks(cpu_devices(2), [&](Communicator& comm) {
    mg::manual_seed(3);
    auto model = std::make_shared<Skipping>();
    model->to(comm.device());
    const Tensor x = mg::randn({2, 4}).to(comm.device());
    {
      DistributedDataParallel ddp(model, comm);
      try {
        ddp.forward(x);
      } catch (const mg::Error& e) {
        errors[size_t(comm.rank())] = e.what();
      }
    }
    DistributedDataParallel ddp(model, comm, {.find_unused_parameters = true});
    mg::sum(ddp.forward(x)).backward();
    const auto named = model->named_parameters();
    used_grads[size_t(comm.rank())] = values(named[0].second.grad());     // first.weight
    unused_grads[size_t(comm.rank())] = values(named[2].second.grad());   // second.weight
  });
  for (int r = 0; r < 2; ++r) {
    INFO(errors[size_t(r)]);
    CHECK(errors[size_t(r)].find("parameter 'second.weight' [3, 3] was not used") != std::string::npos);
    CHECK(errors[size_t(r)].find("find_unused_parameters") != std::string::npos);
    CHECK(unused_grads[size_t(r)] == std::vector<double>(9, 0.0));
    CHECK(!used_grads[size_t(r)].empty());
  }
}

TEST_CASE("ddp refuses a module that is not on the rank's device", "[parallel][ddp]") {
  CpuDevicesGuard guard(2);
  // Rank 1 throws; rank 0, waiting in the parameter check, fails with the group.
  require_error(
      [] {
        run_ranks(cpu_devices(2), [](Communicator& comm) {
          auto model = make_model(ModelKind::Mlp, 1);  // on cpu:0, also for rank 1
          DistributedDataParallel ddp(model, comm);
        });
      },
      {"parameter '0.weight' is on cpu:0 but rank 1 is on cpu:1"});
}

TEST_CASE("ddp: a rank that throws mid-training fails the others promptly, naming it", "[parallel][ddp]") {
  CpuDevicesGuard guard(3);
  const auto batches = make_batches(ModelKind::Mlp, 6, 6);
  std::vector<std::string> errors(3);
  const auto start = std::chrono::steady_clock::now();
  try {
    run_ranks(cpu_devices(3), [&](Communicator& comm) {
      auto model = make_model(ModelKind::Mlp, 1);
      model->to(comm.device());
      DistributedDataParallel ddp(model, comm);
      int step = 0;
      for (const Batch& b : batches) {
        if (comm.rank() == 1 && step++ == 3) throw std::runtime_error("rank 1 ran out of memory (on purpose)");
        try {
          mg::cross_entropy(ddp.forward(b.inputs.to(comm.device())), b.targets.to(comm.device())).backward();
        } catch (const mg::Error& e) {
          errors[size_t(comm.rank())] = e.what();
          throw;
        }
      }
    });
    FAIL("run_ranks did not throw");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "rank 1 ran out of memory (on purpose)");
  }
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 5.0);
  for (int r : {0, 2}) {
    INFO(errors[size_t(r)]);
    CHECK(errors[size_t(r)].find("all_reduce #") != std::string::npos);
    CHECK(errors[size_t(r)].find("rank 1 failed: rank 1 ran out of memory (on purpose)") != std::string::npos);
  }
}
