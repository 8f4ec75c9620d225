// tests/parallel/pipeline/test_pipeline.cpp — the pipeline runtime (parallel/pipeline/pipeline.cpp) on CPU devices:
// GPipe, 1F1B and interleaved 1F1B on 2, 3 and 4 stages train bit-identically to `--grad-accum m`
// on one device, also over rendezvous sends (NCCL's semantics: the exchanges of 1F1B's steady
// state), 1F1B holds fewer activations than GPipe, a step on part of a batch (a data-parallel
// replica's), the timeline, and the errors.
#include <chrono>
#include <map>
#include <stdexcept>

#include "core/cpu_devices_guard.h"
#include "parallel/parallel_test_util.h"

using mg::Device;
using mg::Tensor;
using mg::parallel::Pipeline;
using mg::parallel::PipelineOptions;
using namespace mg::test;

namespace {

std::shared_ptr<mg::nn::Sequential> sequential(ModelKind kind, uint64_t seed) {
  return std::dynamic_pointer_cast<mg::nn::Sequential>(make_model(kind, seed));
}

}  // namespace

TEST_CASE("pipeline gpipe and 1f1b on 2, 3 and 4 stages train bit-identically to --grad-accum m",
          "[parallel][pipeline]") {
  CpuDevicesGuard guard(4);
  DeterministicScope deterministic(true);
  constexpr int m = 4;
  for (ModelKind kind : {ModelKind::Mlp, ModelKind::CnnWithBatchNorm}) {
    const auto batches = make_batches(kind, 3, 10);  // 4 micro-batches of 3, 3, 2, 2
    auto reference = make_model(kind, 1);
    train_reference(*reference, batches, m);
    const auto want = parameter_bytes(*reference);
    for (const std::string schedule : {"gpipe", "1f1b"}) {
      for (int p : {2, 3, 4}) {
        INFO(model_name(kind) << ", " << schedule << ", " << p << " stages");
        auto model = sequential(kind, 1);
        Pipeline pipeline(model, cpu_devices(p), {.schedule = schedule, .micro_batches = m});
        mg::optim::SGD sgd = make_sgd(*model);
        for (const Batch& b : batches) {
          sgd.zero_grad();
          const auto r = pipeline.step(b.inputs, b.targets);
          CHECK(r.samples == 10);
          sgd.step();
        }
        REQUIRE(parameter_bytes(*model) == want);
        // Batch norm's running statistics too: every micro-batch passed in order, as on one device.
        const auto ref_state = reference->state_dict();
        for (const auto& [name, buffer] : model->named_buffers()) CHECK(bytes_of(buffer) == bytes_of(ref_state.at(name)));
      }
    }
  }
}

TEST_CASE("pipeline trains every stage when the optimizer was made before the stages were placed",
          "[parallel][pipeline]") {
  CpuDevicesGuard guard(2);
  DeterministicScope deterministic(true);
  constexpr int m = 4;
  const auto batches = make_batches(ModelKind::Mlp, 3, 10);
  auto reference = make_model(ModelKind::Mlp, 1);
  train_reference(*reference, batches, m);
  auto model = sequential(ModelKind::Mlp, 1);
  mg::optim::SGD sgd = make_sgd(*model);  // before the pipeline moves stage 1 to cpu:1
  Pipeline pipeline(model, cpu_devices(2), {.schedule = "1f1b", .micro_batches = m});
  for (const Batch& b : batches) {
    sgd.zero_grad();
    pipeline.step(b.inputs, b.targets);
    sgd.step();
  }
  REQUIRE(parameter_bytes(*model) == parameter_bytes(*reference));
}

