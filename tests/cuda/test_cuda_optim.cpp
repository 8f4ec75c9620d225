// tests/cuda/test_cuda_optim.cpp — kernels/cuda/optim.cu against the CPU: the fused SGD and
// Adam/AdamW updates on the same inputs, and whole optimizer steps on cuda:0.
//
// Tolerance: nvcc contracts the functors' a * b + c into FMAs (one rounding instead of two) and
// CUDA's sqrtf is correctly rounded like libm's, so float32 results agree to a few ulp: the
// default 1e-5 relative holds.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "multigrad/kernels/optim.h"
#include "multigrad/optim/adam.h"
#include "multigrad/optim/sgd.h"

using namespace mg;
using namespace mg::test;

namespace {

// A copy of `t` on cuda:0 (its own memory, so the in-place updates stay apart).
Tensor on_gpu(const Tensor& t) { return t.to(gpu()); }

}  // namespace

TEST_CASE("cuda: fused sgd_update matches the CPU at odd sizes", "[cuda]") {
  for (int64_t n : odd_sizes()) {
    for (bool nesterov : {false, true}) {
      Tensor p = cpu_input({n}, DType::Float32, 1), g = cpu_input({n}, DType::Float32, 2);
      Tensor buf = cpu_input({n}, DType::Float32, 3);
      Tensor gp = on_gpu(p), gg = on_gpu(g), gbuf = on_gpu(buf);
      kernels::SgdHyper h{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = nesterov};
      kernels::sgd_update(p, g, buf, h);
      kernels::sgd_update(gp, gg, gbuf, h);
      INFO("n = " << n << ", nesterov = " << nesterov);
      expect_close(gp, p);
      expect_close(gbuf, buf);
    }
  }
}

TEST_CASE("cuda: fused adam_update matches the CPU, Adam, AMSGrad and AdamW", "[cuda]") {
  for (int64_t n : odd_sizes()) {
    for (bool decoupled : {false, true}) {
      Tensor p = cpu_input({n}, DType::Float32, 4), g = cpu_input({n}, DType::Float32, 5);
      Tensor m = cpu_input({n}, DType::Float32, 6), v = abs(cpu_input({n}, DType::Float32, 7));
      Tensor v_max = abs(cpu_input({n}, DType::Float32, 8));
      Tensor gp = on_gpu(p), gg = on_gpu(g), gm = on_gpu(m), gv = on_gpu(v), gv_max = on_gpu(v_max);
      kernels::AdamHyper h{.lr = 0.01, .weight_decay = 0.1, .decoupled = decoupled, .step = 3};
      kernels::adam_update(p, g, m, v, v_max, h);
      kernels::adam_update(gp, gg, gm, gv, gv_max, h);
      INFO("n = " << n << ", decoupled = " << decoupled);
      expect_close(gp, p);
      expect_close(gm, m);
      expect_close(gv, v);
      expect_close(gv_max, v_max);
    }
  }
}

TEST_CASE("cuda: float64 fused updates match the CPU", "[cuda]") {
  const int64_t n = 4099;
  Tensor p = cpu_input({n}, DType::Float64, 9), g = cpu_input({n}, DType::Float64, 10);
  Tensor m = zeros({n}, {.dtype = DType::Float64}), v = zeros({n}, {.dtype = DType::Float64});
  Tensor gp = on_gpu(p), gg = on_gpu(g), gm = on_gpu(m), gv = on_gpu(v);
  kernels::AdamHyper h{.lr = 0.001, .step = 1};
  kernels::adam_update(p, g, m, v, Tensor(), h);
  kernels::adam_update(gp, gg, gm, gv, Tensor(), h);
  expect_close(gp, p, 1e-12, 1e-14);
}

TEST_CASE("cuda: SGD and Adam steps on cuda:0 follow the CPU over three steps", "[cuda]") {
  for (int which = 0; which < 2; ++which) {
    Tensor cpu_p = cpu_input({37, 5}, DType::Float32, 11).requires_grad_(true);
    Tensor gpu_p = on_gpu(cpu_p).detach().requires_grad_(true);
    std::unique_ptr<optim::Optimizer> cpu_opt, gpu_opt;
    if (which == 0) {
      cpu_opt = std::make_unique<optim::SGD>(std::vector<Tensor>{cpu_p}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      gpu_opt = std::make_unique<optim::SGD>(std::vector<Tensor>{gpu_p}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    } else {
      cpu_opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{cpu_p}, optim::AdamWOptions{.lr = 0.01, .amsgrad = true});
      gpu_opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{gpu_p}, optim::AdamWOptions{.lr = 0.01, .amsgrad = true});
    }
    for (int t = 0; t < 3; ++t) {
      Tensor g = cpu_input({37, 5}, DType::Float32, uint64_t(20 + t));
      cpu_p.set_grad(g);
      gpu_p.set_grad(on_gpu(g));
      cpu_opt->step();
      gpu_opt->step();
    }
    INFO("optimizer " << which);
    REQUIRE(gpu_p.device() == gpu());
    expect_close(gpu_p.detach(), cpu_p.detach());
  }
}
