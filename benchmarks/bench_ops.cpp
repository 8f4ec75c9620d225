// benchmarks/bench_ops.cpp — how close multigrad's core ops come to the machine's own limits.
//
// Each measurement is set beside a baseline doing the same work on the same buffers:
//   CPU  sgemm      mg::matmul                          vs cblas_sgemm           (GFLOP/s)
//   CPU  conv2d     oneDNN (float32's default)          vs im2col + GEMM         (GFLOP/s)
//   CPU  attention  the fused kernels, bf16 inputs      vs float32 inputs        (GFLOP/s)
//   CPU  add, gelu  mg::add / mg::gelu, and the kernel  vs memcpy, same threads  (GB/s)
//   CUDA sgemm      handwritten (MG_GEMM=native)        vs cuBLAS (the default)  (GFLOP/s)
//   CUDA add, gelu  mg::add / mg::gelu, and the kernel  vs a device-to-device copy (GB/s)
// GB/s counts bytes read plus bytes written. "multigrad" rows go through the functional API,
// which allocates its result each call; "kernel" rows call mg::kernels on a preallocated
// output, so the difference between the two is the cost of allocation.
//
// Output: one JSON object per line, e.g.
//   {"bench": "sgemm", "device": "cpu:0", "impl": "multigrad", "config": "n=1024",
//    "ms": 21.3, "gflops": 100.8, "baseline": "cblas_sgemm", "ratio": 0.98}
// ms is the median over samples after warm-up; ratio = this row's rate / the baseline's.
//
// usage: bench_ops [--quick] [--device cpu|cuda]     (default: cpu, and cuda when present)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "multigrad/kernels/attention.h"
#include "multigrad/kernels/conv.h"
#include "multigrad/kernels/cpu/conv_onednn.h"
#include "multigrad/kernels/cpu/gemm_kernel.h"
#include "multigrad/kernels/cpu/matmul_bf16.h"
#include "multigrad/kernels/kernels.h"
#include "multigrad/multigrad.h"

namespace {

using mg::bench::measure;
using mg::bench::now_ms;
using mg::bench::Settings;

constexpr int64_t kElementwiseNumel = int64_t(1) << 24;  // 16M floats = 64 MiB per operand
constexpr double kBytesPerGB = 1e9;

// One JSON line. `rate_key` is "gflops" or "gbps"; a row without a baseline passes ratio < 0.
void report(const std::string& bench, const mg::Device& device, const std::string& impl,
            const std::string& config, double ms, const char* rate_key, double rate,
            const std::string& baseline = "", double ratio = -1) {
  std::printf(R"({"bench": "%s", "device": "%s", "impl": "%s", "config": "%s", "ms": %.4g, "%s": %.1f)",
              bench.c_str(), device.str().c_str(), impl.c_str(), config.c_str(), ms, rate_key, rate);
  if (ratio >= 0) std::printf(R"(, "baseline": "%s", "ratio": %.3f)", baseline.c_str(), ratio);
  std::printf("}\n");
  std::fflush(stdout);
}

double gflops(int64_t n, double ms) { return 2.0 * double(n) * double(n) * double(n) / (ms * 1e6); }
double gbps(int64_t bytes, double ms) { return double(bytes) / kBytesPerGB / (ms / 1e3); }

std::function<void()> sync_of(const mg::Device& device) {
  if (device.is_cpu()) return [] {};
  return [device] { mg::synchronize(device); };
}

// Sets or clears MG_GEMM for the scope, restoring the previous value after.
class GemmEnv {
 public:
  explicit GemmEnv(const char* value) {
    if (const char* old = std::getenv("MG_GEMM")) previous_ = old;
    set(value);
  }
  ~GemmEnv() { set(previous_ ? previous_->c_str() : nullptr); }

