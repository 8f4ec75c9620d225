// tests/parallel/test_memory_model.cpp — parallel::state_bytes and peak_bytes (parallel/
// memory_model.h) against the allocator: what a rank holds after two Adam steps of the MLP (235,146
// parameters) under DDP and ZeRO-1, -2 and -3 on 1, 2 and 4 ranks, and its peak during the next
// step, less what its device held before the model came.
#include <algorithm>
#include <map>

#include "core/cpu_devices_guard.h"
#include "multigrad/parallel/memory_model.h"
#include "multigrad/parallel/pipeline/pipeline.h"
#include "multigrad/parallel/pipeline/schedule.h"
#include "parallel/parallel_test_util.h"
#include "multigrad/parallel/data/zero.h"

using mg::Tensor;
using mg::parallel::Communicator;
using namespace mg::test;

namespace {

// One rank's MLP under `mode` with Adam: the module to run (DDP's, zero3's sharded model, or the
// layers), its optimizer, and ZeRO's units' parameter counts in reduction order (none for ddp).
struct RankModel {
  std::shared_ptr<mg::nn::Module> net;
  std::unique_ptr<mg::optim::Optimizer> opt;
  std::vector<int64_t> unit_values;
};

RankModel rank_model(const std::string& mode, const std::shared_ptr<mg::nn::Sequential>& layers, Communicator& comm) {
  const auto adam = [](std::vector<mg::optim::ParamGroup> g) -> std::unique_ptr<mg::optim::Optimizer> {
    return std::make_unique<mg::optim::Adam>(std::move(g), mg::optim::AdamOptions{});
  };
  layers->to(comm.device());
  RankModel m{layers, nullptr, {}};
  if (mode == "ddp") {
    m.net = std::make_shared<mg::parallel::DistributedDataParallel>(layers, comm);
    m.opt = adam({{.params = m.net->parameters()}});
    return m;
  }
  const int stage = mode.back() - '0';
  auto zero = std::make_unique<mg::parallel::ZeroOptimizer>(
      std::vector<mg::optim::ParamGroup>{{.params = layers->parameters()}}, comm, adam,
      mg::parallel::ZeroOptions{.stage = stage}, stage == 3 ? layers : nullptr);
  if (stage == 3) m.net = std::shared_ptr<mg::nn::Module>(layers, &zero->model());  // zero owns it
  for (const auto& unit : zero->unit_params()) {
    m.unit_values.push_back(0);
    for (size_t k : unit) m.unit_values.back() += layers->parameters()[k].numel();
  }
  m.opt = std::move(zero);
  return m;
}

}  // namespace

TEST_CASE("state_bytes predicts what a rank holds between steps: ddp and zero1-3 on 1, 2 and 4 ranks",
          "[parallel][memory]") {
  CpuDevicesGuard guard(5);
  const auto make = [] {
    mg::manual_seed(3);
    return mg::nn::mlp({784, 256, 128, 10});
  };
  int64_t params = 0;
  for (const Tensor& p : make()->parameters()) params += p.numel();
  mg::manual_seed(4);
  const Batch batch = {mg::randn({8, 784}), mg::argmax(mg::randn({8, 10}), 1)};
  for (int ranks : {1, 2, 4}) {
    // Ranks on cpu:1.. (the models are made on cpu:0): a device holds only its rank's tensors.
    std::vector<mg::Device> devices;
    for (int r = 1; r <= ranks; ++r) devices.emplace_back(mg::DeviceType::CPU, r);
    for (const std::string mode : {"ddp", "zero1", "zero2", "zero3"}) {
      INFO(mode << " on " << ranks << " ranks");
      std::vector<std::shared_ptr<mg::nn::Sequential>> models;
      for (int r = 0; r < ranks; ++r) models.push_back(make());
      std::vector<int64_t> held(size_t(ranks), 0), first_unit(size_t(ranks), 0);
      size_t units = 1;
      mg::parallel::run_ranks(devices, [&](Communicator& comm) {
        const int64_t before = mg::memory_stats(comm.device()).allocated;
        auto [net, opt, unit_values] = rank_model(mode, models[size_t(comm.rank())], comm);
        if (!unit_values.empty()) {
          units = unit_values.size();
          first_unit[size_t(comm.rank())] = unit_values.front();
        }
        for (int step = 0; step < 2; ++step) {
          opt->zero_grad();
          backward_rank_part(comm, batch, *net);
          opt->step();
        }
        held[size_t(comm.rank())] = mg::memory_stats(comm.device()).allocated - before;
        comm.barrier()->wait();
      });
      const bool keeps_first_unit = mode == "zero2" || mode == "zero3";
      const int64_t want =
          mg::parallel::state_bytes(mode, params, ranks, 2, keeps_first_unit ? first_unit[0] : 0).total();
      // Not in the formula: the allocator's rounding of each tensor to 512 bytes (core/allocator.cpp;
      // at most 6 parameters or 3 units, as many gradient buckets or buffers, 3 reduced shards, and
      // per segment, at most 9, two moments and a step count: 40 tensors), and each unit's padding
      // to a multiple of the ranks in its parameters, buffers and state.
      const int64_t slack = 512 * 40 + int64_t(units) * (ranks - 1) * 4 * 6;
      for (int r = 0; r < ranks; ++r) {
        INFO("rank " << r << ": holds " << held[size_t(r)] << " bytes, the formula " << want);
        CHECK(std::abs(held[size_t(r)] - want) <= slack);
      }
    }
  }
}