// Each stage draws from a generator of its own that starts at the caller's state with a key of its
// own (stage 0 the caller's), in its schedule's order, and the caller's generator then continues
// past the most any stage drew: so dropout in a pipeline gives the same result on every run (a
// shared generator hands the stages' threads their numbers in the order they happen to ask), and
// the next step draws new masks.
TEST_CASE("pipeline stages draw from generators of their own, and the step moves the caller's past them",
          "[parallel][pipeline]") {
  CpuDevicesGuard guard(2);
  constexpr int m = 3;
  const auto batches = make_batches(ModelKind::Mlp, 2, 6);  // 3 micro-batches of 2 rows
  // seen[s]: the generator's state each time stage s's first layer runs (on stage s's thread only).
  std::vector<mg::PhiloxState> seen[2];
  const auto build = [&] {
    auto model = sequential(ModelKind::Mlp, 1);  // Linear(12, 16), ReLU, Linear(16, 8), ReLU, Linear(8, 3)
    auto with_dropout = std::make_shared<mg::nn::Sequential>();
    const auto probe = [&](int s) {
      return std::make_shared<ForwardProbe>([&seen, s] { seen[s].push_back(mg::get_rng_state()); });
    };
    with_dropout->push_back(probe(0));
    for (size_t i = 0; i < model->size(); ++i) {
      if (i == 3) with_dropout->push_back(probe(1));  // stage 1 begins here
      with_dropout->push_back(model->at(i));
      if (i == 1 || i == 3) with_dropout->push_back(std::make_shared<mg::nn::Dropout>(0.5));
    }
    return with_dropout;
  };
  std::vector<std::vector<unsigned char>> first_run;
  for (int run = 0; run < 3; ++run) {
    INFO("run " << run);
    const auto model = build();
    Pipeline pipeline(model, cpu_devices(2), {.schedule = "1f1b", .micro_batches = m, .cuts = {5}});
    mg::optim::SGD sgd = make_sgd(*model);
    mg::manual_seed(40);
    for (const Batch& b : batches) {
      const mg::PhiloxState before = mg::get_rng_state();
      seen[0].clear();
      seen[1].clear();
      sgd.zero_grad();
      pipeline.step(b.inputs, b.targets);
      sgd.step();
      // Stage 0 draws a (2, 16) mask per micro-batch (8 blocks), stage 1 a (2, 8) one (4 blocks).
      REQUIRE(seen[0].size() == size_t(m));
      REQUIRE(seen[1].size() == size_t(m));
      for (size_t k = 0; k < size_t(m); ++k) {
        CHECK(seen[0][k].seed == before.seed);
        CHECK(seen[0][k].offset == before.offset + 8 * k);
        CHECK(seen[1][k].seed != before.seed);
        CHECK(seen[1][k].offset == before.offset + 4 * k);
      }
      CHECK(mg::get_rng_state().seed == before.seed);
      CHECK(mg::get_rng_state().offset == before.offset + 8 * m);
    }
    if (run == 0) first_run = parameter_bytes(*model);
    CHECK(parameter_bytes(*model) == first_run);
  }
}

// batch_rows: a pipeline given part of a batch (a data-parallel replica's) counts each micro-batch
// as its share of the whole batch, so the replicas' gradients sum to the whole batch's: two
// pipelines of one micro-batch each, their gradients added in order, end where one pipeline of
// two micro-batches does, bit for bit.
TEST_CASE("pipeline step on part of a batch scales its losses by their share of the whole (batch_rows)",
          "[parallel][pipeline]") {
  CpuDevicesGuard guard(2);
  DeterministicScope deterministic(true);
  const Batch b = make_batches(ModelKind::Mlp, 3, 10)[0];
  auto whole = sequential(ModelKind::Mlp, 1);
  Pipeline together(whole, cpu_devices(2), {.micro_batches = 2});
  together.step(b.inputs, b.targets);
  auto halves = sequential(ModelKind::Mlp, 1);
  Pipeline apart(halves, cpu_devices(2), {.micro_batches = 1});
  std::vector<Tensor> sums;
  for (const auto& part : mg::parallel::split_batch(10, 2)) {  // rows 0..4 and 5..9, as --micro-batches 2 cuts
    for (const Tensor& p : halves->parameters()) p.set_grad(Tensor());
    apart.step(b.inputs.slice(0, part.begin, part.end), b.targets.slice(0, part.begin, part.end), 1.0, 10);
    const std::vector<Tensor> params = halves->parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      if (sums.size() == k) {
        sums.push_back(params[k].grad());
      } else {
        sums[k] = mg::add(sums[k], params[k].grad());
      }
    }
  }
  const std::vector<Tensor> want = whole->parameters();
  REQUIRE(sums.size() == want.size());
  for (size_t k = 0; k < want.size(); ++k) CHECK(bytes_of(sums[k]) == bytes_of(want[k].grad()));
  CHECK_THROWS_WITH(apart.step(b.inputs, b.targets, 1.0, 9),
                    Catch::Contains("pipeline: a batch of 10 rows cannot be part of one of 9"));
}

