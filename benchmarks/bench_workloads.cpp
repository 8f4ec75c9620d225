// benchmarks/bench_workloads.cpp — the multigrad side of the PyTorch comparison (issue 7).
//
// Each workload does exactly what its twin in benchmarks/torch/workloads.py does: the same
// shapes, float32, the same optimizer settings, on one device. --device cpu (the default) runs
// on cpu:0 with the device's thread budget (hardware threads / CPU devices;
// scripts/bench-vs-torch.sh gives PyTorch the same count); --device cuda runs on cuda:0.
//   matmul_256, matmul_1024  mg::matmul of two (n, n) matrices                       GFLOP/s
//   matmul_4096              the same, cuda only (137 GFLOP: seconds on a CPU)
//   add_16m, gelu_16m        mg::add / mg::gelu (tanh) on 16M floats, result allocated  GB/s
//   add_256m, gelu_256m      the same on 256M floats (1 GiB per operand), cuda only
//   softmax_ce               cross_entropy of (4096, 1000) logits, forward + backward  rows/s
//   mlp_train_step           mlp 784-256-128-10, batch 128: zero_grad, forward,     samples/s
//                            cross-entropy, backward, SGD(lr 0.1, momentum 0.9) step
//   cnn_train_step           fashion_cnn (nn/models.cpp), batch 128, the same step  samples/s
//   mlp_train_step_b1024,    the two steps at batch 1024, cuda only (issue 9): batch  samples/s
//   cnn_train_step_b1024     128 leaves a GPU mostly waiting on kernel launches
//   gpt_train_step           nn::gpt_config("small", 256) (4 layers, 4 heads, 128   tokens/s
//                            wide, context 128) on 32 random windows of byte ids:
//                            zero_grad, forward, cross-entropy over every position,
//                            backward, AdamW(lr 1e-3, weight decay 1e-2 on the 2-D
//                            parameters only) step: `multigrad train --model gpt`'s step
//   gpt_train_step_bf16      the same under bf16 autocast (autograd/autocast.h;      tokens/s
//                            torch.autocast(dtype=torch.bfloat16)): multigrad's is
//                            emulated in float32, PyTorch's runs bf16 kernels
//   gpt2_train_step,         the same step of GPT-2 124M: nn::gpt_config("gpt2",     tokens/s
//   gpt2_train_step_bf16     50257) (12 layers, 12 heads, 768 wide, context 1024,
//                            GPT-2's vocabulary) on random token ids, batch 2 on a
//                            CPU and 16 on CUDA (--batch sets it), fp32 and bf16
//   conv2d                   fashion_cnn's second conv layer, Conv2d(32, 64, 3,      GFLOP/s
//                            padding 1, no bias) on (128, 32, 14, 14): forward and
//                            backward from a fixed random output gradient, input and
//                            weight requiring grad
//   dataloader               one epoch of data::DataLoader over a TensorDataset of   images/s
//                            60000 random (1, 28, 28) images in [0, 1) and Int64
//                            labels: batch 128, shuffle, num_workers 0 (the
//                            default: batches assembled on the calling thread);
//                            cpu only
//   ddp2_mlp_step            the mlp_train_step on cpu:0 and cpu:1 under             samples/s
//                            DistributedDataParallel (local backend, one thread per
//                            rank, 64 examples each, default buckets), timed on rank
//                            0; cpu only
// GB/s counts bytes read plus bytes written (add: 12 bytes per element, gelu: 8). conv2d's
// GFLOP/s counts three GEMMs of 2·N·O·C·k²·H·W flops each (forward, input and weight gradients).
// ddp2_mlp_step's "threads" is the total over its ranks: each CPU device's budget is hardware
// threads / 2, so on a 2-core machine each rank has 1 thread (torch: threads // 2 per process).
//
// On CUDA:
// - A sample ends with mg::synchronize(cuda:0), so it times the kernels, not their queueing
//   (bench_util.h's measure; every op here runs on the thread's current stream).
// - 16M floats (64 MiB per operand) already spill the GPU's L2 (about 50 MB on an H100 or
//   H200), but a kernel then lasts tens of microseconds, so launch overhead and the ramp at
//   either end weigh in; the 256M variants last about a millisecond and read the steady DRAM
//   bandwidth.
// - Float32 matmul and conv run without TF32 (kernels/cuda/matmul.cu, conv.cu); the twin turns
//   TF32 off in PyTorch to match.
// - dataloader is not run: it measures host work (a shuffle and row gathers in host memory),
//   which the cpu run already covers. ddp2_mlp_step is not run either: on one GPU its two ranks
//   would be logical devices (MG_CUDA_LOGICAL_DEVICES) of the local backend, which synchronizes
//   the GPU before each all-reduce (parallel/README.md: correct, not fast), and PyTorch's NCCL
//   refuses two ranks on one GPU, so neither side would measure a data-parallel step.
// The SGEMM kernels (handwritten, MG_GEMM=native, against cuBLAS) and elementwise GB/s against
// a device-to-device copy are bench_ops --device cuda's rows (docs/benchmarks.md); not
// repeated here.
//
// Output: one JSON object per workload, e.g.
//   {"workload": "matmul_1024", "config": "n=1024 threads=2", "ms": 21.3,
//    "throughput": 100.8, "unit": "gflops", "device": "cpu:0", "threads": 2}
// (on CUDA the config ends with "device=cuda:0" and there is no "threads": host threads do not
// set the pace of queued kernels). ms is the median time of one iteration over samples after
// warm-up (bench_util.h's measure; ddp2_mlp_step: the same on rank 0, with every rank running
// the same steps). The GPT rows add "flops_per_token" (nn::GPT::flops_per_token, for MFU) and
// "peak_bytes" (the device's peak allocation over the workload).
//
// usage: bench_workloads [--quick] [--device cpu|cuda] [--only NAME] [--batch N] [--gpt2-config NAME]
//                        [--kernel-times] [--list]
//   --list prints the names of the device's workloads, one a line (scripts/bench-vs-torch.sh).
//   --batch N sets the GPT-2 workloads' batch, --gpt2-config their layout (nn::gpt_config's
//   names, GPT-2's vocabulary kept: tiny for a rehearsal on the CUDA simulator).
//   --kernel-times (CUDA) then runs kKernelTimeIterations more iterations with kernel timing on
//   (kernels/kernel_times.h) and prints, per kernel, one object
//     {"workload": ..., "family": "attention", "kernel": "attention_fwd_kernel",
//      "launches": 24, "ms": 31.2}
//   with launches and ms per iteration: where the step's time goes, from steps that were not timed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "multigrad/multigrad.h"