// peak_bytes (parallel/memory_model.h) against the allocator's peak over the third step, with a
// batch small enough for the communication phase to decide (8 rows in all) and one large enough
// for backward's activations to (512 rows per rank). The margins: what the state test allows
// (the allocator's rounding, the units' padding), and 4 bytes a row for what the activation
// formula leaves out (the loss's per-row terms); and where the formula is a bound, what it may
// count that is not held at that moment: zero2's input, zero3's unit before the widest one.
TEST_CASE("peak_bytes predicts a rank's peak during a step: ddp and zero1-3 on 1, 2 and 4 ranks, small and large "
          "batches", "[parallel][memory]") {
  CpuDevicesGuard guard(5);
  const std::vector<int64_t> widths{784, 256, 128, 10};
  const auto make = [&] {
    mg::manual_seed(3);
    return mg::nn::mlp(widths);
  };
  int64_t params = 0;
  for (const Tensor& p : make()->parameters()) params += p.numel();
  for (int ranks : {1, 2, 4}) {
    std::vector<mg::Device> devices;
    for (int r = 1; r <= ranks; ++r) devices.emplace_back(mg::DeviceType::CPU, r);
    for (const int64_t rows : {int64_t(8), int64_t(512) * ranks}) {
      mg::manual_seed(4);
      const Batch batch = {mg::randn({rows, widths.front()}), mg::argmax(mg::randn({rows, widths.back()}), 1)};
      for (const std::string mode : {"ddp", "zero1", "zero2", "zero3"}) {
        INFO(mode << " on " << ranks << " ranks, " << rows << " rows");
        std::vector<std::shared_ptr<mg::nn::Sequential>> models;
        for (int r = 0; r < ranks; ++r) models.push_back(make());
        std::vector<int64_t> peak(size_t(ranks), 0);
        mg::parallel::StepShape step;
        int64_t first_unit = 0;
        size_t units = 1;
        mg::parallel::run_ranks(devices, [&](Communicator& comm) {
          const int64_t before = mg::memory_stats(comm.device()).allocated;
          auto [net, opt, unit_values] = rank_model(mode, models[size_t(comm.rank())], comm);
          if (const auto ddp = std::dynamic_pointer_cast<mg::parallel::DistributedDataParallel>(net))
            REQUIRE(ddp->bucket_names().size() == 1);  // the MLP's 0.9 MiB fit the first bucket
          for (int s = 0; s < 3; ++s) {
            if (s == 2) {
              comm.barrier()->wait();
              mg::reset_peak_memory_stats(comm.device());
            }
            opt->zero_grad();
            backward_rank_part(comm, batch, *net);
            opt->step();
          }
          peak[size_t(comm.rank())] = mg::memory_stats(comm.device()).peak - before;
          if (comm.rank() == 0) {
            const int64_t mine = mg::parallel::split_batch(rows, ranks)[0].size();
            step.activations = mg::parallel::mlp_activation_bytes(widths, mine);
            step.input = mine * (widths.front() * 4 + 8);
            step.largest_bucket = params;
            units = std::max<size_t>(1, unit_values.size());
            if (!unit_values.empty()) {
              first_unit = unit_values.front();
              const auto widest = size_t(std::max_element(unit_values.begin(), unit_values.end()) -
                                         unit_values.begin());
              step.widest_unit = unit_values[widest];
              step.unit_before = widest > 0 ? unit_values[widest - 1] : 0;
            }
          }
          comm.barrier()->wait();
        });
        const bool keeps_first_unit = mode == "zero2" || mode == "zero3";
        const int64_t want = mg::parallel::peak_bytes(mode, params, ranks, 2, keeps_first_unit ? first_unit : 0, step);
        const int64_t slack = 512 * 40 + int64_t(units) * (ranks - 1) * 4 * 6 + 4 * rows;
        const int64_t may_not_hold = mode == "zero2" ? step.input : mode == "zero3" ? 4 * step.unit_before : 0;
        for (int r = 0; r < ranks; ++r) {
          INFO("rank " << r << ": peak " << peak[size_t(r)] << " bytes, the formula " << want);
          CHECK(peak[size_t(r)] <= want + slack);
          CHECK(peak[size_t(r)] >= want - may_not_hold - slack);
        }
      }
    }
  }
}