TEST_CASE("pipeline gpipe and 1f1b over rendezvous sends (as NCCL's) finish and equal --grad-accum m",
          "[parallel][pipeline]") {
  // Every send waits for its receive to be posted: a schedule whose stages would each wait in a
  // send for the other fails with the timeout instead of finishing.
  CpuDevicesGuard guard(4);
  DeterministicScope deterministic(true);
  const auto batches = make_batches(ModelKind::Mlp, 2, 10);
  for (int m : {1, 2, 3, 5}) {  // fewer micro-batches than stages, as many, more
    auto reference = make_model(ModelKind::Mlp, 1);
    train_reference(*reference, batches, m);
    const auto want = parameter_bytes(*reference);
    for (const std::string schedule : {"gpipe", "1f1b"}) {
      for (int p : {2, 3, 4}) {
        INFO(schedule << ", " << p << " stages, " << m << " micro-batches");
        const auto model = train_pipeline(ModelKind::Mlp, cpu_devices(p), batches,
                                          {.schedule = schedule,
                                           .micro_batches = m,
                                           .timeout = std::chrono::seconds(10),
                                           .run_ranks = run_ranks_rendezvous});
        REQUIRE(parameter_bytes(*model) == want);
      }
    }
  }
}

TEST_CASE("pipeline interleaved (v chunks per stage) on 2, 3 and 4 stages trains bit-identically to --grad-accum m",
          "[parallel][pipeline]") {
  CpuDevicesGuard guard(4);
  DeterministicScope deterministic(true);
  struct Case {
    ModelKind kind;
    int p, v, m;
  };
  // The deep MLP has 9 layers, the CNN 6 (conv, batch norm, ReLU, pool, flatten, linear): p v
  // pieces of at least one layer each; m a multiple of p, as many micro-batches as stages or more.
  const std::vector<Case> cases = {{ModelKind::DeepMlp, 2, 2, 2}, {ModelKind::DeepMlp, 2, 2, 4},
                                   {ModelKind::DeepMlp, 2, 3, 4}, {ModelKind::DeepMlp, 3, 2, 3},
                                   {ModelKind::DeepMlp, 4, 2, 4}, {ModelKind::DeepMlp, 4, 2, 8},
                                   {ModelKind::CnnWithBatchNorm, 2, 2, 4}, {ModelKind::CnnWithBatchNorm, 3, 2, 6}};
  for (const Case& c : cases) {
    INFO(model_name(c.kind) << ", " << c.p << " stages x " << c.v << " chunks, " << c.m << " micro-batches");
    const auto batches = make_batches(c.kind, 3, 2 * c.m + 1);  // micro-batches of 3 and 2 rows
    auto reference = make_model(c.kind, 1);
    train_reference(*reference, batches, c.m);
    auto model = sequential(c.kind, 1);
    Pipeline pipeline(model, cpu_devices(c.p), {.schedule = "interleaved", .micro_batches = c.m, .chunks = c.v});
    REQUIRE(pipeline.stage_modules().size() == size_t(c.p * c.v));
    for (size_t j = 0; j < pipeline.stage_modules().size(); ++j) {  // piece j on stage j mod p
      for (const Tensor& t : pipeline.stage_modules()[j]->parameters())
        CHECK(t.device() == cpu_devices(c.p)[j % size_t(c.p)]);
    }
    mg::optim::SGD sgd = make_sgd(*model);
    for (const Batch& b : batches) {
      sgd.zero_grad();
      CHECK(pipeline.step(b.inputs, b.targets).samples == 2 * c.m + 1);
      sgd.step();
    }
    REQUIRE(parameter_bytes(*model) == parameter_bytes(*reference));
    const auto ref_state = reference->state_dict();
    for (const auto& [name, buffer] : model->named_buffers()) CHECK(bytes_of(buffer) == bytes_of(ref_state.at(name)));
    CHECK(pipeline.formula_bubble() == Approx(double(c.p - 1) / double(c.v * c.m + c.p - 1)));
  }
}

