// benchmarks/bench_workloads.cpp — the multigrad side of the PyTorch comparison (issue 7).
//
// Each workload does exactly what its twin in benchmarks/torch/workloads.py does: the same
// shapes, float32, the same optimizer settings, on cpu:0 with the device's thread budget
// (hardware threads / CPU devices; scripts/bench-vs-torch.sh gives PyTorch the same count):
//   matmul_256, matmul_1024  mg::matmul of two (n, n) matrices                       GFLOP/s
//   add_16m, gelu_16m        mg::add / mg::gelu (tanh) on 16M floats, result allocated  GB/s
//   softmax_ce               cross_entropy of (4096, 1000) logits, forward + backward  rows/s
//   mlp_train_step           mlp 784-256-128-10, batch 128: zero_grad, forward,     samples/s
//                            cross-entropy, backward, SGD(lr 0.1, momentum 0.9) step
//   cnn_train_step           fashion_cnn (nn/models.cpp), batch 128, the same step  samples/s
// GB/s counts bytes read plus bytes written (add: 12 bytes per element, gelu: 8).
//
// Output: one JSON object per workload, e.g.
//   {"workload": "matmul_1024", "config": "n=1024 threads=2", "ms": 21.3,
//    "throughput": 100.8, "unit": "gflops", "threads": 2}
// ms is the median time of one iteration over samples after warm-up (bench_util.h's measure).
//
// usage: bench_workloads [--quick] [--only NAME]
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "multigrad.h"

namespace {

using mg::Tensor;
using mg::bench::measure;
using mg::bench::Settings;

constexpr int64_t kElementwiseNumel = int64_t(1) << 24;  // 16M floats = 64 MiB per operand
constexpr int64_t kSoftmaxRows = 4096, kSoftmaxClasses = 1000;
constexpr int64_t kBatch = 128;
constexpr int64_t kClasses = 10;  // Fashion-MNIST
const mg::optim::SGDOptions kSgd{.lr = 0.1, .momentum = 0.9};
constexpr double kBytesPerGB = 1e9;

// What one workload prepares once and then runs per iteration, and how to turn the time of one
// iteration into its throughput.
struct Prepared {
  std::string config;
  std::function<void()> iteration;
  const char* unit;
  std::function<double(double ms)> throughput;
};

struct Workload {
  std::string name;
  std::function<Prepared(const mg::Device&)> prepare;
};

Prepared matmul(int64_t n, const mg::Device& cpu) {
  const Tensor a = mg::randn({n, n}, {.device = cpu});  // (n, n)
  const Tensor b = mg::randn({n, n}, {.device = cpu});  // (n, n)
  const double flops = 2.0 * double(n) * double(n) * double(n);
  return {"n=" + std::to_string(n), [a, b] { mg::matmul(a, b); }, "gflops",
          [flops](double ms) { return flops / (ms * 1e6); }};
}

Prepared elementwise(bool is_add, const mg::Device& cpu) {
  const int64_t n = kElementwiseNumel;
  const Tensor x = mg::randn({n}, {.device = cpu});  // (n)
  const Tensor y = mg::randn({n}, {.device = cpu});  // (n)
  const double bytes = double(n) * sizeof(float) * (is_add ? 3 : 2);
  std::function<void()> fn = is_add ? std::function<void()>([x, y] { mg::add(x, y); })
                                    : std::function<void()>([x] { mg::gelu(x); });
  return {"numel=" + std::to_string(n), fn, "gbps",
          [bytes](double ms) { return bytes / kBytesPerGB / (ms / 1e3); }};
}

// Labels drawn uniformly from [0, classes): the argmax of Gaussian noise.
Tensor random_labels(int64_t rows, int64_t classes, const mg::Device& cpu) {
  return mg::argmax(mg::randn({rows, classes}, {.device = cpu}), 1);
}

Prepared softmax_ce(const mg::Device& cpu) {
  Tensor logits = mg::randn({kSoftmaxRows, kSoftmaxClasses}, {.device = cpu, .requires_grad = true});
  const Tensor targets = random_labels(kSoftmaxRows, kSoftmaxClasses, cpu);  // (rows) Int64
  return {"rows=" + std::to_string(kSoftmaxRows) + " classes=" + std::to_string(kSoftmaxClasses),
          [logits, targets] {
            logits.set_grad(Tensor());
            mg::cross_entropy(logits, targets).backward();
          },
          "rows_per_s", [](double ms) { return double(kSoftmaxRows) / (ms / 1e3); }};
}

// One SGD step of `model` on a fixed random batch of kBatch examples of `example_shape`.
Prepared train_step(std::shared_ptr<mg::nn::Module> model, mg::Shape example_shape, const mg::Device& cpu) {
  mg::Shape shape{kBatch};
  shape.insert(shape.end(), example_shape.begin(), example_shape.end());
  const Tensor x = mg::randn(shape, {.device = cpu});
  const Tensor y = random_labels(kBatch, kClasses, cpu);
  auto sgd = std::make_shared<mg::optim::SGD>(model->parameters(), kSgd);
  return {"batch=" + std::to_string(kBatch) + " sgd(lr=0.1,momentum=0.9)",
          [model, sgd, x, y] {
            sgd->zero_grad();
            mg::cross_entropy(model->forward(x), y).backward();
            sgd->step();
          },
          "samples_per_s", [](double ms) { return double(kBatch) / (ms / 1e3); }};
}

std::vector<Workload> workloads() {
  return {
      {"matmul_256", [](const mg::Device& d) { return matmul(256, d); }},
      {"matmul_1024", [](const mg::Device& d) { return matmul(1024, d); }},
      {"add_16m", [](const mg::Device& d) { return elementwise(true, d); }},
      {"gelu_16m", [](const mg::Device& d) { return elementwise(false, d); }},
      {"softmax_ce", softmax_ce},
      {"mlp_train_step", [](const mg::Device& d) { return train_step(mg::nn::mlp({784, 256, 128, 10}), {784}, d); }},
      {"cnn_train_step", [](const mg::Device& d) { return train_step(mg::nn::fashion_cnn(), {1, 28, 28}, d); }},
  };
}

int usage_error(const std::string& what) {
  std::string names;
  for (const Workload& w : workloads()) names += (names.empty() ? "" : ", ") + w.name;
  std::fprintf(stderr, "bench_workloads: %s (usage: bench_workloads [--quick] [--only NAME]; names: %s)\n",
               what.c_str(), names.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      s = {.quick = true, .warmup = 1, .samples = 3};
    } else if (arg == "--only") {
      if (i + 1 == argc) return usage_error("--only needs a workload name");
      only = argv[++i];
    } else {
      return usage_error("unknown argument '" + arg + "'");
    }
  }
  bool found = only.empty();
  for (const Workload& w : workloads()) found = found || w.name == only;
  if (!found) return usage_error("unknown workload '" + only + "'");

  try {
    mg::manual_seed(0);
    const mg::Device cpu("cpu:0");
    const int threads = mg::cpu_thread_budget(cpu);
    for (const Workload& w : workloads()) {
      if (!only.empty() && w.name != only) continue;
      const Prepared p = w.prepare(cpu);
      const double ms = measure(s, {p.iteration})[0];
      std::printf(R"({"workload": "%s", "config": "%s threads=%d", "ms": %.4g, "throughput": %.4g, )"
                  R"("unit": "%s", "threads": %d})"
                  "\n",
                  w.name.c_str(), p.config.c_str(), threads, ms, p.throughput(ms), p.unit, threads);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_workloads: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