TEST_CASE("state_bytes: the formulas of ZeRO's paper, and a bad mode", "[parallel][memory]") {
  // Adam (K = 2) in float32 on 4 ranks, 1000 parameters: 16 bytes a parameter for DDP.
  CHECK(mg::parallel::state_bytes("ddp", 1000, 4, 2).total() == 16000);
  CHECK(mg::parallel::state_bytes("zero1", 1000, 4, 2).total() == 4000 + 5000 + 2000);
  CHECK(mg::parallel::state_bytes("zero2", 1000, 4, 2, 100).total() == 4000 + 1400 + 2000);
  CHECK(mg::parallel::state_bytes("zero3", 1000, 4, 2, 100).total() == 1000 + 1400 + 2000);
  CHECK(mg::parallel::state_bytes("tp", 1000, 4, 2).total() == 16000);  // the rank's own 1000
  // The MLP 784-256-128-10 on 2 ranks: the column layer's half (weight and bias), the row layer's
  // half weight and whole bias, the last layer whole; the column layer's outputs halved.
  CHECK(mg::parallel::tensor_parallel_mlp_params({784, 256, 128, 10}, 2) ==
        (256 * 784 + 256) / 2 + 128 * 256 / 2 + 128 + 10 * 128 + 10);
  CHECK(mg::parallel::tp_mlp_widths({784, 256, 128, 10}, 2) == std::vector<int64_t>{784, 128, 128, 10});
  CHECK(mg::parallel::tp_mlp_widths({784, 256, 128, 64, 10}, 4) == std::vector<int64_t>{784, 64, 128, 16, 10});
  CHECK_THROWS_WITH(mg::parallel::tensor_parallel_mlp_params({784, 250, 128, 10}, 4),
                    Catch::Contains("250 features do not split among 4 ranks"));
  CHECK_THROWS_WITH(mg::parallel::state_bytes("fsdp", 1000, 4, 2),
                    Catch::Contains("state_bytes: no mode 'fsdp' (ddp, zero1, zero2, zero3, tp)"));
}