 private:
  static void set(const char* value) {
    if (value)
      setenv("MG_GEMM", value, 1);
    else
      unsetenv("MG_GEMM");
  }
  std::optional<std::string> previous_;
};

// ---- CPU ----

void bench_cpu_gemm(const Settings& s, const mg::Device& cpu) {
  const std::vector<int64_t> sizes = s.quick ? std::vector<int64_t>{256, 1024}
                                             : std::vector<int64_t>{256, 512, 1024, 2048};
  for (int64_t n : sizes) {
    const mg::Tensor a = mg::randn({n, n}, {.device = cpu});  // (n, n)
    const mg::Tensor b = mg::randn({n, n}, {.device = cpu});  // (n, n)
    mg::Tensor c = mg::empty({n, n}, {.device = cpu});        // (n, n), cblas output
    mg::kernels::cpu::gemm_kernel();
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* pc = c.data<float>();
    const int ni = int(n);
    // Both sides with the OpenBLAS kernels multigrad chose (kernels/cpu/gemm_kernel.h), named in
    // the config. The baseline is OpenBLAS on its own threads, as many as the device's budget; multigrad runs
    // it single-threaded in blocks on OpenMP threads (kernels/cpu/blas.h) and sets it back to 1.
    const int threads = mg::cpu_thread_budget(cpu);
    const auto ms = measure(s, {[&] {
      openblas_set_num_threads(threads);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.f, pa, ni, pb, ni, 0.f, pc, ni);
    }, [&] { mg::matmul(a, b); }}, sync_of(cpu));
    const double blas_ms = ms[0], our_ms = ms[1];

    const std::string config = "n=" + std::to_string(n) + " kernels=" + mg::kernels::cpu::gemm_kernel().core;
    const double blas_rate = gflops(n, blas_ms), our_rate = gflops(n, our_ms);
    report("sgemm", cpu, "cblas_sgemm", config, blas_ms, "gflops", blas_rate);
    report("sgemm", cpu, "multigrad", config, our_ms, "gflops", our_rate, "cblas_sgemm",
           our_rate / blas_rate);
  }
}

// Forward and both backwards of fashion_cnn's two convolutions (3 x 3, padding 1) at batch 128 on
// the same buffers, through oneDNN and through im2col + GEMM (kernels/cpu/conv_onednn.h). GFLOP/s
// count three GEMM-sized products of 2 N O C 9 H W flops each. Nothing without oneDNN.
void bench_cpu_conv(const Settings& s, const mg::Device& cpu) {
  namespace k = mg::kernels;
  if (k::cpu::conv_library().name.empty()) return;
  constexpr int64_t kBatch = 128;
  struct Layer {
    int64_t in, out, side;
  };
  for (const Layer l : {Layer{1, 32, 28}, Layer{32, 64, 14}}) {
    const mg::Tensor x = mg::randn({kBatch, l.in, l.side, l.side}, {.device = cpu});    // (N, C, H, W)
    const mg::Tensor w = mg::randn({l.out, l.in, 3, 3}, {.device = cpu});              // (O, C, 3, 3)
    const mg::Tensor gy = mg::randn({kBatch, l.out, l.side, l.side}, {.device = cpu});  // (N, O, H, W)
    const mg::Tensor y = mg::empty(gy.shape(), {.device = cpu}), gx = mg::empty(x.shape(), {.device = cpu}),
                     gw = mg::empty(w.shape(), {.device = cpu});
    const k::Conv2dParams same{.padding = {1, 1}};
    auto step = [&](k::cpu::CpuConvAlgorithm algorithm) {
      k::cpu::set_cpu_conv_algorithm(algorithm);
      k::conv2d_forward(x, w, mg::Tensor(), y, same);
      k::conv2d_backward_input(gy, w, gx, same);
      k::conv2d_backward_weight(gy, x, gw, same);
    };
    const auto ms = measure(s, {[&] { step(k::cpu::CpuConvAlgorithm::Im2col); },
                                [&] { step(k::cpu::CpuConvAlgorithm::Auto); }}, sync_of(cpu));
    const double flops = 3 * 2.0 * double(kBatch * l.out * l.in * 9 * l.side * l.side);
    const std::string config = "batch=128 in=" + std::to_string(l.in) + " out=" + std::to_string(l.out) +
                               " hw=" + std::to_string(l.side) + " " + k::cpu::conv_library().isa;
    const double im2col_rate = flops / (ms[0] * 1e6), onednn_rate = flops / (ms[1] * 1e6);
    report("conv2d", cpu, "im2col", config, ms[0], "gflops", im2col_rate);
    report("conv2d", cpu, "onednn", config, ms[1], "gflops", onednn_rate, "im2col", onednn_rate / im2col_rate);
  }
}

