// tests/cuda/test_cuda_norm.cpp — the fused batch- and layer-norm kernels (kernels/cuda/norm.cu)
// called directly on cuda:0 against the CPU kernels (kernels/cpu/norm.cpp) on the same inputs:
// statistics, forward and backward with batch and running statistics, with and without weight
// and bias, S = 1, odd S, many channels and long channels, Float32 and Float64; layer norm with
// rows shorter and longer than a warp, a row count that leaves a block's warps idle, and only
// some gradients asked for. (batch_norm and layer_norm through autograd are in
// test_cuda_nn_ops.cpp.)
//
// Tolerances: both backends sum in float64 but in different orders (a block's tree against
// the CPU's planes in order), and nvcc contracts a * b + c into one FMA: Float64 agrees to
// 1e-10, Float32 to a few ulps of the values, and of 1 for the centred grad_x (atol 1e-5).
// Layer norm's grad_weight and grad_bias are summed in the CPU's order with unfused multiply-adds
// (kernels/norm.h), so from the same statistics they are the CPU's bits: compared exactly, with
// row counts that end in a partial block of kLayerNormRowBlock rows and that span many blocks.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "multigrad/kernels/norm.h"

using namespace mg;
using namespace mg::test;
namespace k = mg::kernels;

namespace {

constexpr double kEps = 1e-5;

// Every output of stats (batch statistics only), forward and the full backward on `device`.
struct NormRun {
  Tensor mean, var, y, gx, gw, gb;
};

NormRun run_norm(const Tensor& x, const Tensor& g, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                 const Tensor& running_var, bool batch_stats, const Device& device) {
  auto on = [&](const Tensor& t) { return t.defined() ? t.to(device) : Tensor(); };
  const TensorOptions opt{.dtype = x.dtype(), .device = device};
  const int64_t c = x.size(1);
  const Tensor xd = on(x), gd = on(g), wd = on(weight), bd = on(bias);
  NormRun r;
  if (batch_stats) {
    r.mean = Tensor::empty({c}, opt);
    r.var = Tensor::empty({c}, opt);
    k::batch_norm_stats(xd, r.mean, r.var);
  } else {
    r.mean = on(running_mean);
    r.var = on(running_var);
  }
  r.y = Tensor::empty(x.shape(), opt);
  k::batch_norm_forward(xd, r.mean, r.var, wd, bd, kEps, r.y);
  r.gx = Tensor::empty(x.shape(), opt);
  r.gw = Tensor::empty({c}, opt);
  r.gb = Tensor::empty({c}, opt);
  k::batch_norm_backward(gd, xd, r.mean, r.var, wd, kEps, batch_stats, r.gx, r.gw, r.gb);
  return r;
}

}  // namespace

TEST_CASE("cuda: batch-norm kernels match the CPU", "[cuda]") {
  // S > 1; S = 1 ((N, C) input); an odd S shorter than a warp; a long channel (many loop trips
  // per thread); many short channels.
  const std::vector<Shape> shapes{{4, 3, 5, 7}, {37, 5}, {3, 2, 17}, {64, 3, 33, 31}, {2, 300, 3}};
  for (const Shape& shape : shapes)
    for (DType dtype : {DType::Float32, DType::Float64})
      for (bool batch_stats : {true, false})
        for (int affine = 0; affine < 4; ++affine) {
          const bool with_w = (affine & 1) != 0, with_b = (affine & 2) != 0;
          INFO("shape " << to_string(shape) << " " << dtype << (batch_stats ? " batch" : " running")
                        << " statistics, weight " << with_w << ", bias " << with_b);
          const int64_t c = shape[1];
          const Tensor x = cpu_input(shape, dtype, 21, 2.0) + 3.0;  // a mean far from 0
          const Tensor g = cpu_input(shape, dtype, 22);
          const Tensor w = with_w ? cpu_input({c}, dtype, 23) : Tensor();
          const Tensor b = with_b ? cpu_input({c}, dtype, 24) : Tensor();
          const Tensor running_mean = cpu_input({c}, dtype, 25);
          const Tensor running_var = cpu_input({c}, dtype, 26) * cpu_input({c}, dtype, 26) + 0.5;
          const NormRun want = run_norm(x, g, w, b, running_mean, running_var, batch_stats, Device("cpu"));
          const NormRun got = run_norm(x, g, w, b, running_mean, running_var, batch_stats, gpu());
          const double rtol = dtype == DType::Float32 ? 1e-5 : 1e-10, atol = dtype == DType::Float32 ? 1e-5 : 1e-12;
          const std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> outputs{
              {"mean", {got.mean, want.mean}}, {"var", {got.var, want.var}}, {"y", {got.y, want.y}},
              {"grad_x", {got.gx, want.gx}},   {"grad_weight", {got.gw, want.gw}}, {"grad_bias", {got.gb, want.gb}}};
          for (const auto& [name, pair] : outputs) {
            INFO(name);
            REQUIRE(pair.first.device() == gpu());
            expect_close(pair.first.to(Device("cpu")), pair.second, rtol, atol);
          }
        }
}