TEST_CASE("pipeline interleaved over rendezvous sends (as NCCL's) finishes and equals --grad-accum m",
          "[parallel][pipeline]") {
  // With 2 stages the two send each other activations and gradients both ways, each pair's
  // messages in the order the other receives them (schedule.h, "Messages").
  CpuDevicesGuard guard(4);
  DeterministicScope deterministic(true);
  for (int p : {2, 3, 4}) {
    for (int m : {p, 2 * p}) {
      INFO(p << " stages x 2 chunks, " << m << " micro-batches");
      const auto batches = make_batches(ModelKind::DeepMlp, 2, 2 * m);
      auto reference = make_model(ModelKind::DeepMlp, 1);
      train_reference(*reference, batches, m);
      const auto model = train_pipeline(ModelKind::DeepMlp, cpu_devices(p), batches,
                                        {.schedule = "interleaved",
                                         .micro_batches = m,
                                         .chunks = 2,
                                         .timeout = std::chrono::seconds(10),
                                         .run_ranks = run_ranks_rendezvous});
      REQUIRE(parameter_bytes(*model) == parameter_bytes(*reference));
    }
  }
}

TEST_CASE("pipeline runs a send and the receive after it as one exchange where find_exchanges says",
          "[parallel][pipeline]") {
  CpuDevicesGuard guard(3);
  const Batch b = make_batches(ModelKind::Mlp, 1, 10)[0];
  auto exchanges_on = [&](const std::string& schedule) {
    Pipeline pipeline(sequential(ModelKind::Mlp, 1), cpu_devices(3),
                      {.schedule = schedule, .micro_batches = 4, .run_ranks = run_ranks_rendezvous});
    pipeline.step(b.inputs, b.targets);
    std::map<std::string, std::vector<std::string>> by_lane;
    for (const auto& e : pipeline.events()) {
      if (e.name.find(" + ") != std::string::npos) by_lane[e.lane].push_back(e.name);
    }
    return by_lane;
  };
  using Names = std::vector<std::string>;
  // GPipe, 3 stages: only the middle stage has a send followed by a receive from another stage
  // (a ring step). Stage 0's last send and first receive of a gradient both talk to stage 1,
  // whose counterparts are not adjacent: they run alone.
  const auto gpipe = exchanges_on("gpipe");
  CHECK(gpipe.size() == 1);
  CHECK(gpipe.at("stage 1 (cpu:1)") ==
        Names{"send activation 0 + recv activation 1", "send activation 1 + recv activation 2",
              "send activation 2 + recv activation 3", "send grad 0 + recv grad 1", "send grad 1 + recv grad 2",
              "send grad 2 + recv grad 3"});
  // 1F1B, 3 stages, 4 micro-batches: stage s warms up with 2 - s forwards, then alternates; in
  // the steady state each send pairs with the neighbour it receives from next.
  const auto one_f_one_b = exchanges_on("1f1b");
  CHECK(one_f_one_b.at("stage 0 (cpu:0)") ==
        Names{"send activation 2 + recv grad 0", "send activation 3 + recv grad 1"});
  CHECK(one_f_one_b.at("stage 1 (cpu:1)") ==
        Names{"send activation 0 + recv activation 1", "send activation 1 + recv grad 0",
              "send grad 0 + recv activation 2", "send activation 2 + recv grad 1", "send grad 1 + recv activation 3",
              "send activation 3 + recv grad 2", "send grad 2 + recv grad 3"});
  CHECK(one_f_one_b.at("stage 2 (cpu:2)") ==
        Names{"send grad 0 + recv activation 1", "send grad 1 + recv activation 2", "send grad 2 + recv activation 3"});
}

TEST_CASE("pipeline stages are cut where parameter counts come out most even", "[parallel][pipeline]") {
  CpuDevicesGuard guard(4);
  // mlp 12-16-8-3: layers Linear(208), ReLU, Linear(136), ReLU, Linear(27).
  auto model = sequential(ModelKind::Mlp, 1);
  CHECK(mg::parallel::balanced_cuts(*model, 2) == std::vector<size_t>{1});
  CHECK(mg::parallel::balanced_cuts(*model, 3) == std::vector<size_t>{1, 3});
  Pipeline pipeline(model, cpu_devices(3));
  using Range = std::pair<size_t, size_t>;
  CHECK(pipeline.stage_layers() == std::vector<Range>{{0, 1}, {1, 3}, {3, 5}});
  // The stages share the model's modules, now on their devices.
  CHECK(model->named_parameters()[0].second.device() == Device("cpu:0"));
  CHECK(model->named_parameters()[2].second.device() == Device("cpu:1"));
  CHECK(model->named_parameters()[4].second.device() == Device("cpu:2"));
  const Batch b = make_batches(ModelKind::Mlp, 1, 5)[0];
  auto reference = make_model(ModelKind::Mlp, 1);
  mg::NoGradGuard no_grad;
  CHECK(values(pipeline.forward(b.inputs)) == values(reference->forward(b.inputs)));
}