namespace {

using mg::Tensor;
using mg::bench::measure;
using mg::bench::Settings;

constexpr int64_t kElementwiseNumel = int64_t(1) << 24;  // 16M floats = 64 MiB per operand
constexpr int64_t kLargeElementwiseNumel = int64_t(1) << 28;  // 256M floats = 1 GiB per operand
constexpr int64_t kSoftmaxRows = 4096, kSoftmaxClasses = 1000;
constexpr int64_t kBatch = 128;
constexpr int64_t kLargeBatch = 1024;  // enough rows to keep a GPU's multiprocessors busy
constexpr int64_t kClasses = 10;  // Fashion-MNIST
const mg::optim::SGDOptions kSgd{.lr = 0.1, .momentum = 0.9};
constexpr double kBytesPerGB = 1e9;
// fashion_cnn's second conv layer: its input is the first layer's output after one 2x2 pool.
constexpr int64_t kConvIn = 32, kConvOut = 64, kConvKernel = 3, kConvSide = 14;
constexpr int64_t kLoaderImages = 60000;  // Fashion-MNIST's training split
constexpr int kDdpRanks = 2;
// `multigrad train --model gpt`'s defaults: the small config on bytes, 32 windows a step, AdamW.
constexpr int64_t kGptVocab = 256, kGptBatch = 32;
const mg::optim::AdamWOptions kGptAdamW{.lr = 1e-3, .weight_decay = 1e-2};
// GPT-2 124M: its layout with its BPE vocabulary. Batch 2 keeps a CPU step near 7 s on 2 cores;
// 16 x 1024 tokens is the step issue 44's H100 estimate is for, and fits 80 GB with room.
constexpr int64_t kGpt2Vocab = 50257, kGpt2BatchCpu = 2, kGpt2BatchCuda = 16;
// Iterations timed kernel by kernel after the measured ones (--kernel-times).
constexpr int kKernelTimeIterations = 2;

// What one workload prepares once and then runs per iteration, and how to turn the time of one
// iteration into its throughput.
struct Prepared {
  std::string config;
  std::function<void()> iteration;
  const char* unit;
  std::function<double(double ms)> throughput;
  // Set instead of `iteration` by a workload that times itself (several ranks): ms per iteration.
  std::function<double(const Settings&)> timed;
  double flops_per_token = 0;  // the GPT workloads': their row reports it
};

// Which --device a workload runs on (the header says why some run on one only).
enum class RunsOn { Both, CpuOnly, CudaOnly };

// --batch and --gpt2-config, set by main before any workload is prepared: the GPT-2 workloads'
// batch (0: kGpt2BatchCpu or kGpt2BatchCuda by device) and layout (scripts/gpu-check.sh's
// rehearsal runs "tiny" on the simulator).
int64_t gpt2_batch_flag = 0;
std::string gpt2_config_flag = "gpt2";

struct Workload {
  std::string name;
  RunsOn runs_on;
  std::function<Prepared(const mg::Device&)> prepare;