// Tensor parallelism (parallel/tensor/tensor_parallel.h) of the same MLP: each rank holds its shards and
// the replicated layers (state_bytes' "tp" of tensor_parallel_mlp_params), and runs the whole
// batch through its layers (mlp_activation_bytes of tp_mlp_widths): after the step it holds the state and its
// input, and its peak is peak_bytes'. The gradients stay allocated (zero_grad(false)), as the state
// counts them; with zero_grad's default (set_to_none) the peak is lower, by at most the gradients
// (backward has not made those of the layers it has not reached). The margins as above.
TEST_CASE("peak_bytes predicts a tensor-parallel rank's peak during a step: the MLP on 1, 2 and 4 ranks, small and "
          "large batches", "[parallel][memory][tp]") {
  CpuDevicesGuard guard(5);
  const std::vector<int64_t> widths{784, 256, 128, 10};
  for (int ranks : {1, 2, 4}) {
    std::vector<mg::Device> devices;
    for (int r = 1; r <= ranks; ++r) devices.emplace_back(mg::DeviceType::CPU, r);
    for (const int64_t rows : {int64_t(8), int64_t(512)}) {
      INFO(ranks << " ranks, " << rows << " rows");
      mg::manual_seed(4);
      const Batch batch = {mg::randn({rows, widths.front()}), mg::argmax(mg::randn({rows, widths.back()}), 1)};
      mg::manual_seed(3);
      const auto whole = mg::nn::mlp(widths);
      std::vector<int64_t> peak(size_t(ranks), 0), peak_unset(size_t(ranks), 0), held(size_t(ranks), 0);
      mg::parallel::run_ranks(devices, [&](Communicator& comm) {
        const int64_t before = mg::memory_stats(comm.device()).allocated;
        const auto tp = mg::parallel::tensor_parallel_mlp(*whole, comm);
        tp->to(comm.device());
        mg::optim::Adam adam({{.params = tp->parameters()}}, {});
        const Tensor x = batch.inputs.to(comm.device()), y = batch.targets.to(comm.device());
        for (int s = 0; s < 4; ++s) {
          if (s >= 2) {
            comm.barrier()->wait();
            mg::reset_peak_memory_stats(comm.device());
          }
          adam.zero_grad(s == 3);  // step 3 as zero_grad's default, set_to_none
          mg::cross_entropy(tp->forward(x), y).backward();
          adam.step();
          if (s == 2) peak[size_t(comm.rank())] = mg::memory_stats(comm.device()).peak - before;
          if (s == 3) peak_unset[size_t(comm.rank())] = mg::memory_stats(comm.device()).peak - before;
        }
        held[size_t(comm.rank())] = mg::memory_stats(comm.device()).allocated - before;
        comm.barrier()->wait();
      });
      const int64_t params = mg::parallel::tensor_parallel_mlp_params(widths, ranks);
      const int64_t input = rows * (widths.front() * 4 + 8);  // x and y, held through the step
      mg::parallel::StepShape step;
      step.activations = mg::parallel::mlp_activation_bytes(mg::parallel::tp_mlp_widths(widths, ranks), rows);
      step.input = input;
      step.accumulating = (widths[0] + rows) * (widths[1] / ranks);  // the first layer's weight, its outputs
      const int64_t state = mg::parallel::state_bytes("tp", params, ranks, 2).total();
      const int64_t want = mg::parallel::peak_bytes("tp", params, ranks, 2, 0, step);
      const int64_t slack = 512 * 40 + 4 * rows;
      for (int r = 0; r < ranks; ++r) {
        INFO("rank " << r << ": peak " << peak[size_t(r)] << " bytes (" << peak_unset[size_t(r)]
                     << " with set_to_none), the formula " << want << "; holds " << held[size_t(r)]
                     << " after the step, the state " << state << " and the input " << input);
        CHECK(std::abs(held[size_t(r)] - state - input) <= slack);
        CHECK(std::abs(peak[size_t(r)] - want) <= slack);
        CHECK(peak_unset[size_t(r)] <= want + slack);
        CHECK(peak_unset[size_t(r)] >= want - 4 * params - slack);
      }
    }
  }
}

