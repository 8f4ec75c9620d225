// tests/parallel/data/test_zero.cpp — ZeroOptimizer (parallel/data/zero.cpp), ZeRO stages 1, 2 and 3, on
// the local backend: bit-identical to one device accumulating the same micro-batches (SGD with
// momentum, Adam, AdamW with weight-decay groups; 2, 3 and 4 ranks, so chunks that cut parameters
// and pad; one unit and several), stage 2's reduce-scatters during backward and its no_sync, stage
// 3's parameters released between uses, the gathered state equal to the unsharded optimizer's and
// loadable onto another world size and stage, the memory account against DDP, and the errors.
//
// Rank threads only record; the test thread checks after run_ranks returns.
#include <map>
#include <mutex>
#include <optional>

#include "core/cpu_devices_guard.h"
#include "parallel/parallel_test_util.h"
#include "multigrad/parallel/data/grad_norm.h"
#include "multigrad/parallel/data/zero.h"

using mg::Tensor;
using mg::optim::OptimizerState;
using mg::optim::ParamGroup;
using mg::parallel::Communicator;
using mg::parallel::ReduceOp;
using mg::parallel::run_ranks;
using mg::parallel::ZeroOptimizer;
using namespace mg::test;

namespace {

// The shard optimizers under test; AdamW with nanoGPT's groups (decay on matrices only).
const std::map<std::string, ZeroSetup>& setups() {
  static const std::map<std::string, ZeroSetup> all = {
      {"sgd", {}},
      {"adam", {.make = [](std::vector<ParamGroup> g) -> std::unique_ptr<mg::optim::Optimizer> {
         return std::make_unique<mg::optim::Adam>(std::move(g), mg::optim::AdamOptions{.lr = 0.01});
       }}},
      {"adamw",
       {.groups = [](const mg::nn::Module& m) { return mg::optim::weight_decay_groups(m.parameters(), 0.1); },
        .make = [](std::vector<ParamGroup> g) -> std::unique_ptr<mg::optim::Optimizer> {
          return std::make_unique<mg::optim::AdamW>(std::move(g),
                                                    mg::optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
        }}}};
  return all;
}

// The unsharded optimizer of a setup, over `model`.
std::unique_ptr<mg::optim::Optimizer> plain_optimizer(const std::string& name, const mg::nn::Module& model) {
  const ZeroSetup& setup = setups().at(name);
  return setup.make(setup.groups(model));
}

// One step of `parts` micro-batches of b on `model`, the gradients left for the optimizer.
void accumulate(mg::nn::Module& model, const Batch& b, int64_t parts) {
  const int64_t n = b.inputs.size(0);
  for (const auto& chunk : mg::parallel::split_batch(n, parts)) {
    const Tensor x = b.inputs.slice(0, chunk.begin, chunk.end);
    const Tensor y = b.targets.slice(0, chunk.begin, chunk.end);
    scaled_loss(model.forward(x), y, n).backward();
  }
}

struct Reference {
  std::shared_ptr<mg::nn::Module> model;
  OptimizerState state;
};

// One device, the optimizer unsharded: every batch as `parts` micro-batches in order.
Reference train_one_device(ModelKind kind, const std::string& optimizer, int parts, const std::vector<Batch>& batches) {
  auto model = make_model(kind, 1);
  auto opt = plain_optimizer(optimizer, *model);
  for (const Batch& b : batches) {
    opt->zero_grad();
    accumulate(*model, b, parts);
    opt->step();
  }
  return {model, opt->state_dict()};
}

void require_same_state(const OptimizerState& got, const OptimizerState& want) {
  REQUIRE(got.options == want.options);
  REQUIRE(got.tensors.size() == want.tensors.size());
  for (const auto& [key, t] : want.tensors) {
    INFO("state " << key);
    REQUIRE(got.tensors.count(key) == 1);
    REQUIRE(got.tensors.at(key).shape() == t.shape());
    REQUIRE(got.tensors.at(key).dtype() == t.dtype());
    REQUIRE(bytes_of(got.tensors.at(key)) == bytes_of(t));
  }
}

}  // namespace

TEST_CASE("zero1, zero2 and zero3 deterministic: 2, 3 and 4 ranks equal --grad-accum bit for bit, the gathered state "
          "is the unsharded optimizer's", "[parallel][zero]") {
  CpuDevicesGuard guard(4);
  DeterministicScope deterministic(true);
  for (ModelKind kind : {ModelKind::Mlp, ModelKind::CnnWithBatchNorm}) {
    const auto batches = make_batches(kind, 3, 10);
    for (const auto& [name, plain_setup] : setups()) {
      // One unit, and units of about 200 bytes (a parameter or two each; stage 2 reduces them
      // during backward); stage 3's are the layers.
      for (int ranks : {2, 3, 4}) {
        const Reference reference = train_one_device(kind, name, ranks, batches);
        for (const auto& [stage, cap] : {std::pair{1, 25.0}, {1, 2e-4}, {2, 25.0}, {2, 2e-4}, {3, 25.0}}) {
          INFO(model_name(kind) << ", " << name << ", stage " << stage << ", units of " << cap << " MiB, " << ranks
                                << " ranks");
          ZeroSetup setup = plain_setup;
          setup.options.stage = stage, setup.options.bucket_cap_mb = cap;
          std::vector<OptimizerState> states(static_cast<size_t>(ranks));
          const auto models = train_zero(run_ranks, cpu_devices(ranks), kind, batches, setup, {},
                                         [&](ZeroOptimizer& zero, Communicator& comm) {
                                           states[size_t(comm.rank())] = zero.state_dict();
                                         });
          for (int r = 0; r < ranks; ++r) {
            INFO("rank " << r);
            REQUIRE(parameter_bytes(*models[size_t(r)]) == parameter_bytes(*reference.model));
            require_same_state(states[size_t(r)], reference.state);
          }
        }
      }
    }
  }
}

TEST_CASE("zero1 shards the optimizer: each rank updates a 1/size share of the elements", "[parallel][zero]") {
  CpuDevicesGuard guard(3);
  int64_t numel = 0;
  for (const Tensor& p : make_model(ModelKind::Mlp, 1)->parameters()) numel += p.numel();
  std::vector<int64_t> shards(3);
  train_zero(run_ranks, cpu_devices(3), ModelKind::Mlp, {}, setups().at("adam"), {},
             [&](ZeroOptimizer& zero, Communicator& comm) { shards[size_t(comm.rank())] = zero.shard_numel(); });
  for (int64_t s : shards) CHECK(s == (numel + 2) / 3);
}

TEST_CASE("zero state gathered on 2 ranks (stage 2) loads onto 3 (stage 1) and into a plain optimizer, and training goes on "
          "bit-identically", "[parallel][zero]") {
  CpuDevicesGuard guard(3);
  DeterministicScope deterministic(true);
  const auto first = make_batches(ModelKind::Mlp, 2, 12);
  const auto second = make_batches(ModelKind::Mlp, 2, 12, 8);
  for (const std::string name : {"sgd", "adamw"}) {
    INFO(name);
    OptimizerState saved;
    ZeroSetup stage2 = setups().at(name);  // saved by stage 2 in small units, loaded by stage 1 in one
    stage2.options.stage = 2, stage2.options.bucket_cap_mb = 2e-4;
    const auto two = train_zero(run_ranks, cpu_devices(2), ModelKind::Mlp, first, stage2, {},
                                [&](ZeroOptimizer& zero, Communicator& comm) {
                                  const OptimizerState state = zero.state_dict();
                                  if (comm.rank() == 0) saved = state;
                                });
    const auto three = train_zero(run_ranks, cpu_devices(3), ModelKind::Mlp, second, setups().at(name),
                                  [&](ZeroOptimizer& zero, mg::nn::Module& model) {
                                    model.load_state_dict(two[0]->state_dict());
                                    zero.load_state_dict(saved);
                                  });
    // The same continuation with the unsharded optimizer on one device, 3 micro-batches a step.
    auto model = make_model(ModelKind::Mlp, 5);
    model->load_state_dict(two[0]->state_dict());
    auto plain = plain_optimizer(name, *model);
    plain->load_state_dict(saved);
    for (const Batch& b : second) {
      plain->zero_grad();
      accumulate(*model, b, 3);
      plain->step();
    }
    for (const auto& m : three) REQUIRE(parameter_bytes(*m) == parameter_bytes(*model));
  }
}

TEST_CASE("zero1 errors: a parameter without a gradient, too few elements, another device", "[parallel][zero]") {
  CpuDevicesGuard guard(2);
  const auto errors = rank_errors(run_ranks, cpu_devices(2), [](Communicator& comm) {
    auto model = make_model(ModelKind::Mlp, 1);
    model->to(comm.device());
    ZeroOptimizer zero({{.params = model->parameters()}}, comm, setups().at("sgd").make);
    zero.step();  // no backward
  });
  for (int r = 0; r < 2; ++r)
    require_contains(errors[size_t(r)], {"ZeroOptimizer.step: parameter 5 (shape [3]) has no gradient on rank " +
                                         std::to_string(r)});
  const auto tiny = rank_errors(run_ranks, cpu_devices(2), [](Communicator& comm) {
    Tensor w = mg::zeros({1}, {.device = comm.device(), .requires_grad = true});
    ZeroOptimizer zero({{.params = {w}}}, comm, setups().at("sgd").make);
  });
  require_contains(tiny[0], {"ZeroOptimizer: 1 parameter elements cannot be shared among 2 ranks"});
  const auto elsewhere = rank_errors(run_ranks, cpu_devices(2), [](Communicator& comm) {
    Tensor w = mg::zeros({8}, {.device = mg::Device("cpu:0"), .requires_grad = true});
    if (comm.rank() == 1) ZeroOptimizer zero({{.params = {w}}}, comm, setups().at("sgd").make);
  });
  require_contains(elsewhere[1], {"ZeroOptimizer: parameter 0 is on cpu:0, the communicator's device is cpu:1"});
}

// The memory account of zero.h: against DDP with Adam, a rank holds 2 P B (1 - 1/N) less optimizer
// state and P B / N more (the shard's reduced gradient), the other buffers (parameters, gradients)
// taking the same bytes in both. Held against the allocator after a step, on 4 ranks (a saving of
// 1.25 P B) and 2 (0.5 P B), within the allocator's rounding of each tensor (512 bytes).
TEST_CASE("zero1 holds 2 P B (1 - 1/N) less Adam state than DDP and P B / N more buffers", "[parallel][zero]") {
  CpuDevicesGuard guard(4);
  mg::manual_seed(3);
  const auto make = [] { return mg::nn::mlp({784, 256, 128, 10}); };
  int64_t bytes = 0, tensors = 0;
  for (const Tensor& p : make()->parameters()) bytes += p.numel() * 4, ++tensors;
  const Batch batch = {mg::randn({8, 784}), mg::argmax(mg::randn({8, 10}), 1)};
  for (int ranks : {2, 4}) {
    INFO(ranks << " ranks");
    std::vector<int64_t> allocated(2);
    for (int zero = 0; zero < 2; ++zero) {
      std::vector<std::shared_ptr<mg::nn::Module>> models;
      for (int r = 0; r < ranks; ++r) models.push_back(make());
      run_ranks(cpu_devices(ranks), [&](Communicator& comm) {
        auto model = models[size_t(comm.rank())];
        model->to(comm.device());
        std::shared_ptr<mg::nn::Module> net = model;
        std::unique_ptr<mg::optim::Optimizer> opt;
        const auto adam = [](std::vector<ParamGroup> g) -> std::unique_ptr<mg::optim::Optimizer> {
          return std::make_unique<mg::optim::Adam>(std::move(g), mg::optim::AdamOptions{});
        };
        if (zero) {
          opt = std::make_unique<ZeroOptimizer>(std::vector<ParamGroup>{{.params = model->parameters()}}, comm, adam);
        } else {
          net = std::make_shared<mg::parallel::DistributedDataParallel>(model, comm);
          opt = adam({{.params = net->parameters()}});
        }
        for (int step = 0; step < 2; ++step) {
          opt->zero_grad();
          backward_rank_part(comm, batch, *net);
          opt->step();
        }
        if (comm.rank() == 1) allocated[size_t(zero)] = mg::memory_stats(comm.device()).allocated;
        comm.barrier()->wait();
      });
    }
    const int64_t shard_bytes = (bytes / 4 + ranks - 1) / ranks * 4;
    const int64_t saved = 2 * bytes - 2 * shard_bytes - shard_bytes;  // DDP's moments - ZeRO's - its reduced shard
    const int64_t slack = 512 * 4 * tensors;  // rounding of the parameters, gradients and moments
    CHECK(std::abs((allocated[0] - allocated[1]) - saved) <= slack);
  }
}

TEST_CASE("zero2 and zero3 under no_sync accumulate locally and reduce the sum: zero1's bits", "[parallel][zero]") {
  CpuDevicesGuard guard(2);
  DeterministicScope deterministic(true);
  const auto batches = make_batches(ModelKind::Mlp, 3, 12);
  std::vector<std::vector<std::vector<unsigned char>>> got;
  for (int stage : {1, 2, 3}) {
    std::vector<std::shared_ptr<mg::nn::Module>> models;
    for (int r = 0; r < 2; ++r) models.push_back(make_model(ModelKind::Mlp, 1));
    run_ranks(cpu_devices(2), [&](Communicator& comm) {
      const auto layers = std::dynamic_pointer_cast<mg::nn::Sequential>(models[size_t(comm.rank())]);
      layers->to(comm.device());
      ZeroOptimizer zero({{.params = layers->parameters()}}, comm, setups().at("adam").make,
                         {.stage = stage, .bucket_cap_mb = 2e-4, .reduce_op = ReduceOp::Sum},
                         stage == 3 ? layers : nullptr);
      mg::nn::Module& model = stage == 3 ? zero.model() : *layers;
      for (const Batch& b : batches) {
        zero.zero_grad();
        // This rank's half of the batch, as two micro-batches: the first only accumulates.
        const auto half = mg::parallel::split_batch(b.inputs.size(0), 2)[size_t(comm.rank())];
        const auto micro = mg::parallel::split_batch(half.size(), 2);
        for (size_t k = 0; k < micro.size(); ++k) {
          std::optional<ZeroOptimizer::NoSync> no_sync;
          if (k == 0) no_sync.emplace(zero);
          const int64_t begin = half.begin + micro[k].begin, end = half.begin + micro[k].end;
          scaled_loss(model.forward(b.inputs.slice(0, begin, end).to(comm.device())),
                      b.targets.slice(0, begin, end).to(comm.device()), b.inputs.size(0))
              .backward();
        }
        zero.step();
      }
      zero.gather_parameters();
    });
    got.push_back(parameter_bytes(*models[0]));
    CHECK(parameter_bytes(*models[1]) == got.back());
  }
  CHECK(got[0] == got[1]);
  CHECK(got[0] == got[2]);
}

// Stage 2 keeps the full gradients of a few units at a time, stage 3 a rank's shard of the
// parameters and one or two layers gathered (zero.h). On a model of eight equal layers (stages 1
// and 2: eight units; stage 3: nine, a layer each): stage 2's peak is well below stage 1's, which
// holds every gradient, and no parameter has a .grad after backward; after a step stage 3 holds
// P B (1 - 1/N) less than stage 2 (and the difference of their first units' gradient buffers,
// ready for the next backward), and at the step's peak at least P B / 4 less (2 ranks: half the
// parameters, less the two layers a rank may hold gathered at once, 2/9 of them).
TEST_CASE("zero2 frees each unit's gradients once reduced, zero3 the parameters too: lower peaks than zero1 and zero2",
          "[parallel][zero]") {
  CpuDevicesGuard guard(2);
  const auto make = [] {
    mg::manual_seed(3);
    return mg::nn::mlp({128, 128, 128, 128, 128, 128, 128, 128, 128, 10});
  };
  int64_t bytes = 0;
  for (const Tensor& p : make()->parameters()) bytes += p.numel() * 4;
  mg::manual_seed(4);
  const Batch batch = {mg::randn({16, 128}), mg::argmax(mg::randn({16, 10}), 1)};
  std::vector<int64_t> peak(3), allocated(3), first_unit(3);
  std::vector<size_t> units(3), with_grad(3);
  for (int stage : {1, 2, 3}) {
    const size_t s = size_t(stage - 1);
    std::vector<std::shared_ptr<mg::nn::Sequential>> models = {make(), make()};
    run_ranks(cpu_devices(2), [&](Communicator& comm) {
      const auto layers = models[size_t(comm.rank())];
      layers->to(comm.device());
      ZeroOptimizer zero({{.params = layers->parameters()}}, comm, setups().at("sgd").make,
                         {.stage = stage, .bucket_cap_mb = 0.07},  // a 128 x 128 layer each
                         stage == 3 ? layers : nullptr);
      for (int step = 0; step < 2; ++step) {
        if (comm.rank() == 1) mg::reset_peak_memory_stats(comm.device());
        zero.zero_grad();
        backward_rank_part(comm, batch, stage == 3 ? zero.model() : *layers);
        if (comm.rank() == 1) {
          with_grad[s] = 0;
          for (const Tensor& p : layers->parameters()) with_grad[s] += p.grad().defined();
        }
        zero.step();
      }
      if (comm.rank() == 1) {
        peak[s] = mg::memory_stats(comm.device()).peak;
        allocated[s] = mg::memory_stats(comm.device()).allocated;
        const auto unit_params = zero.unit_params();
        units[s] = unit_params.size();
        for (size_t k : unit_params[0]) first_unit[s] += layers->parameters()[k].numel() * 4;
      }
      comm.barrier()->wait();
    });
  }
  INFO("parameters " << bytes << " B; peak " << peak[0] << " / " << peak[1] << " / " << peak[2] << ", after the step "
                     << allocated[0] << " / " << allocated[1] << " / " << allocated[2] << "; first units "
                     << first_unit[1] << " / " << first_unit[2] << " B");
  CHECK(units[0] == 8);  // a square layer (weight and bias) each, the last one with the 10-wide layer
  CHECK(units[2] == 9);
  CHECK(with_grad[0] == 18);
  CHECK(with_grad[1] == 0);
  CHECK(with_grad[2] == 0);
  // Stage 1 holds every gradient throughout; stage 2 after the step only unit 0's buffer, ready for
  // the next backward, and during it at most the units in flight and the next one (3 of 8).
  CHECK(allocated[0] - allocated[1] >= bytes * 3 / 4);
  CHECK(peak[0] - peak[1] >= bytes / 3);
  // The allocator rounds each tensor up to 512 bytes (core/allocator.cpp): per stage at most 9
  // units' parameters, 9 reduced shards, a gradient buffer, and 18 parameters' momentum split at
  // most twice each (segments).
  const int64_t want = bytes / 2 + first_unit[1] - first_unit[2];
  CHECK(std::abs((allocated[1] - allocated[2]) - want) <= 512 * 2 * (9 + 9 + 1 + 36));
  CHECK(peak[1] - peak[2] >= bytes / 4);
}

TEST_CASE("zero2: a second backward before step() outside no_sync is an error naming the parameter",
          "[parallel][zero]") {
  CpuDevicesGuard guard(2);
  const Batch batch = make_batches(ModelKind::Mlp, 1, 8)[0];
  const auto errors = rank_errors(run_ranks, cpu_devices(2), [&](Communicator& comm) {
    auto model = make_model(ModelKind::Mlp, 1);
    model->to(comm.device());
    ZeroOptimizer zero({{.params = model->parameters()}}, comm, setups().at("sgd").make, {.stage = 2});
    backward_rank_part(comm, batch, *model);
    backward_rank_part(comm, batch, *model);
  });
  for (const std::string& e : errors)
    require_contains(e, {"ZeroOptimizer: parameter ", "got a second gradient before step(); accumulate under no_sync()"});
}

TEST_CASE("zero1, zero2 and zero3 clip by the global norm over the shards: bit-identical to one device clipping",
          "[parallel][zero][clip]") {
  CpuDevicesGuard guard(3);
  DeterministicScope deterministic(true);
  constexpr double kMaxNorm = 0.05;  // below every step's norm: each step clips
  const auto batches = make_batches(ModelKind::Mlp, 3, 10);
  for (int ranks : {2, 3}) {
    auto reference = make_model(ModelKind::Mlp, 1);
    auto plain = plain_optimizer("adam", *reference);
    std::vector<double> want_norms;
    for (const Batch& b : batches) {
      plain->zero_grad();
      accumulate(*reference, b, ranks);
      want_norms.push_back(mg::optim::clip_grad_norm(reference->parameters(), kMaxNorm));
      plain->step();
    }
    for (int stage : {1, 2, 3}) {
      INFO(ranks << " ranks, stage " << stage);
      std::vector<std::shared_ptr<mg::nn::Module>> models;
      for (int r = 0; r < ranks; ++r) models.push_back(make_model(ModelKind::Mlp, 1));
      std::vector<std::vector<double>> norms(static_cast<size_t>(ranks));
      run_ranks(cpu_devices(ranks), [&](Communicator& comm) {
        const auto layers = std::dynamic_pointer_cast<mg::nn::Sequential>(models[size_t(comm.rank())]);
        layers->to(comm.device());
        ZeroOptimizer zero({{.params = layers->parameters()}}, comm, setups().at("adam").make,
                           {.stage = stage, .bucket_cap_mb = 2e-4, .reduce_op = ReduceOp::Sum},
                           stage == 3 ? layers : nullptr);
        for (const Batch& b : batches) {
          zero.zero_grad();
          backward_rank_part(comm, b, stage == 3 ? zero.model() : *layers);
          norms[size_t(comm.rank())].push_back(zero.clip_grad_norm(kMaxNorm));
          zero.step();
        }
        zero.gather_parameters();
      });
      for (int r = 0; r < ranks; ++r) {
        CHECK(norms[size_t(r)] == want_norms);
        REQUIRE(parameter_bytes(*models[size_t(r)]) == parameter_bytes(*reference));
      }
      CHECK(want_norms[0] > kMaxNorm);
    }
  }
}

TEST_CASE("zero3 errors: no layers, a weight tied to a later layer, parameters outside the layers, the layers run "
          "directly",
          "[parallel][zero]") {
  CpuDevicesGuard guard(2);
  const Batch batch = make_batches(ModelKind::Mlp, 1, 8)[0];
  const auto errors = rank_errors(run_ranks, cpu_devices(2), [&](Communicator& comm) {
    auto model = make_model(ModelKind::Mlp, 1);
    model->to(comm.device());
    ZeroOptimizer zero({{.params = model->parameters()}}, comm, setups().at("sgd").make, {.stage = 3});
  });
  require_contains(errors[0], {"ZeroOptimizer: stage 3 needs the layers whose parameters it shards"});
  const auto tied = rank_errors(run_ranks, cpu_devices(2), [&](Communicator& comm) {
    auto linear = std::make_shared<mg::nn::Linear>(4, 4);
    auto layers = std::make_shared<mg::nn::Sequential>(std::initializer_list<std::shared_ptr<mg::nn::Module>>{
        std::make_shared<mg::nn::TiedLinear>(linear, "weight"), linear});
    layers->to(comm.device());
    ZeroOptimizer zero({{.params = layers->parameters()}}, comm, setups().at("sgd").make, {.stage = 3}, layers);
  });
  require_contains(tied[0], {"ZeroOptimizer: layer 0 (", ") uses a weight of no earlier layer"});
  const auto outside = rank_errors(run_ranks, cpu_devices(2), [&](Communicator& comm) {
    auto layers = std::dynamic_pointer_cast<mg::nn::Sequential>(make_model(ModelKind::Mlp, 1));
    layers->to(comm.device());
    Tensor extra = mg::zeros({4}, {.device = comm.device(), .requires_grad = true});
    std::vector<Tensor> params = layers->parameters();
    params.push_back(extra);
    ZeroOptimizer zero({{.params = params}}, comm, setups().at("sgd").make, {.stage = 3}, layers);
  });
  require_contains(outside[0], {"ZeroOptimizer: parameter 6 (shape [4]) is in no layer"});
  const auto direct = rank_errors(run_ranks, cpu_devices(2), [&](Communicator& comm) {
    auto layers = std::dynamic_pointer_cast<mg::nn::Sequential>(make_model(ModelKind::Mlp, 1));
    layers->to(comm.device());
    ZeroOptimizer zero({{.params = layers->parameters()}}, comm, setups().at("sgd").make, {.stage = 3}, layers);
    backward_rank_part(comm, batch, *layers);
  });
  for (const std::string& e : direct)
    require_contains(e, {"was released: ZeRO stage 3 keeps a unit's parameters only during its forward and backward"});
}

// A GPT's head uses the token embedding's weight (nn::TiedLinear): stage 3 keeps the embedding's
// unit gathered from its forward to its backward, and the tied gradient's two contributions add
// as on one device.
TEST_CASE("zero3 trains a GPT (head tied to the embedding) bit-identical to --grad-accum on 2 and 3 ranks",
          "[parallel][zero]") {
  CpuDevicesGuard guard(3);
  DeterministicScope deterministic(true);
  const auto batches = make_batches(ModelKind::Gpt, 2, 6);
  for (int ranks : {2, 3}) {
    INFO(ranks << " ranks");
    const Reference reference = train_one_device(ModelKind::Gpt, "adamw", ranks, batches);
    ZeroSetup setup = setups().at("adamw");
    setup.options.stage = 3;
    std::vector<OptimizerState> states(static_cast<size_t>(ranks));
    const auto models = train_zero(run_ranks, cpu_devices(ranks), ModelKind::Gpt, batches, setup, {},
                                   [&](ZeroOptimizer& zero, Communicator& comm) {
                                     states[size_t(comm.rank())] = zero.state_dict();
                                   });
    for (int r = 0; r < ranks; ++r) {
      INFO("rank " << r);
      REQUIRE(parameter_bytes(*models[size_t(r)]) == parameter_bytes(*reference.model));
      require_same_state(states[size_t(r)], reference.state);
    }
  }
}

TEST_CASE("zero1, zero2 and zero3 with fp16 loss scaling skip the steps one device skips and end bit-identical to it",
          "[parallel][zero][grad_scaler]") {
  CpuDevicesGuard guard(2);
  DeterministicScope deterministic(true);
  mg::AutocastGuard autocast(mg::Precision::Float16);
  const auto batches = make_batches(ModelKind::Mlp, 6, 10);
  // 2^22: the first gradients overflow float16, so steps are skipped before the scale settles.
  const mg::optim::GradScalerOptions scaling{.init_scale = 0x1p22};
  auto reference = make_model(ModelKind::Mlp, 1);
  mg::optim::SGD sgd = make_sgd(*reference);
  mg::optim::GradScaler one(scaling);
  for (const Batch& b : batches) {
    sgd.zero_grad();
    const int64_t n = b.inputs.size(0);
    for (const auto& c : mg::parallel::split_batch(n, 2))
      one.scale(scaled_loss(reference->forward(b.inputs.slice(0, c.begin, c.end)), b.targets.slice(0, c.begin, c.end), n))
          .backward();
    one.step(sgd);
    one.update();
  }
  REQUIRE(one.skipped_steps() > 0);
  REQUIRE(one.skipped_steps() < int64_t(batches.size()));
  for (int stage : {1, 2, 3}) {
    INFO("stage " << stage);
    ZeroSetup setup;
    setup.options.stage = stage;
    std::vector<int64_t> skipped(2);
    std::vector<std::shared_ptr<mg::nn::Module>> models;
    for (int r = 0; r < 2; ++r) models.push_back(make_model(ModelKind::Mlp, 1));
    run_ranks(cpu_devices(2), [&](Communicator& comm) {
      mg::AutocastGuard rank_autocast(mg::Precision::Float16);
      mg::nn::Module& model = *models[size_t(comm.rank())];
      model.to(comm.device());
      ZeroOptimizer zero(setup.groups(model), comm, setup.make, setup.options,
                         stage == 3 ? pipeline_layers(models[size_t(comm.rank())]) : nullptr);
      mg::optim::GradScaler scaler(scaling);
      const auto any_rank = [&](bool mine) { return mg::parallel::any_rank(comm, mine); };
      for (const Batch& b : batches) {
        zero.zero_grad();
        const int64_t n = b.inputs.size(0);
        const auto c = mg::parallel::split_batch(n, 2)[size_t(comm.rank())];
        mg::nn::Module& forward = stage == 3 ? zero.model() : model;
        scaler.scale(scaled_loss(forward.forward(b.inputs.slice(0, c.begin, c.end).to(comm.device())),
                                 b.targets.slice(0, c.begin, c.end).to(comm.device()), n))
            .backward();
        scaler.step(zero, any_rank);
        scaler.update();
      }
      zero.gather_parameters();
      skipped[size_t(comm.rank())] = scaler.skipped_steps();
    });
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r);
      CHECK(skipped[size_t(r)] == one.skipped_steps());
      REQUIRE(parameter_bytes(*models[size_t(r)]) == parameter_bytes(*reference));
    }
  }
}