  bool runs_on_device(mg::DeviceType type) const {
    return runs_on == RunsOn::Both || (runs_on == RunsOn::CpuOnly) == (type == mg::DeviceType::CPU);
  }
};

Prepared matmul(int64_t n, const mg::Device& device) {
  const Tensor a = mg::randn({n, n}, {.device = device});  // (n, n)
  const Tensor b = mg::randn({n, n}, {.device = device});  // (n, n)
  const double flops = 2.0 * double(n) * double(n) * double(n);
  return {"n=" + std::to_string(n), [a, b] { mg::matmul(a, b); }, "gflops",
          [flops](double ms) { return flops / (ms * 1e6); }};
}

Prepared elementwise(bool is_add, int64_t n, const mg::Device& device) {
  const Tensor x = mg::randn({n}, {.device = device});  // (n)
  const Tensor y = mg::randn({n}, {.device = device});  // (n)
  const double bytes = double(n) * sizeof(float) * (is_add ? 3 : 2);
  std::function<void()> fn = is_add ? std::function<void()>([x, y] { mg::add(x, y); })
                                    : std::function<void()>([x] { mg::gelu(x); });
  return {"numel=" + std::to_string(n), fn, "gbps",
          [bytes](double ms) { return bytes / kBytesPerGB / (ms / 1e3); }};
}

// Labels drawn uniformly from [0, classes): the argmax of Gaussian noise.
Tensor random_labels(int64_t rows, int64_t classes, const mg::Device& device) {
  return mg::argmax(mg::randn({rows, classes}, {.device = device}), 1);
}

Prepared softmax_ce(const mg::Device& device) {
  Tensor logits = mg::randn({kSoftmaxRows, kSoftmaxClasses}, {.device = device, .requires_grad = true});
  const Tensor targets = random_labels(kSoftmaxRows, kSoftmaxClasses, device);  // (rows) Int64
  return {"rows=" + std::to_string(kSoftmaxRows) + " classes=" + std::to_string(kSoftmaxClasses),
          [logits, targets] {
            logits.set_grad(Tensor());
            mg::cross_entropy(logits, targets).backward();
          },
          "rows_per_s", [](double ms) { return double(kSoftmaxRows) / (ms / 1e3); }};
}

// One SGD step of `model` on a fixed random batch of `batch` examples of `example_shape`.
Prepared train_step(std::shared_ptr<mg::nn::Module> model, mg::Shape example_shape, int64_t batch,
                    const mg::Device& device) {
  mg::Shape shape{batch};
  shape.insert(shape.end(), example_shape.begin(), example_shape.end());
  model->to(device);
  const Tensor x = mg::randn(shape, {.device = device});
  const Tensor y = random_labels(batch, kClasses, device);
  auto sgd = std::make_shared<mg::optim::SGD>(model->parameters(), kSgd);
  return {"batch=" + std::to_string(batch) + " sgd(lr=0.1,momentum=0.9)",
          [model, sgd, x, y] {
            sgd->zero_grad();
            mg::cross_entropy(model->forward(x), y).backward();
            sgd->step();
          },
          "samples_per_s", [batch](double ms) { return double(batch) / (ms / 1e3); }};
}

Prepared gpt_train_step(const mg::Device& device, mg::Precision precision, const std::string& config, int64_t vocab,
                        int64_t batch) {
  auto model = mg::nn::gpt(mg::nn::gpt_config(config, vocab));
  model->to(device);
  const int64_t context = model->config().context, tokens = batch * context;
  const Tensor x = random_labels(tokens, vocab, device).reshape({batch, context});  // (B, T) Int64
  const Tensor y = random_labels(tokens, vocab, device);                            // (B T) Int64
  auto adamw = std::make_shared<mg::optim::AdamW>(
      mg::optim::weight_decay_groups(model->parameters(), kGptAdamW.weight_decay), kGptAdamW);
  Prepared p{"config=" + config + " batch=" + std::to_string(batch) + " context=" + std::to_string(context) +
                 " adamw(lr=0.001,weight_decay=0.01) precision=" + mg::precision_name(precision),
             [model, adamw, x, y, tokens, vocab, precision] {
               adamw->zero_grad();
               Tensor loss;
               {
                 const mg::AutocastGuard autocast(precision);
                 loss = mg::cross_entropy(model->forward(x).reshape({tokens, vocab}), y);
               }
               loss.backward();
               adamw->step();
             },
             "tokens_per_s", [tokens](double ms) { return double(tokens) / (ms / 1e3); }};
  p.flops_per_token = model->flops_per_token();
  return p;
}

Prepared gpt2_train_step(const mg::Device& device, mg::Precision precision) {
  const int64_t batch = gpt2_batch_flag > 0 ? gpt2_batch_flag : device.is_cuda() ? kGpt2BatchCuda : kGpt2BatchCpu;
  return gpt_train_step(device, precision, gpt2_config_flag, kGpt2Vocab, batch);
}

Prepared conv2d(const mg::Device& device) {
  const mg::TensorOptions leaf{.device = device, .requires_grad = true};
  const Tensor x = mg::randn({kBatch, kConvIn, kConvSide, kConvSide}, leaf);        // (B, 32, 14, 14)
  const Tensor w = mg::randn({kConvOut, kConvIn, kConvKernel, kConvKernel}, leaf);  // (64, 32, 3, 3)
  const Tensor grad_out = mg::randn({kBatch, kConvOut, kConvSide, kConvSide}, {.device = device});  // (B, 64, 14, 14)
  const mg::Conv2dOptions same{.padding = {1, 1}};  // 14x14 in, 14x14 out
  const double gemm_flops =
      2.0 * double(kBatch * kConvOut * kConvIn * kConvKernel * kConvKernel * kConvSide * kConvSide);
  return {"batch=" + std::to_string(kBatch) + " in=32 out=64 k=3 hw=14 padding=1",
          [x, w, grad_out, same] {
            x.set_grad(Tensor());
            w.set_grad(Tensor());
            mg::backward({mg::conv2d(x, w, Tensor(), same)}, {grad_out});
          },
          "gflops", [gemm_flops](double ms) { return 3 * gemm_flops / (ms * 1e6); }};
}

// One iteration is one whole epoch (469 batches, the last of 96), its shuffle included.
Prepared dataloader(const mg::Device& device) {
  auto dataset = std::make_shared<const mg::data::TensorDataset>(
      mg::rand({kLoaderImages, 1, 28, 28}, {.device = device}),  // (60000, 1, 28, 28), like scaled pixels
      random_labels(kLoaderImages, kClasses, device));          // (60000) Int64
  auto loader = std::make_shared<mg::data::DataLoader>(
      dataset, mg::data::DataLoaderOptions{.batch_size = kBatch, .shuffle = true, .device = device});
  return {"images=" + std::to_string(kLoaderImages) + " batch=" + std::to_string(kBatch) + " shuffle workers=0",
          [loader, epoch = int64_t(0)]() mutable {
            loader->start_epoch(epoch++);
            while (loader->next()) {
            }
          },
          "images_per_s", [](double ms) { return double(kLoaderImages) / (ms / 1e3); }};
}

// bench_util.h's measure for a step that runs collectives, so every rank must run it equally
// often: rank 0 sizes the samples and broadcasts the calls per sample. Returns this rank's median.
double measure_on_ranks(const Settings& s, mg::parallel::Communicator& comm, const std::function<void()>& step) {
  for (int i = 0; i < s.warmup; ++i) step();
  const double t0 = mg::bench::now_ms();
  step();
  const Tensor calls = mg::full({1}, mg::bench::calls_for(mg::bench::now_ms() - t0), {.device = comm.device()});
  comm.broadcast(calls, 0)->wait();
  const int n = int(calls.item<float>());
  std::vector<double> per_call;
  for (int i = 0; i < s.samples; ++i) {
    const double t1 = mg::bench::now_ms();
    for (int c = 0; c < n; ++c) step();
    per_call.push_back((mg::bench::now_ms() - t1) / n);
  }
  return mg::bench::median(per_call);
}

// Splits the CPU into kDdpRanks devices (main restores the count for the next workload). Each
// rank trains its replica on its own fixed random kBatch / kDdpRanks examples; DDP averages the
// gradients (ReduceOp::Avg, PyTorch's default), so a step matches one over the global batch.
Prepared ddp2_mlp_step(const mg::Device&) {
  mg::set_cpu_device_count(kDdpRanks);
  std::vector<mg::Device> devices;
  for (int r = 0; r < kDdpRanks; ++r) devices.emplace_back(mg::DeviceType::CPU, r);
  struct Replica {
    std::shared_ptr<mg::nn::Module> model;
    Tensor x, y;  // (64, 784) Float32, (64) Int64
  };
  auto replicas = std::make_shared<std::vector<Replica>>();
  const int64_t rows = kBatch / kDdpRanks;
  for (const mg::Device& d : devices) {
    auto model = std::shared_ptr<mg::nn::Module>(mg::nn::mlp({784, 256, 128, 10}));
    model->to(d);
    replicas->push_back({model, mg::randn({rows, 784}, {.device = d}), random_labels(rows, kClasses, d)});
  }
  Prepared p{"global_batch=" + std::to_string(kBatch) + " ranks=" + std::to_string(kDdpRanks) +
                 " threads_per_rank=" + std::to_string(mg::cpu_thread_budget(devices[0])) +
                 " sgd(lr=0.1,momentum=0.9)",
             nullptr, "samples_per_s", [](double ms) { return double(kBatch) / (ms / 1e3); }};
  p.timed = [devices, replicas](const Settings& s) {
    double rank0_ms = 0;
    mg::parallel::run_ranks(devices, [&](mg::parallel::Communicator& comm) {
      const Replica& r = (*replicas)[size_t(comm.rank())];
      mg::parallel::DistributedDataParallel ddp(r.model, comm);
      mg::optim::SGD sgd(ddp.parameters(), kSgd);
      const double ms = measure_on_ranks(s, comm, [&] {
        sgd.zero_grad();
        mg::cross_entropy(ddp.forward(r.x), r.y).backward();
        sgd.step();
      });
      if (comm.rank() == 0) rank0_ms = ms;
    });
    return rank0_ms;
  };
  return p;
}

std::shared_ptr<mg::nn::Module> mlp() { return mg::nn::mlp({784, 256, 128, 10}); }

std::vector<Workload> workloads() {
  using enum RunsOn;
  return {
      {"matmul_256", Both, [](const mg::Device& d) { return matmul(256, d); }},
      {"matmul_1024", Both, [](const mg::Device& d) { return matmul(1024, d); }},
      {"matmul_4096", CudaOnly, [](const mg::Device& d) { return matmul(4096, d); }},
      {"add_16m", Both, [](const mg::Device& d) { return elementwise(true, kElementwiseNumel, d); }},
      {"gelu_16m", Both, [](const mg::Device& d) { return elementwise(false, kElementwiseNumel, d); }},
      {"add_256m", CudaOnly, [](const mg::Device& d) { return elementwise(true, kLargeElementwiseNumel, d); }},
      {"gelu_256m", CudaOnly, [](const mg::Device& d) { return elementwise(false, kLargeElementwiseNumel, d); }},
      {"softmax_ce", Both, softmax_ce},
      {"mlp_train_step", Both, [](const mg::Device& d) { return train_step(mlp(), {784}, kBatch, d); }},
      {"cnn_train_step", Both,
       [](const mg::Device& d) { return train_step(mg::nn::fashion_cnn(), {1, 28, 28}, kBatch, d); }},
      {"mlp_train_step_b1024", CudaOnly, [](const mg::Device& d) { return train_step(mlp(), {784}, kLargeBatch, d); }},
      {"cnn_train_step_b1024", CudaOnly,
       [](const mg::Device& d) { return train_step(mg::nn::fashion_cnn(), {1, 28, 28}, kLargeBatch, d); }},
      {"conv2d", Both, conv2d},
      {"gpt_train_step", Both,
       [](const mg::Device& d) {
         return gpt_train_step(d, mg::Precision::Float32, "small", kGptVocab, kGptBatch);
       }},
      {"gpt_train_step_bf16", Both,
       [](const mg::Device& d) {
         return gpt_train_step(d, mg::Precision::BFloat16, "small", kGptVocab, kGptBatch);
       }},
      {"gpt2_train_step", Both,
       [](const mg::Device& d) { return gpt2_train_step(d, mg::Precision::Float32); }},
      {"gpt2_train_step_bf16", Both,
       [](const mg::Device& d) { return gpt2_train_step(d, mg::Precision::BFloat16); }},
      {"dataloader", CpuOnly, dataloader},
      {"ddp2_mlp_step", CpuOnly, ddp2_mlp_step},
  };
}

// --kernel-times: kKernelTimeIterations more iterations with kernel timing on, one line per kernel
// with its launches and milliseconds per iteration.
void print_kernel_times(const std::string& workload, const std::function<void()>& iteration,
                        const std::function<void()>& sync) {
  sync();
  mg::set_kernel_timing(true);
  mg::take_kernel_times();
  for (int i = 0; i < kKernelTimeIterations; ++i) iteration();
  sync();
  const std::vector<mg::KernelTime> times = mg::take_kernel_times();
  mg::set_kernel_timing(false);
  for (const mg::KernelTime& t : times) {
    std::printf(R"({"workload": "%s", "family": "%s", "kernel": "%s", "launches": %.4g, "ms": %.4g})"
                "\n",
                workload.c_str(), t.family.c_str(), t.kernel.c_str(), double(t.launches) / kKernelTimeIterations,
                t.ms / kKernelTimeIterations);
  }
  std::fflush(stdout);
}

int usage_error(const std::string& what) {
  std::string names;
  for (const Workload& w : workloads()) names += (names.empty() ? "" : ", ") + w.name;
  std::fprintf(stderr,
               "bench_workloads: %s (usage: bench_workloads [--quick] [--device cpu|cuda] [--only NAME] [--batch N] "
               "[--gpt2-config NAME] [--kernel-times] [--list]; "
               "names: %s)\n",
               what.c_str(), names.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  std::string only, device_name = "cpu";
  bool list = false, kernel_times = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      s = {.quick = true, .warmup = 1, .samples = 3};
    } else if (arg == "--device") {
      if (i + 1 == argc) return usage_error("--device needs cpu or cuda");
      device_name = argv[++i];
      if (device_name != "cpu" && device_name != "cuda") return usage_error("unknown device '" + device_name + "'");
    } else if (arg == "--only") {
      if (i + 1 == argc) return usage_error("--only needs a workload name");
      only = argv[++i];
    } else if (arg == "--list") {
      list = true;
    } else if (arg == "--kernel-times") {
      kernel_times = true;
    } else if (arg == "--gpt2-config") {
      if (i + 1 == argc) return usage_error("--gpt2-config needs a layout (tiny, small or gpt2)");
      gpt2_config_flag = argv[++i];
    } else if (arg == "--batch") {
      if (i + 1 == argc) return usage_error("--batch needs a positive number");
      const std::string value = argv[++i];
      char* end = nullptr;
      gpt2_batch_flag = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || gpt2_batch_flag <= 0)
        return usage_error("--batch needs a positive number, got '" + value + "'");
    } else {
      return usage_error("unknown argument '" + arg + "'");
    }
  }
  const mg::DeviceType type = device_name == "cuda" ? mg::DeviceType::CUDA : mg::DeviceType::CPU;
  if (kernel_times && type != mg::DeviceType::CUDA) return usage_error("--kernel-times times CUDA kernels: add --device cuda");
  if (!only.empty()) {
    const std::vector<Workload> all = workloads();
    const auto w = std::find_if(all.begin(), all.end(), [&](const Workload& w) { return w.name == only; });
    if (w == all.end()) return usage_error("unknown workload '" + only + "'");
    if (!w->runs_on_device(type)) {
      std::fprintf(stderr,
                   "bench_workloads: %s does not run with --device %s (bench_workloads.cpp's header says why)\n",
                   only.c_str(), device_name.c_str());
      return 2;
    }
  }
  if (list) {
    for (const Workload& w : workloads()) {
      if (w.runs_on_device(type)) std::printf("%s\n", w.name.c_str());
    }
    return 0;
  }

  try {
    if (type == mg::DeviceType::CUDA && mg::device_count(mg::DeviceType::CUDA) == 0) {
      std::fprintf(stderr, "bench_workloads: --device cuda: no CUDA devices (%s)\n",
                   mg::cuda_unavailable_reason().c_str());
      return 1;
    }
    mg::manual_seed(0);
    const mg::Device device(type, 0);
    std::function<void()> sync = [] {};
    if (device.is_cuda()) sync = [device] { mg::synchronize(device); };
    // What the row says about where it ran: the CPU's thread budget, or the GPU.
    const std::string where = device.is_cpu() ? "threads=" + std::to_string(mg::cpu_thread_budget(device))
                                              : "device=" + device.str();
    const std::string threads_key =
        device.is_cpu() ? R"(, "threads": )" + std::to_string(mg::cpu_thread_budget(device)) : "";
    const int cpu_devices = mg::device_count(mg::DeviceType::CPU);  // ddp2_mlp_step changes it
    for (const Workload& w : workloads()) {
      if (!w.runs_on_device(type) || (!only.empty() && w.name != only)) continue;
      mg::set_cpu_device_count(cpu_devices);
      mg::reset_peak_memory_stats(device);
      const Prepared p = w.prepare(device);
      const double ms = p.timed ? p.timed(s) : measure(s, {p.iteration}, sync)[0];
      std::string gpt_keys;
      if (p.flops_per_token > 0) {
        char keys[128];
        std::snprintf(keys, sizeof keys, R"(, "flops_per_token": %.6g, "peak_bytes": %lld)", p.flops_per_token,
                      static_cast<long long>(mg::memory_stats(device).peak));
        gpt_keys = keys;
      }
      std::printf(R"({"workload": "%s", "config": "%s %s", "ms": %.4g, "throughput": %.4g, )"
                  R"("unit": "%s", "device": "%s"%s%s})"
                  "\n",
                  w.name.c_str(), p.config.c_str(), where.c_str(), ms, p.throughput(ms), p.unit,
                  device.str().c_str(), threads_key.c_str(), gpt_keys.c_str());
      std::fflush(stdout);
      if (kernel_times && p.iteration) print_kernel_times(w.name, p.iteration, sync);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_workloads: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