TEST_CASE("pipeline 1f1b holds about p micro-batches of activations on stage 0, gpipe all m",
          "[parallel][pipeline]") {
  CpuDevicesGuard guard(4);
  constexpr int p = 4, m = 16;
  // Wide layers, so that activations dominate stage 0's memory.
  auto peak_bytes = [&](const std::string& schedule) {
    mg::manual_seed(1);
    auto model = mg::nn::mlp({64, 512, 512, 512, 8});
    // Rendezvous sends: a sent activation waits in the receiver's mailbox (a copy on stage 0's
    // device) for one receive at most, so the peak counts the schedule's activations, not how
    // far the next stage's thread lags behind.
    Pipeline pipeline(model, cpu_devices(p),
                      {.schedule = schedule, .micro_batches = m, .cuts = {2, 4, 6}, .run_ranks = run_ranks_rendezvous});
    const Tensor x = mg::randn({m * 32, 64});
    const Tensor y = mg::argmax(mg::randn({m * 32, 8}), 1);
    mg::reset_peak_memory_stats(Device("cpu:0"));
    const int64_t before = mg::memory_stats(Device("cpu:0")).allocated;
    pipeline.step(x, y);
    return mg::memory_stats(Device("cpu:0")).peak - before;
  };
  const int64_t gpipe = peak_bytes("gpipe"), one_f_one_b = peak_bytes("1f1b");
  INFO("stage 0 peak above the inputs: gpipe " << gpipe << " B, 1f1b " << one_f_one_b << " B");
  // Stage 0 keeps per micro-batch in flight its output, which ReLU saves for backward (32 x 512
  // floats): 1F1B has at most p = 4 in flight, GPipe all 16. Temporaries (gradients, messages)
  // come with both, so the difference, not the ratio, is what the schedule decides; 1F1B's steady
  // state holds up to two activations more of them (a received gradient and a message beside a
  // backward's own: measured 7 against GPipe's 5), and small tensors (the loss's, a message's
  // bookkeeping) that timing moves by a few hundred bytes: 8 allocator blocks of 512 bytes.
  constexpr int64_t kOutputBytes = 32 * 512 * 4, kSmallBytes = 8 * 512;
  CHECK(gpipe - one_f_one_b >= (m - p - 2) * kOutputBytes - kSmallBytes);
}

TEST_CASE("pipeline timeline: every stage runs each micro-batch's forward and backward once", "[parallel][pipeline]") {
  CpuDevicesGuard guard(3);
  auto model = sequential(ModelKind::Mlp, 1);
  Pipeline pipeline(model, cpu_devices(3), {.schedule = "1f1b", .micro_batches = 5});
  const Batch b = make_batches(ModelKind::Mlp, 1, 10)[0];
  pipeline.step(b.inputs, b.targets);
  for (int s = 0; s < 3; ++s) {
    const std::string lane = "stage " + std::to_string(s) + " (cpu:" + std::to_string(s) + ")";
    std::vector<std::string> computed;
    for (const auto& e : pipeline.events()) {
      CHECK(e.end >= e.start);
      if (e.lane == lane && (e.name[0] == 'F' || e.name[0] == 'B')) computed.push_back(e.name);
    }
    std::sort(computed.begin(), computed.end());
    CHECK(computed == std::vector<std::string>{"B0", "B1", "B2", "B3", "B4", "F0", "F1", "F2", "F3", "F4"});
  }
  CHECK(pipeline.measured_bubble() >= 0);
  CHECK(pipeline.measured_bubble() < 1);
  CHECK(pipeline.formula_bubble() == Approx(2.0 / 7.0));
}