// Causal attention's fused kernels, forward and backward (kernels/attention.h), told that their
// inputs hold bf16 values (autocast's attention: bf16 GEMMs where the CPU has them, else float32
// ones on rounded probabilities) against the same kernels in float32, on the same bf16-valued
// inputs. The small GPT's heads (batch 32, 4 heads, 128 tokens, 32 wide) and GPT-2's (one
// sequence of 1024 tokens, 12 heads, 64 wide). GFLOP/s count the seven (T, T, D) products of the
// forward and backward, halved for the causal mask: 7 B H T^2 D flops.
void bench_cpu_attention(const Settings& s, const mg::Device& cpu) {
  namespace k = mg::kernels;
  struct Heads {
    int64_t batch, heads, tokens, width;
  };
  const std::vector<Heads> shapes = s.quick ? std::vector<Heads>{{32, 4, 128, 32}}
                                            : std::vector<Heads>{{32, 4, 128, 32}, {1, 12, 1024, 64}};
  for (const Heads h : shapes) {
    const mg::Shape shape{h.batch, h.heads, h.tokens, h.width};
    std::vector<mg::Tensor> in;  // q, k, v, the output gradient: (B, H, T, D), bf16 values
    for (int i = 0; i < 4; ++i) {
      const mg::Tensor x = mg::randn(shape, {.device = cpu});
      in.push_back(mg::empty(shape, {.device = cpu}));
      k::unary(k::UnaryOp::RoundBFloat16, x, in.back());
    }
    const mg::Tensor out = mg::empty(shape, {.device = cpu});
    const mg::Tensor lse = mg::empty({h.batch, h.heads, h.tokens}, {.device = cpu});
    const mg::Tensor gq = mg::empty(shape, {.device = cpu}), gk = mg::empty(shape, {.device = cpu}),
                     gv = mg::empty(shape, {.device = cpu});
    const double scale = 1.0 / std::sqrt(double(h.width));
    auto step = [&](k::GemmInputs inputs) {
      k::attention_fwd(in[0], in[1], in[2], true, scale, out, lse, inputs);
      k::attention_bwd(in[3], in[0], in[1], in[2], out, lse, true, scale, gq, gk, gv, inputs);
    };
    const auto ms = measure(s, {[&] { step(k::GemmInputs::Float32); }, [&] { step(k::GemmInputs::BFloat16); }},
                            sync_of(cpu));
    const double flops = 7.0 * double(h.batch * h.heads * h.tokens * h.tokens * h.width);
    const std::string config = "B=" + std::to_string(h.batch) + " H=" + std::to_string(h.heads) + " T=" +
                               std::to_string(h.tokens) + " D=" + std::to_string(h.width) +
                               " bf16_gemm=" + k::cpu::bf16_gemm_isa_name();
    const double fp32_rate = flops / (ms[0] * 1e6), bf16_rate = flops / (ms[1] * 1e6);
    report("attention", cpu, "fp32", config, ms[0], "gflops", fp32_rate);
    report("attention", cpu, "bf16", config, ms[1], "gflops", bf16_rate, "fp32", bf16_rate / fp32_rate);
  }
}

// memcpy of `bytes` split into one contiguous chunk per thread of the device's budget, the
// same parallelism the elementwise kernels get.
void parallel_memcpy(char* dst, const char* src, size_t bytes, int threads) {
  std::vector<std::thread> pool;
  const size_t chunk = (bytes + size_t(threads) - 1) / size_t(threads);
  for (int t = 0; t < threads; ++t) {
    const size_t begin = std::min(bytes, size_t(t) * chunk), end = std::min(bytes, begin + chunk);
    pool.emplace_back([=] { std::memcpy(dst + begin, src + begin, end - begin); });
  }
  for (auto& th : pool) th.join();
}

// ---- elementwise, on either device ----

