// benchmarks/bench_pipeline.cpp — the pipeline's measured bubble against (p-1)/(m+p-1), and
// stage 0's peak memory under each schedule.
//
// A model of 2 p equal blocks (Linear(1024, 1024) + ReLU each), two blocks per stage on CPU
// devices cpu:0..p-1 (interleaved with 2 chunks: one block per chunk), trained on batches of
// 32 m rows, so every micro-batch is 32 rows and every stage does the same work (the batch
// requires grad, so stage 0 too computes its input's gradient; the last stage adds the loss).
// The bubble is measured over the steps after warm-up (Pipeline::measured_bubble: the fraction
// of stage time not spent in forward or backward) and printed beside the formula, for GPipe,
// 1F1B and interleaved 1F1B (formula (p-1)/(v m+p-1)). Target (issue 6): within 0.05 of the formula for p = 4,
// m = 16. With one core per stage at most (this machine has 2 cores for 4 stages) the stages
// also wait for a core, which shows as bubble: read the figure on a machine with p cores.
//
// stage0_peak_mb: stage 0's peak memory during the timed steps above what it held before them
// (parameters, the batch): its activations kept for backward, its gradients and scratch. 1F1B
// keeps at most p micro-batches' activations, interleaved p + (p - 1) / v, GPipe all m (memory
// does not depend on cores, so this figure holds on any machine).
//
// Output: one JSON object per line, e.g.
//   {"bench": "pipeline_bubble", "schedule": "1f1b", "stages": 4, "chunks": 1, "micro_batches": 16,
//    "measured": 0.17, "formula": 0.158, "step_ms": 85.1, "stage0_peak_mb": 5.1}
//
// usage: bench_pipeline [--quick]
#include <cstdio>
#include <cstring>

#include "bench_util.h"
#include "multigrad/multigrad.h"

namespace {

constexpr int64_t kWidth = 1024;
constexpr int64_t kRowsPerMicroBatch = 32;
constexpr int kBlocksPerStage = 2;

void bench(const char* schedule, int p, int m, int chunks, int steps) {
  mg::set_cpu_device_count(p);
  mg::manual_seed(0);
  auto model = std::make_shared<mg::nn::Sequential>();
  for (int b = 0; b < kBlocksPerStage * p; ++b) {
    model->push_back(std::make_shared<mg::nn::Linear>(kWidth, kWidth));
    model->push_back(std::make_shared<mg::nn::ReLU>());
  }
  std::vector<size_t> cuts;  // the p chunks pieces, equal
  const int layers_per_piece = 2 * kBlocksPerStage / chunks;
  for (int j = 1; j < p * chunks; ++j) cuts.push_back(size_t(j * layers_per_piece));
  std::vector<mg::Device> devices;
  for (int s = 0; s < p; ++s) devices.emplace_back(mg::DeviceType::CPU, s);
  // The batch requires grad, so that stage 0 computes its input's gradient as every later stage
  // does: without it stage 0's backward is one GEMM of three short, and it waits for stage 1
  // about a third of the time, which reads as bubble (p 2: 0.28-0.32 instead of 0.21).
  const mg::Tensor x = mg::randn({m * kRowsPerMicroBatch, kWidth}).requires_grad_();
  const mg::Tensor y = mg::argmax(mg::randn({m * kRowsPerMicroBatch, kWidth}), 1);

  const mg::parallel::PipelineOptions options{.schedule = schedule, .micro_batches = m, .chunks = chunks, .cuts = cuts};
  mg::parallel::Pipeline warmup(model, devices, options);
  warmup.step(x, y);
  mg::parallel::Pipeline pipeline(model, devices, options);
  mg::reset_peak_memory_stats(devices[0]);
  const int64_t before = mg::memory_stats(devices[0]).allocated;  // parameters, the batch
  const double t0 = mg::bench::now_ms();
  for (int i = 0; i < steps; ++i) {
    for (const mg::Tensor& param : model->parameters()) param.set_grad(mg::Tensor());
    x.set_grad(mg::Tensor());
    pipeline.step(x, y);
  }
  const double step_ms = (mg::bench::now_ms() - t0) / steps;
  const double stage0_peak_mb = double(mg::memory_stats(devices[0]).peak - before) / (1024.0 * 1024.0);
  std::printf(R"({"bench": "pipeline_bubble", "schedule": "%s", "stages": %d, "chunks": %d, "micro_batches": %d, )"
              R"("measured": %.4f, "formula": %.4f, "step_ms": %.4g, "stage0_peak_mb": %.3g})"
              "\n",
              schedule, p, chunks, m, pipeline.measured_bubble(), pipeline.formula_bubble(), step_ms, stage0_peak_mb);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "bench_pipeline: unknown argument '%s' (usage: bench_pipeline [--quick])\n", argv[i]);
      return 2;
    }
  }
  const int steps = quick ? 2 : 5;
  for (const char* schedule : {"gpipe", "1f1b", "interleaved"}) {
    const int chunks = std::strcmp(schedule, "interleaved") == 0 ? 2 : 1;
    bench(schedule, 2, 8, chunks, steps);
    bench(schedule, 4, 16, chunks, steps);
  }
  return 0;
}