TEST_CASE("pipeline timeline: interleaved events name the chunk, every chunk runs each micro-batch once",
          "[parallel][pipeline]") {
  CpuDevicesGuard guard(2);
  Pipeline pipeline(sequential(ModelKind::DeepMlp, 1), cpu_devices(2),
                    {.schedule = "interleaved", .micro_batches = 2, .chunks = 2});
  const Batch b = make_batches(ModelKind::DeepMlp, 1, 4)[0];
  pipeline.step(b.inputs, b.targets);
  for (int s = 0; s < 2; ++s) {
    const std::string lane = "stage " + std::to_string(s) + " (cpu:" + std::to_string(s) + ")";
    std::vector<std::string> computed;
    for (const auto& e : pipeline.events())
      if (e.lane == lane && (e.name[0] == 'F' || e.name[0] == 'B')) computed.push_back(e.name);
    std::sort(computed.begin(), computed.end());
    CHECK(computed == std::vector<std::string>{"B0.0", "B0.1", "B1.0", "B1.1", "F0.0", "F0.1", "F1.0", "F1.1"});
  }
  CHECK(pipeline.formula_bubble() == Approx(1.0 / 5.0));
}

namespace {

// A layer that throws on its second forward.
class FailsLater : public mg::nn::Cloneable<FailsLater> {
 public:
  Tensor forward(const Tensor& x) override {
    if (++calls_ == 2) throw std::runtime_error("stage failed on purpose");
    return x;
  }
  std::string name() const override { return "FailsLater"; }

 private:
  int calls_ = 0;
};

}  // namespace

// A rank per stage (a Pipeline over a Communicator, as under MPI), resumed after one batch: every
// rank starts from one device's parameters and momentum after that batch, as a checkpoint gives
// them, and each rank's SGD then steps its own stage only, so the momentum it holds for the other
// stage goes stale. synchronize_parameters and synchronize_optimizer_state give every rank one
// device's parameters and state after all three batches.
TEST_CASE("pipeline with a rank per stage: every stage's parameters and optimizer state reach every rank",
          "[parallel][pipeline]") {
  CpuDevicesGuard guard(2);
  DeterministicScope deterministic(true);
  constexpr int m = 4;
  const auto batches = make_batches(ModelKind::Mlp, 3, 10);
  auto first = make_model(ModelKind::Mlp, 1);
  mg::optim::SGD first_sgd = make_sgd(*first);
  train_reference(*first, {batches[0]}, m, &first_sgd);
  auto reference = make_model(ModelKind::Mlp, 1);
  mg::optim::SGD reference_sgd = make_sgd(*reference);
  train_reference(*reference, batches, m, &reference_sgd);
  const mg::optim::OptimizerState want = reference_sgd.state_dict();
  std::vector<std::shared_ptr<mg::nn::Module>> models = {make_model(ModelKind::Mlp, 1), make_model(ModelKind::Mlp, 1)};
  std::vector<std::vector<std::vector<unsigned char>>> params(2);
  std::vector<mg::optim::OptimizerState> states(2);
  mg::parallel::run_ranks(cpu_devices(2), [&](mg::parallel::Communicator& comm) {
    const auto model = models[size_t(comm.rank())];
    model->load_state_dict(first->state_dict());
    Pipeline pipeline(pipeline_layers(model), comm, {.schedule = "1f1b", .micro_batches = m});
    mg::optim::SGD sgd = make_sgd(*model);
    sgd.load_state_dict(first_sgd.state_dict());
    for (size_t k = 1; k < batches.size(); ++k) {
      sgd.zero_grad();
      pipeline.step(batches[k].inputs, batches[k].targets);
      sgd.step();
    }
    pipeline.synchronize_parameters();
    params[size_t(comm.rank())] = parameter_bytes(*model);
    states[size_t(comm.rank())] = pipeline.synchronize_optimizer_state(sgd.params(), sgd.state_dict());
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(params[size_t(r)] == parameter_bytes(*reference));
    REQUIRE(states[size_t(r)].tensors.size() == want.tensors.size());
    for (const auto& [key, t] : want.tensors) {
      INFO(key);
      CHECK(bytes_of(states[size_t(r)].tensors.at(key)) == bytes_of(t));
    }
  }
}

TEST_CASE("pipeline: a stage that throws ends every stage promptly with its error", "[parallel][pipeline]") {
  CpuDevicesGuard guard(3);
  const Batch b = make_batches(ModelKind::Mlp, 1, 8)[0];
  const auto throws_promptly = [&](Pipeline& pipeline) {
    const auto start = std::chrono::steady_clock::now();
    try {
      pipeline.step(b.inputs, b.targets);
      FAIL("the step did not throw");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "stage failed on purpose");
    }
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 5.0);
  };
  mg::manual_seed(1);
  auto model = std::make_shared<mg::nn::Sequential>(std::initializer_list<std::shared_ptr<mg::nn::Module>>{
      std::make_shared<mg::nn::Linear>(12, 8), std::make_shared<FailsLater>(), std::make_shared<mg::nn::Linear>(8, 3)});
  Pipeline pipeline(model, cpu_devices(3), {.micro_batches = 4, .cuts = {1, 2}});
  throws_promptly(pipeline);
  // Interleaved, 2 stages x 2 chunks: the failing layer is stage 1's first chunk, while stage 0
  // waits for its activation to come back round for chunk 1.
  auto deeper = std::make_shared<mg::nn::Sequential>(std::initializer_list<std::shared_ptr<mg::nn::Module>>{
      std::make_shared<mg::nn::Linear>(12, 8), std::make_shared<FailsLater>(), std::make_shared<mg::nn::Linear>(8, 8),
      std::make_shared<mg::nn::Linear>(8, 3)});
  Pipeline interleaved(deeper, cpu_devices(2),
                       {.schedule = "interleaved", .micro_batches = 4, .chunks = 2, .cuts = {1, 2, 3}});
  throws_promptly(interleaved);
}