// The overlap the stages promise, seen in the order of the collectives (rank 0's, through a
// CountingCommunicator's log): ZeRO-2 starts every unit's reduce-scatter while backward runs (as
// each unit's gradients are final), none after it; ZeRO-3 starts the next layer's all-gather before
// a layer's forward runs (a prefetch), so when layer k's forward ends k + 2 gathers have started.
TEST_CASE("zero2 reduce-scatters during backward, and zero3 prefetches the next layer's all-gather in forward",
          "[parallel][zero]") {
  CpuDevicesGuard guard(2);
  constexpr int kLayers = 4;
  mg::manual_seed(4);
  const Batch batch = {mg::randn({8, 128}), mg::argmax(mg::randn({8, 128}), 1)};
  for (int stage : {2, 3}) {
    INFO("stage " << stage);
    std::vector<std::string> log;
    run_ranks(cpu_devices(2), [&](Communicator& inner) {
      std::vector<std::string>* mine = inner.rank() == 0 ? &log : nullptr;
      mg::parallel::CountingCommunicator comm(inner, [mine](const std::string& op) {
        if (mine != nullptr) mine->push_back(op);
      });
      mg::manual_seed(3);
      auto layers = std::make_shared<mg::nn::Sequential>();
      for (int k = 0; k < kLayers; ++k) {
        layers->push_back(std::make_shared<mg::nn::Linear>(128, 128));
        layers->push_back(std::make_shared<ForwardProbe>([mine, k] {
          if (mine != nullptr) mine->push_back("forward " + std::to_string(k));
        }));
      }
      layers->to(comm.device());
      ZeroOptimizer zero({{.params = layers->parameters()}}, comm, setups().at("sgd").make,
                         {.stage = stage, .bucket_cap_mb = 0.07},  // a layer a unit
                         stage == 3 ? layers : nullptr);
      for (int step = 0; step < 2; ++step) {
        if (mine != nullptr) mine->clear();
        zero.zero_grad();
        backward_rank_part(comm, batch, stage == 3 ? zero.model() : *layers);
        if (mine != nullptr) mine->push_back("backward done");
        zero.step();
      }
    });
    const auto at = [&](const std::string& text) { return std::find(log.begin(), log.end(), text) - log.begin(); };
    const auto before = [&](ptrdiff_t end, const std::string& op) {
      return std::count(log.begin(), log.begin() + end, op);
    };
    REQUIRE(at("backward done") < ptrdiff_t(log.size()));
    if (stage == 2) {
      CHECK(before(at("backward done"), "reduce_scatter") == kLayers);
      CHECK(std::count(log.begin(), log.end(), "reduce_scatter") == kLayers);  // none left for step()
    } else {
      for (int k = 0; k < kLayers; ++k) {
        INFO("forward " << k);
        CHECK(before(at("forward " + std::to_string(k)), "all_gather") == std::min(k + 2, kLayers));
      }
    }
  }
}
