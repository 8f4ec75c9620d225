// benchmarks/bench_ddp.cpp — what DistributedDataParallel costs, and how much of its
// communication it hides behind backward.
//
//   overhead: one training step (forward, cross-entropy, backward, SGD) of the MLP and the CNN
//             on batch 128, plain vs wrapped in DDP over one rank (its hooks, bucket copies and a
//             one-rank all-reduce). Samples alternate, in one thread. Target: ratio <= 1.05.
//   scaling:  the same global batch of 128 over 2 ranks (cpu:0, cpu:1; each rank 64 examples)
//             against one device doing all 128, with the per-step communication time and the
//             fraction of it hidden behind backward (DDPStats::overlap). On this 2-core machine
//             each CPU device has one core, so the plain row also runs on one core.
//   zero1, zero2, zero3: ZeRO stages 1-3 (parallel::ZeroOptimizer, units of kZeroUnitMiB; stage
//             3's are the layers) against DDP, all on N = 1, 2 and 4 ranks (on cpu:1..N) with Adam,
//             and against the model and Adam alone on one device (one_device_ms), the same global
//             batch: ms per step; the last rank's peak memory over the timed steps,
//             and what it holds after them (held_mib) beside parallel::state_bytes's formula
//             (parallel/memory_model.h); and rank 0's bytes per step
//             (parallel::CountingCommunicator) beside ZeRO's paper's 2 (N - 1) / N P B for DDP and
//             stages 1 and 2, 1.5 times that for stage 3.
//   tp, tp_sp: tensor parallelism of the GPT's small config (parallel::tensor_parallel_gpt; tp_sp
//             with sequence parallelism) on N = 2 and 4 ranks against DDP on as many and against
//             one device, a global batch of kGptBatch windows and AdamW: ms per step, the last
//             rank's peak memory, and rank 0's bytes per step beside the formula: per block two
//             row-parallel outputs all-reduced in forward and two column-parallel inputs'
//             gradients in backward, 4 L all-reduces of B T C floats, 2 (N - 1) / N of their
//             bytes each; sequence parallelism moves the same as all-gathers and reduce-scatters,
//             plus the embeddings' gradient and ln_f's output (B T C each, (N - 1) / N) and its
//             layer norms' and biases' gradients (small).
//
// Output: one JSON object per line, e.g.
//   {"bench": "ddp_overhead", "model": "mlp", "impl": "ddp1", "ms": 3.1, "baseline": "plain",
//    "baseline_ms": 3.0, "ratio": 1.03}
// ms is per step, the median over samples after warm-up.
//
// usage: bench_ddp [--quick]
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "multigrad/multigrad.h"