TEST_CASE("pipeline: a GPT whose head is tied to the embedding on another stage trains bit-identically to --grad-accum m",
          "[parallel][pipeline][gpt]") {
  // The tied weight's gradient is the sum of the head's and the embedding's per micro-batch, added
  // in micro-batch order on the embedding's stage (pipeline.h, "Tied weights").
  CpuDevicesGuard guard(3);
  DeterministicScope deterministic(true);
  constexpr int m = 4;
  const auto batches = make_batches(ModelKind::Gpt, 3, 10);  // 4 micro-batches of 3, 3, 2, 2 windows
  auto reference = make_model(ModelKind::Gpt, 1);
  train_reference(*reference, batches, m);
  const auto want = parameter_bytes(*reference);
  struct Case {
    PipelineOptions options;
    int stages;
    mg::parallel::RunRanks run;
  };
  const std::vector<Case> cases = {
      {{.schedule = "gpipe", .micro_batches = m}, 2, {}},
      {{.schedule = "1f1b", .micro_batches = m}, 2, {}},
      {{.schedule = "1f1b", .micro_batches = m}, 3, {}},
      {{.schedule = "interleaved", .micro_batches = m, .chunks = 2}, 2, {}},
      {{.schedule = "1f1b", .micro_batches = m}, 2, run_ranks_rendezvous},
      {{.schedule = "interleaved", .micro_batches = m, .chunks = 2}, 2, run_ranks_rendezvous},
  };
  for (Case c : cases) {
    INFO(c.options.schedule << ", " << c.stages << " stages" << (c.run ? ", rendezvous sends" : ""));
    auto model = make_model(ModelKind::Gpt, 1);
    c.options.run_ranks = c.run;
    Pipeline pipeline(pipeline_layers(model), cpu_devices(c.stages), c.options);
    const auto head = std::dynamic_pointer_cast<mg::nn::TiedLinear>(pipeline.stage_modules().back()->at(
        pipeline.stage_modules().back()->size() - 1));
    REQUIRE(head != nullptr);
    CHECK(pipeline.stage_modules().front()->parameters().front().is_same(head->owner_weight()));
    mg::optim::SGD sgd = make_sgd(*model);
    for (const Batch& b : batches) {
      sgd.zero_grad();
      const auto r = pipeline.step(b.inputs, b.targets);
      CHECK((r.samples == 10 && r.predictions == 160));
      CHECK(!head->stand_in().defined());  // the step's copy is gone
      sgd.step();
    }
    REQUIRE(parameter_bytes(*model) == want);
    // Inference through the stages: the head reads a copy of the trained weight on its device.
    const Tensor logits = pipeline.forward(batches[0].inputs);
    CHECK(logits.device() == cpu_devices(c.stages).back());
    mg::NoGradGuard no_grad;
    CHECK(bytes_of(logits) == bytes_of(reference->forward(batches[0].inputs)));
  }
}

TEST_CASE("pipeline: a tied layer whose owner no stage holds is an error", "[parallel][pipeline]") {
  CpuDevicesGuard guard(2);
  auto outside = std::make_shared<mg::nn::Embedding>(3, 4);
  auto model = std::make_shared<mg::nn::Sequential>(std::initializer_list<std::shared_ptr<mg::nn::Module>>{
      std::make_shared<mg::nn::Linear>(4, 4), std::make_shared<mg::nn::TiedLinear>(outside, "weight")});
  require_error([&] { Pipeline p(model, cpu_devices(2)); },
                {"TiedLinear(Embedding(3, 4).weight) in stage 1 ties to a weight that no stage holds"});
}