TEST_CASE("cuda: batch-norm backward computes only the requested gradients", "[cuda]") {
  const Tensor x = cpu_input({5, 3, 4}, DType::Float64, 27), g = cpu_input({5, 3, 4}, DType::Float64, 28);
  const Tensor w = cpu_input({3}, DType::Float64, 29);
  const Tensor mean = cpu_input({3}, DType::Float64, 30), var = cpu_input({3}, DType::Float64, 31) + 2.0;
  const TensorOptions on_gpu{.dtype = DType::Float64, .device = gpu()};
  for (bool batch_stats : {true, false}) {
    INFO((batch_stats ? "batch" : "running") << " statistics");
    Tensor gx_cpu = Tensor::empty(x.shape(), {.dtype = DType::Float64});
    k::batch_norm_backward(g, x, mean, var, w, kEps, batch_stats, gx_cpu, Tensor(), Tensor());
    // grad_x alone; with running statistics x is not needed.
    Tensor gx = Tensor::empty(x.shape(), on_gpu);
    k::batch_norm_backward(g.to(gpu()), batch_stats ? x.to(gpu()) : Tensor(), mean.to(gpu()), var.to(gpu()),
                           w.to(gpu()), kEps, batch_stats, gx, Tensor(), Tensor());
    expect_close(gx.to(Device("cpu")), gx_cpu, 1e-10, 1e-12);
  }
  Tensor gb_cpu = Tensor::empty({3}, {.dtype = DType::Float64}), gb = Tensor::empty({3}, on_gpu);
  k::batch_norm_backward(g, Tensor(), mean, var, w, kEps, false, Tensor(), Tensor(), gb_cpu);
  k::batch_norm_backward(g.to(gpu()), Tensor(), mean.to(gpu()), var.to(gpu()), w.to(gpu()), kEps, false, Tensor(),
                         Tensor(), gb);
  expect_close(gb.to(Device("cpu")), gb_cpu, 1e-10, 1e-12);
}

TEST_CASE("cuda: layer-norm kernels match the CPU", "[cuda]") {
  // One value per row; D shorter than a warp; D over several lane strides with 13 rows (a block
  // of 8 warps half idle); many rows; 63 blocks of 32 rows (the column sums' two rounds of 32).
  const std::vector<std::pair<int64_t, int64_t>> shapes{{5, 1}, {9, 7}, {13, 100}, {300, 33}, {1000, 300}, {2000, 70}};
  for (auto [rows, d] : shapes)
    for (DType dtype : {DType::Float32, DType::Float64})
      for (int affine = 0; affine < 4; ++affine) {
        const bool with_w = (affine & 1) != 0, with_b = (affine & 2) != 0;
        INFO(rows << " x " << d << " " << dtype << ", weight " << with_w << ", bias " << with_b);
        const Tensor x = cpu_input({rows, d}, dtype, 32, 2.0) + 3.0;  // a mean far from 0
        const Tensor g = cpu_input({rows, d}, dtype, 33);
        const Tensor w = with_w ? cpu_input({d}, dtype, 34) : Tensor();
        const Tensor b = with_b ? cpu_input({d}, dtype, 35) : Tensor();
        // Every output of the forward and the full backward on `device`.
        auto run = [&](const Device& device) {
          auto on = [&](const Tensor& t) { return t.defined() ? t.to(device) : Tensor(); };
          const TensorOptions opt{.dtype = dtype, .device = device};
          std::vector<Tensor> outs{Tensor::empty({rows, d}, opt), Tensor::empty({rows}, opt),
                                   Tensor::empty({rows}, opt), Tensor::empty({rows, d}, opt),
                                   Tensor::empty({d}, opt),    Tensor::empty({d}, opt)};
          k::layer_norm_forward(on(x), on(w), on(b), kEps, outs[0], outs[1], outs[2]);
          k::layer_norm_backward(on(g), on(x), outs[1], outs[2], on(w), outs[3], outs[4], outs[5]);
          return outs;
        };
        const std::vector<Tensor> want = run(Device("cpu")), got = run(gpu());
        const double rtol = dtype == DType::Float32 ? 1e-5 : 1e-10, atol = dtype == DType::Float32 ? 1e-5 : 1e-12;
        const char* names[] = {"y", "mean", "rstd", "grad_x", "grad_weight", "grad_bias"};
        for (size_t i = 0; i < want.size(); ++i) {
          INFO(names[i]);
          REQUIRE(got[i].device() == gpu());
          expect_close(got[i].to(Device("cpu")), want[i], rtol, atol);
        }
        // From the CPU's statistics, grad_weight and grad_bias are the CPU's bits.
        const TensorOptions on_gpu{.dtype = dtype, .device = gpu()};
        Tensor gw = Tensor::empty({d}, on_gpu), gb = Tensor::empty({d}, on_gpu);
        k::layer_norm_backward(g.to(gpu()), x.to(gpu()), want[1].to(gpu()), want[2].to(gpu()),
                               w.defined() ? w.to(gpu()) : Tensor(), Tensor(), gw, gb);
        expect_equal(gw.to(Device("cpu")), want[4]);
        expect_equal(gb.to(Device("cpu")), want[5]);
        // grad_bias alone, and grad_x alone.
        Tensor gb_alone = Tensor::empty({d}, on_gpu);
        k::layer_norm_backward(g.to(gpu()), x.to(gpu()), got[1], got[2], w.defined() ? w.to(gpu()) : Tensor(), Tensor(),
                               Tensor(), gb_alone);
        expect_equal(gb_alone.to(Device("cpu")), want[5]);
        Tensor gx = Tensor::empty({rows, d}, on_gpu);
        k::layer_norm_backward(g.to(gpu()), x.to(gpu()), got[1], got[2], w.defined() ? w.to(gpu()) : Tensor(), gx,
                               Tensor(), Tensor());
        expect_close(gx.to(Device("cpu")), want[3], rtol, atol);
      }
}