namespace {

using mg::Tensor;
using mg::bench::measure;
using mg::bench::Settings;
using mg::parallel::Communicator;

constexpr int64_t kBatch = 128;
// ZeRO's units: small enough that the MLP's and the CNN's gradients span a few, so that stage 2
// holds some of them at a time (the default 25 MiB puts each model in one).
constexpr double kZeroUnitMiB = 0.25;
constexpr int64_t kGptBatch = 8;  // windows of the small config's 128 tokens

struct Workload {
  std::string name;
  std::function<std::shared_ptr<mg::nn::Module>()> make;
  mg::Shape input;  // per example
};

std::vector<Workload> workloads() {
  return {{"mlp", [] { return std::shared_ptr<mg::nn::Module>(mg::nn::mlp({784, 256, 128, 10})); }, {784}},
          {"cnn", [] { return std::shared_ptr<mg::nn::Module>(mg::nn::fashion_cnn()); }, {1, 28, 28}}};
}

// A step's data on `device`: `rows` random inputs and labels.
struct StepData {
  Tensor x, y;
};
StepData step_data(const Workload& w, int64_t rows, const mg::Device& device) {
  mg::Shape shape{rows};
  shape.insert(shape.end(), w.input.begin(), w.input.end());
  return {mg::randn(shape).to(device), mg::argmax(mg::randn({rows, 10}), 1).to(device)};
}

// One SGD step of `model` (the module, or its DDP wrapper) on `data`.
std::function<void()> training_step(mg::nn::Module& model, mg::optim::SGD& sgd, const StepData& data) {
  return [&model, &sgd, data] {
    sgd.zero_grad();
    mg::cross_entropy(model.forward(data.x), data.y).backward();
    sgd.step();
  };
}

void bench_overhead(const Settings& s, const Workload& w) {
  mg::set_cpu_device_count(1);
  mg::parallel::run_ranks({mg::Device("cpu:0")}, [&](Communicator& comm) {
    mg::manual_seed(0);
    auto plain = w.make();
    auto wrapped = w.make();
    mg::parallel::DistributedDataParallel ddp(wrapped, comm);
    mg::optim::SGD plain_sgd(plain->parameters(), {.lr = 0.01});
    mg::optim::SGD ddp_sgd(ddp.parameters(), {.lr = 0.01});
    const StepData data = step_data(w, kBatch, comm.device());
    const auto ms = measure(s, {training_step(*plain, plain_sgd, data), training_step(ddp, ddp_sgd, data)});
    std::printf(R"({"bench": "ddp_overhead", "model": "%s", "impl": "ddp1", "ms": %.4g, "baseline": "plain", )"
                R"("baseline_ms": %.4g, "ratio": %.3f, "target": 1.05})"
                "\n",
                w.name.c_str(), ms[1], ms[0], ms[1] / ms[0]);
    std::fflush(stdout);
  });
}

void bench_scaling(const Settings& s, const Workload& w) {
  mg::set_cpu_device_count(2);
  double plain_ms = 0;
  {
    mg::manual_seed(0);
    auto plain = w.make();
    mg::optim::SGD sgd(plain->parameters(), {.lr = 0.01});
    plain_ms = measure(s, {training_step(*plain, sgd, step_data(w, kBatch, mg::Device("cpu:0")))})[0];
  }
  // Every rank runs the same number of steps: rank 0 times them, the others keep pace.
  const int steps = s.samples * (s.quick ? 3 : 10);
  double ddp_ms = 0;
  mg::parallel::DDPStats stats;
  auto models = std::vector<std::shared_ptr<mg::nn::Module>>{w.make(), w.make()};
  mg::parallel::run_ranks({mg::Device("cpu:0"), mg::Device("cpu:1")}, [&](Communicator& comm) {
    auto model = models[size_t(comm.rank())];
    model->to(comm.device());
    mg::parallel::DistributedDataParallel ddp(model, comm);
    mg::optim::SGD sgd(ddp.parameters(), {.lr = 0.01});
    const auto step = training_step(ddp, sgd, step_data(w, kBatch / 2, comm.device()));
    for (int i = 0; i < s.warmup; ++i) step();
    comm.barrier()->wait();
    const double t0 = mg::bench::now_ms();
    for (int i = 0; i < steps; ++i) step();
    if (comm.rank() == 0) {
      ddp_ms = (mg::bench::now_ms() - t0) / steps;
      stats = ddp.stats();
    }
  });
  std::printf(R"({"bench": "ddp_scaling", "model": "%s", "impl": "ddp2", "ms": %.4g, "baseline": "plain", )"
              R"("baseline_ms": %.4g, "speedup": %.3f, "comm_ms_per_step": %.4g, "overlap": %.3f})"
              "\n",
              w.name.c_str(), ddp_ms, plain_ms, plain_ms / ddp_ms, stats.comm_ms / double(stats.steps),
              stats.overlap());
  std::fflush(stdout);
}

struct RankFigures {
  double ms = 0;              // per step
  double peak_mib = 0;        // the last rank's
  double held_mib = 0;        // the last rank's after the steps, less what its device held before
  double first_unit = 0;      // zero2, zero3: the values of the first unit (parallel/memory_model.h)
  double bytes_per_step = 0;  // rank 0's, by CountingCommunicator (parallel/comm/counting.h)
};

// On one rank of a run: s.warmup steps, then `steps` timed ones; the last rank's peak memory over
// them and rank 0's time and bytes per step into f.
void time_steps(const Settings& s, int steps, mg::parallel::CountingCommunicator& comm, int last,
                const std::function<void()>& step, RankFigures& f) {
  for (int i = 0; i < s.warmup; ++i) step();
  comm.barrier()->wait();
  mg::reset_peak_memory_stats(comm.device());
  comm.reset();
  const double t0 = mg::bench::now_ms();
  for (int i = 0; i < steps; ++i) step();
  const double bytes = comm.bytes();
  comm.barrier()->wait();
  if (comm.rank() == last) f.peak_mib = double(mg::memory_stats(comm.device()).peak) / (1024.0 * 1024.0);
  if (comm.rank() == 0) f.ms = (mg::bench::now_ms() - t0) / steps, f.bytes_per_step = bytes / steps;
}

// The figures of `mode` ("ddp", "zero1", "zero2" or "zero3"; "one": the model and Adam alone) on
// `ranks` ranks with Adam.
RankFigures time_ranks(const Settings& s, const Workload& w, const std::string& mode, int ranks) {
  const int steps = s.samples * (s.quick ? 3 : 10);
  RankFigures f;
  mg::manual_seed(0);
  std::vector<std::shared_ptr<mg::nn::Module>> models;
  std::vector<mg::Device> devices;  // cpu:1..: the models are made on cpu:0
  for (int r = 0; r < ranks; ++r) {
    models.push_back(w.make());
    devices.emplace_back(mg::DeviceType::CPU, r + 1);
  }
  const int last = ranks - 1;
  mg::parallel::run_ranks(devices, [&](Communicator& inner) {
    mg::parallel::CountingCommunicator comm(inner);
    auto model = models[size_t(comm.rank())];
    const StepData data = step_data(w, kBatch / ranks, comm.device());
    const int64_t before = mg::memory_stats(comm.device()).allocated;  // the rank's batch
    model->to(comm.device());
    std::shared_ptr<mg::nn::Module> ddp;
    std::unique_ptr<mg::optim::Optimizer> opt;
    mg::nn::Module* net = model.get();
    if (mode == "ddp") {
      ddp = std::make_shared<mg::parallel::DistributedDataParallel>(model, comm);
      opt = std::make_unique<mg::optim::Adam>(ddp->parameters(), mg::optim::AdamOptions{.lr = 1e-3});
      net = ddp.get();
    } else if (mode == "one") {
      opt = std::make_unique<mg::optim::Adam>(model->parameters(), mg::optim::AdamOptions{.lr = 1e-3});
    } else {
      const int stage = mode.back() - '0';
      auto zero = std::make_unique<mg::parallel::ZeroOptimizer>(
          std::vector<mg::optim::ParamGroup>{{.params = model->parameters()}}, comm,
          [](std::vector<mg::optim::ParamGroup> g) {
            return std::make_unique<mg::optim::Adam>(std::move(g), mg::optim::AdamOptions{.lr = 1e-3});
          },
          mg::parallel::ZeroOptions{.stage = stage, .bucket_cap_mb = kZeroUnitMiB},
          stage == 3 ? std::dynamic_pointer_cast<mg::nn::Sequential>(model) : nullptr);
      if (stage == 3) net = &zero->model();
      const auto units = zero->unit_params();
      if (comm.rank() == last && stage >= 2)
        for (size_t k : units[0]) f.first_unit += double(model->parameters()[k].numel());
      opt = std::move(zero);
    }
    time_steps(s, steps, comm, last, [&] {
      opt->zero_grad();
      mg::cross_entropy(net->forward(data.x), data.y).backward();
      opt->step();
    }, f);
    if (comm.rank() == last)
      f.held_mib = double(mg::memory_stats(comm.device()).allocated - before) / (1024.0 * 1024.0);
  });
  return f;
}

void bench_zero(const Settings& s, const Workload& w, int ranks) {
  mg::set_cpu_device_count(ranks + 1);  // time_ranks's ranks are on cpu:1..
  int64_t params = 0;
  for (const Tensor& p : w.make()->parameters()) params += p.numel();
  // What a rank holds between steps, by parallel::state_bytes (Adam: 2 state values a parameter).
  const auto formula_held_mib = [&](const std::string& mode, const RankFigures& f) {
    return double(mg::parallel::state_bytes(mode, params, ranks, 2, int64_t(f.first_unit)).total()) / (1024.0 * 1024.0);
  };
  // ZeRO's paper: DDP and ZeRO-1/2 move 2 (n - 1) / n of the parameters' bytes per step, ZeRO-3 1.5x.
  const double ddp_mb = 2.0 * (ranks - 1) / ranks * double(params) * 4 / 1e6;
  const RankFigures ddp = time_ranks(s, w, "ddp", ranks), one = time_ranks(s, w, "one", 1);
  for (const std::string mode : {"zero1", "zero2", "zero3"}) {
    const RankFigures zero = time_ranks(s, w, mode, ranks);
    const double formula_mb = mode == "zero3" ? 1.5 * ddp_mb : ddp_mb;
    std::printf(R"({"bench": "%s", "model": "%s", "ranks": %d, "impl": "%s", "ms": %.4g, "baseline": "ddp", )"
                R"("baseline_ms": %.4g, "ratio": %.3f, "peak_mb": %.3f, "baseline_peak_mb": %.3f, )"
                R"("held_mib": %.3f, "formula_held_mib": %.3f, "baseline_held_mib": %.3f, )"
                R"("baseline_formula_held_mib": %.3f, "comm_mb_per_step": %.4f, )"
                R"("baseline_comm_mb_per_step": %.4f, "formula_comm_mb_per_step": %.4f, "one_device_ms": %.4g, )"
                R"("ratio_to_one_device": %.3f})"
                "\n",
                mode.c_str(), w.name.c_str(), ranks, mode.c_str(), zero.ms, ddp.ms, zero.ms / ddp.ms, zero.peak_mib,
                ddp.peak_mib, zero.held_mib, formula_held_mib(mode, zero), ddp.held_mib, formula_held_mib("ddp", ddp),
                zero.bytes_per_step / 1e6, ddp.bytes_per_step / 1e6, formula_mb, one.ms, zero.ms / one.ms);
    std::fflush(stdout);
  }
}

// The GPT's small config (byte tokens) in `mode`: "one" (one device: cpu:1), "ddp", "tp" or "tp_sp"
// on `ranks` ranks (cpu:1..), AdamW; the figures as time_ranks's.
RankFigures time_gpt(const Settings& s, const std::string& mode, int ranks) {
  const int steps = s.samples * (s.quick ? 1 : 3);
  const mg::nn::GPTConfig config = mg::nn::gpt_config("small", 256);
  RankFigures f;
  mg::manual_seed(0);
  std::vector<std::shared_ptr<mg::nn::GPT>> models;
  std::vector<mg::Device> devices;
  for (int r = 0; r < ranks; ++r) {
    models.push_back(mg::nn::gpt(config));
    devices.emplace_back(mg::DeviceType::CPU, r + 1);
  }
  const int last = ranks - 1;
  mg::parallel::run_ranks(devices, [&](Communicator& inner) {
    mg::parallel::CountingCommunicator comm(inner);
    const auto gpt = models[size_t(comm.rank())];
    const int64_t rows = mode == "ddp" ? kGptBatch / ranks : kGptBatch;  // tp: every rank the whole batch
    const Tensor x = mg::argmax(mg::randn({rows, config.context, config.vocab_size}), -1).to(comm.device());
    const Tensor y = mg::argmax(mg::randn({rows, config.context, config.vocab_size}), -1).to(comm.device());
    gpt->to(comm.device());
    std::shared_ptr<mg::nn::Module> net = gpt;
    if (mode == "ddp") net = std::make_shared<mg::parallel::DistributedDataParallel>(gpt, comm);
    // The logits whole on every rank (no vocabulary split, which multigrad train adds): the formula's.
    if (mode == "tp" || mode == "tp_sp")
      net = mg::parallel::tensor_parallel_gpt(*gpt, comm, {.sequence_parallel = mode == "tp_sp"});
    mg::optim::AdamW opt(net->parameters(), mg::optim::AdamWOptions{.lr = 1e-3});
    time_steps(s, steps, comm, last, [&] {
      opt.zero_grad();
      mg::cross_entropy_flat(net->forward(x), y).backward();
      opt.step();
    }, f);
  });
  return f;
}

void bench_tp(const Settings& s, int ranks) {
  mg::set_cpu_device_count(ranks + 1);
  const mg::nn::GPTConfig config = mg::nn::gpt_config("small", 256);
  const double activation_mb = double(kGptBatch * config.context * config.n_embd) * 4 / 1e6;  // B T C floats
  const double share = double(ranks - 1) / ranks;
  const double tp_mb = 4.0 * double(config.n_layer) * 2.0 * share * activation_mb;
  // Sequence parallelism adds two gathers of B T C and the all-reduced gradients of 2 L + 1 layer
  // norms (weight and bias) and 2 L row-parallel biases, C floats each.
  const double small_mb = double((2 * config.n_layer + 1) * 2 + 2 * config.n_layer) * double(config.n_embd) * 4 / 1e6;
  const double sp_mb = tp_mb + 2.0 * share * activation_mb + 2.0 * share * small_mb;
  const RankFigures one = time_gpt(s, "one", 1), ddp = time_gpt(s, "ddp", ranks);
  for (const std::string mode : {"tp", "tp_sp"}) {
    const RankFigures tp = time_gpt(s, mode, ranks);
    const double formula_mb = mode == "tp" ? tp_mb : sp_mb;
    std::printf(R"({"bench": "%s", "model": "gpt_small", "ranks": %d, "impl": "%s", "ms": %.4g, "baseline": "ddp", )"
                R"("baseline_ms": %.4g, "ratio": %.3f, "one_device_ms": %.4g, "peak_mb": %.3f, )"
                R"("baseline_peak_mb": %.3f, "one_device_peak_mb": %.3f, "comm_mb_per_step": %.4f, )"
                R"("baseline_comm_mb_per_step": %.4f, "formula_comm_mb_per_step": %.4f, "one_device_ms": %.4g, )"
                R"("ratio_to_one_device": %.3f})"
                "\n",
                mode.c_str(), ranks, mode.c_str(), tp.ms, ddp.ms, tp.ms / ddp.ms, one.ms, tp.peak_mib, ddp.peak_mib,
                one.peak_mib, tp.bytes_per_step / 1e6, ddp.bytes_per_step / 1e6, formula_mb);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      s.quick = true;
      s.samples = 3;
    } else {
      std::fprintf(stderr, "bench_ddp: unknown argument '%s' (usage: bench_ddp [--quick])\n", argv[i]);
      return 2;
    }
  }
  for (const Workload& w : workloads()) bench_overhead(s, w);
  for (const Workload& w : workloads()) bench_scaling(s, w);
  for (const Workload& w : workloads())
    for (int ranks : {1, 2, 4}) bench_zero(s, w, ranks);
  for (int ranks : {2, 4}) bench_tp(s, ranks);
  return 0;
}