TEST_CASE("pipeline refuses too few layers, bad cuts, small batches and unknown schedules", "[parallel][pipeline]") {
  CpuDevicesGuard guard(4);
  require_error([] { Pipeline p(mg::nn::mlp({4, 3}), cpu_devices(2)); }, {"the model has 1 layer, fewer than the 2 stages"});
  require_error([] { Pipeline p(mg::nn::mlp({4, 4, 3}), cpu_devices(3), {.cuts = {2, 1}}); },
                {"cut indices must increase"});
  require_error([] { Pipeline p(mg::nn::mlp({4, 4, 3}), cpu_devices(2), {.cuts = {1, 2}}); }, {"2 stages need 1 cut"});
  require_error([] { Pipeline p(mg::nn::mlp({4, 4, 3}), cpu_devices(2), {.schedule = "zigzag"}); }, {"zigzag"});
  require_error([] { Pipeline p(mg::nn::mlp({4, 4, 3}), cpu_devices(2), {.micro_batches = 0}); },
                {"micro_batches must be at least 1"});
  // Interleaved: several chunks, m a multiple of p, p v pieces of the model.
  require_error([] { Pipeline p(mg::nn::mlp({4, 4, 4, 3}), cpu_devices(2), {.schedule = "interleaved"}); },
                {"at least 2 stages and 2 chunks", "chunks=1"});
  require_error([] { Pipeline p(mg::nn::mlp({4, 4, 4, 3}), cpu_devices(2), {.schedule = "1f1b", .chunks = 2}); },
                {"1f1b runs 1 chunk per stage", "chunks=2"});
  const PipelineOptions three = {.schedule = "interleaved", .micro_batches = 3, .chunks = 2};
  require_error([&] { Pipeline p(mg::nn::mlp({4, 4, 4, 3}), cpu_devices(2), three); },
                {"micro_batches=3 is not a multiple of stages=2"});
  require_error([&] { Pipeline p(mg::nn::mlp({4, 4, 4, 3}), cpu_devices(3), three); },
                {"the model has 5 layers, fewer than the 6 virtual stages (3 stages x 2 chunks)"});
  require_error([] {
    Pipeline p(mg::nn::mlp({4, 4, 4, 3}), cpu_devices(2), {.schedule = "interleaved", .chunks = 2, .cuts = {1}});
  }, {"4 virtual stages (2 stages x 2 chunks) need 3 cut indices (got 1)"});
  Pipeline pipeline(mg::nn::mlp({4, 4, 3}), cpu_devices(2), {.micro_batches = 4});
  require_error([&] { pipeline.step(mg::randn({3, 4}), mg::zeros({3}, {.dtype = mg::DType::Int64})); },
                {"a batch of 3 rows does not split into 4 micro-batches"});
}

TEST_CASE("pipeline stages compute in the caller's autocast precision, equal to bf16 --grad-accum m",
          "[parallel][pipeline][autocast]") {
  CpuDevicesGuard guard(2);
  DeterministicScope deterministic(true);
  constexpr int m = 4;
  mg::AutocastGuard autocast(mg::Precision::BFloat16);
  const auto batches = make_batches(ModelKind::Mlp, 2, 10);
  auto reference = make_model(ModelKind::Mlp, 1);
  train_reference(*reference, batches, m);
  auto model = sequential(ModelKind::Mlp, 1);
  Pipeline pipeline(model, cpu_devices(2), {.schedule = "1f1b", .micro_batches = m});
  mg::optim::SGD sgd = make_sgd(*model);
  for (const Batch& b : batches) {
    sgd.zero_grad();
    pipeline.step(b.inputs, b.targets);
    sgd.step();
  }
  REQUIRE(parameter_bytes(*model) == parameter_bytes(*reference));
  // The stages' threads did round: float32 training ends elsewhere.
  mg::AutocastGuard off(mg::Precision::Float32);
  auto float32 = make_model(ModelKind::Mlp, 1);
  train_reference(*float32, batches, m);
  CHECK(parameter_bytes(*float32) != parameter_bytes(*reference));
}