// add and gelu on 16M floats through the functional API and through the kernels, each
// against a plain copy of 16M floats on the same device.
void bench_elementwise(const Settings& s, const mg::Device& device) {
  const int64_t n = kElementwiseNumel;
  const mg::Tensor x = mg::randn({n}, {.device = device});  // (n)
  const mg::Tensor y = mg::randn({n}, {.device = device});  // (n)
  const mg::Tensor out = mg::empty({n}, {.device = device});  // (n), for the kernel rows
  const int64_t bytes = n * int64_t(sizeof(float));

  std::function<void()> copy;
  std::string copy_name;
  if (device.is_cpu()) {
    const int threads = mg::cpu_thread_budget(device);
    auto* dst = static_cast<char*>(out.data_ptr());
    const auto* src = static_cast<const char*>(x.data_ptr());
    copy = [=] { parallel_memcpy(dst, src, size_t(bytes), threads); };
    copy_name = "memcpy";
  } else {
    copy = [&] { x.clone(); };
    copy_name = "device_copy";
  }

  struct Row {
    const char* bench;
    const char* impl;
    int64_t traffic;  // bytes read + written
    std::function<void()> fn;
  };
  using mg::kernels::BinaryOp, mg::kernels::UnaryOp;
  const std::vector<Row> rows = {
      {"copy", copy_name.c_str(), 2 * bytes, copy},
      {"add", "multigrad", 3 * bytes, [&] { mg::add(x, y); }},
      {"add", "kernel", 3 * bytes, [&] { mg::kernels::binary(BinaryOp::Add, x, y, out); }},
      {"gelu", "multigrad", 2 * bytes, [&] { mg::gelu(x); }},
      {"gelu", "kernel", 2 * bytes, [&] { mg::kernels::unary(UnaryOp::Gelu, x, out); }},
  };
  std::vector<std::function<void()>> fns;
  for (const Row& r : rows) fns.push_back(r.fn);
  const std::vector<double> ms = measure(s, fns, sync_of(device));

  const std::string config = "numel=" + std::to_string(n);
  const double copy_rate = gbps(rows[0].traffic, ms[0]);
  report(rows[0].bench, device, rows[0].impl, config, ms[0], "gbps", copy_rate);
  for (size_t i = 1; i < rows.size(); ++i) {
    const double rate = gbps(rows[i].traffic, ms[i]);
    report(rows[i].bench, device, rows[i].impl, config, ms[i], "gbps", rate, copy_name,
           rate / copy_rate);
  }
}

// ---- CUDA ----

void bench_cuda_gemm(const Settings& s, const mg::Device& gpu) {
  const std::vector<int64_t> sizes = s.quick ? std::vector<int64_t>{1024, 4096}
                                             : std::vector<int64_t>{1024, 2048, 4096};
  for (int64_t n : sizes) {
    const mg::Tensor a = mg::randn({n, n}, {.device = gpu});  // (n, n)
    const mg::Tensor b = mg::randn({n, n}, {.device = gpu});  // (n, n)
    // MG_GEMM is read at each call, so the two paths can alternate sample by sample.
    const auto ms = measure(s, {[&] {
      GemmEnv env(nullptr);
      mg::matmul(a, b);
    }, [&] {
      GemmEnv env("native");
      mg::matmul(a, b);
    }}, sync_of(gpu));
    const std::string config = "n=" + std::to_string(n);
    const double cublas_rate = gflops(n, ms[0]), native_rate = gflops(n, ms[1]);
    report("sgemm", gpu, "cublas", config, ms[0], "gflops", cublas_rate);
    report("sgemm", gpu, "native", config, ms[1], "gflops", native_rate, "cublas",
           native_rate / cublas_rate);
  }
}

int usage_error(const std::string& what) {
  std::fprintf(stderr, "bench_ops: %s (usage: bench_ops [--quick] [--device cpu|cuda])\n", what.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  std::string only;  // "", "cpu" or "cuda"
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      s = {.quick = true, .warmup = 1, .samples = 3};
    } else if (arg == "--device") {
      if (i + 1 == argc) return usage_error("--device needs cpu or cuda");
      only = argv[++i];
      if (only != "cpu" && only != "cuda") return usage_error("unknown device '" + only + "'");
    } else {
      return usage_error("unknown argument '" + arg + "'");
    }
  }

  try {
    mg::manual_seed(0);
    const bool has_cuda = mg::device_count(mg::DeviceType::CUDA) > 0;
    if (only == "cuda" && !has_cuda) {
      std::fprintf(stderr, "bench_ops: --device cuda: no CUDA devices (%s)\n",
                   mg::cuda_unavailable_reason().c_str());
      return 1;
    }
    if (only != "cuda") {
      const mg::Device cpu("cpu:0");
      bench_cpu_gemm(s, cpu);
      bench_cpu_conv(s, cpu);
      bench_cpu_attention(s, cpu);
      bench_elementwise(s, cpu);
    }
    if (only != "cpu" && has_cuda) {
      const mg::Device gpu("cuda:0");
      bench_cuda_gemm(s, gpu);
      bench_elementwise(s, gpu);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