// pipeline_stage_step_bytes (parallel/memory_model.h) against each stage's peak during a step,
// above what it held before (its parameters and gradients, kept: no zero_grad), for GPipe and
// 1F1B on 2 and 4 stages with 4 and 8 micro-batches of 32 rows: the bound holds, and lies at most
// one of the stage's widest activations above the peak (measured: 62,976 bytes of 65,536 at
// most). Rendezvous sends (NCCL's), so a stage holds what its schedule says, not what a faster
// neighbour queued for it. The margin: the allocator's
// rounding of the small tensors (the loss's, 4 a micro-batch on the last stage; headers).
TEST_CASE("pipeline_stage_step_bytes bounds each stage's peak during a step: gpipe and 1f1b on 2 and 4 stages",
          "[parallel][memory][pipeline]") {
  CpuDevicesGuard guard(4);
  const std::vector<int64_t> widths{64, 512, 512, 512, 8};
  constexpr int64_t rows = 32;
  for (int p : {2, 4}) {
    // Sequential indices of nn::mlp: Linear l at 2 l; the Linears of stage s: [first[s], first[s + 1]).
    const std::vector<size_t> cuts = p == 2 ? std::vector<size_t>{4} : std::vector<size_t>{2, 4, 6};
    std::vector<size_t> first{0};
    for (size_t c : cuts) first.push_back(c / 2);
    first.push_back(widths.size() - 1);
    for (int m : {4, 8}) {
      for (const std::string schedule : {"gpipe", "1f1b"}) {
        mg::manual_seed(1);
        auto model = mg::nn::mlp(widths);
        mg::parallel::Pipeline pipeline(model, cpu_devices(p),
                                        {.schedule = schedule, .micro_batches = m, .cuts = cuts,
                                         .run_ranks = run_ranks_rendezvous});
        const Tensor x = mg::randn({m * rows, widths.front()});
        const Tensor y = mg::argmax(mg::randn({m * rows, widths.back()}), 1);
        pipeline.step(x, y);  // the gradients made
        std::vector<int64_t> before(static_cast<size_t>(p));
        for (int s = 0; s < p; ++s) {
          mg::reset_peak_memory_stats(mg::Device(mg::DeviceType::CPU, s));
          before[size_t(s)] = mg::memory_stats(mg::Device(mg::DeviceType::CPU, s)).allocated;
        }
        pipeline.step(x, y);
        const auto actions = mg::parallel::make_schedule(schedule, p, m);
        const auto exchanges = mg::parallel::find_exchanges(actions);
        for (int s = 0; s < p; ++s) {
          INFO(schedule << ", " << p << " stages, " << m << " micro-batches, stage " << s);
          const int in_flight = mg::parallel::peak_in_flight(actions[size_t(s)]);
          CHECK(in_flight == (schedule == "gpipe" ? m : std::min(p - s, m)));
          const bool exchanging = std::count(exchanges[size_t(s)].begin(), exchanges[size_t(s)].end(), true) > 0;
          const int64_t bound = mg::parallel::pipeline_stage_step_bytes(widths, first[size_t(s)], first[size_t(s) + 1],
                                                                        rows, in_flight, exchanging);
          const int64_t peak = mg::memory_stats(mg::Device(mg::DeviceType::CPU, s)).peak - before[size_t(s)];
          int64_t widest = 0;
          for (size_t l = first[size_t(s)]; l <= first[size_t(s) + 1]; ++l) widest = std::max(widest, widths[l]);
          const int64_t activation = rows * widest * 4, slack = 512 * (8 + 4 * in_flight);
          INFO("peak " << peak << " bytes, the bound " << bound << ", an activation " << activation);
          CHECK(peak <= bound + slack);
          // The bound counts both messages an exchanging stage may hold and a layer's backward
          // gradients as alive together; a message may not be there, a ReLU's output gradient may go
          // before its input's is made: up to two activations.
          CHECK(peak >= bound - 2 * activation - slack);
        }
      }
    }
  }
}

// The preflight of multigrad train refuses a run whose step cannot fit from these two: they must
// never count more than a step holds. gpt_activation_bytes counts tensors backward reads, so all
// of them are allocated once the loss exists; the parameters are counted exactly.
TEST_CASE("gpt_parameter_count is a GPT's, and gpt_activation_bytes a lower bound of what its forward keeps",
          "[parallel][memory]") {
  const mg::nn::GPTConfig c{.vocab_size = 64, .context = 32, .n_layer = 3, .n_head = 2, .n_embd = 32};
  for (bool recompute : {false, true}) {
    INFO("recompute " << recompute);
    mg::manual_seed(5);
    const auto gpt = mg::nn::gpt(c);
    gpt->set_recompute(recompute);
    int64_t params = 0;
    for (const Tensor& p : gpt->parameters()) params += p.numel();
    CHECK(params == mg::nn::gpt_parameter_count(c));
    const int64_t rows = 4;
    std::vector<int64_t> ids(size_t(rows * c.context));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i * 7 % 64);
    const Tensor tokens = mg::tensor(ids, {rows, c.context}), targets = mg::tensor(ids, {rows, c.context});
    const mg::Device cpu("cpu:0");
    const int64_t before = mg::memory_stats(cpu).allocated;
    const Tensor loss = mg::cross_entropy_flat(gpt->forward(tokens), targets);
    const int64_t kept = mg::memory_stats(cpu).allocated - before;
    const int64_t bound = mg::parallel::gpt_activation_bytes(rows, c.context, c.n_layer, c.n_embd, c.vocab_size,
                                                             recompute);
    INFO("kept " << kept << " bytes, the bound " << bound);
    CHECK(bound <= kept);
    CHECK(bound > 0);
  }
}
