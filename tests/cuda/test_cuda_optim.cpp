// tests/cuda/test_cuda_optim.cpp — kernels/cuda/optim.cu against the CPU: the fused SGD and
// Adam/AdamW updates on the same inputs, and whole optimizer steps on cuda:0.
//
// Tolerance: nvcc contracts the functors' a * b + c into FMAs (one rounding instead of two) and
// CUDA's sqrtf is correctly rounded like libm's, so float32 results agree to a few ulp: the
// default 1e-5 relative holds.
#include <catch2/catch.hpp>

#include <memory>
#include <tuple>
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

TEST_CASE("cuda: multi-tensor updates share launches and give each parameter its own update's bits", "[cuda]") {
  // 30 parameters of sizes 0 to 4099 (a launch holds 24: two launches, one item empty), each
  // with its own step, weight decay and, for SGD, a first step or not; Float32 and Float64.
  // Against one launch per parameter on the same device: the same bits; and the CPU's within
  // the tolerance above.
  for (DType dtype : {DType::Float32, DType::Float64}) {
    INFO(dtype);
    std::vector<kernels::AdamItem> adam, adam_alone, adam_cpu;
    std::vector<kernels::SgdItem> sgd, sgd_alone, sgd_cpu;
    for (int k = 0; k < 30; ++k) {
      const int64_t n = k == 7 ? 0 : 1 + (k * 137) % 4099;
      const auto input = [&](uint64_t seed) { return cpu_input({n}, dtype, seed); };
      const Tensor p = input(10 * k), g = input(10 * k + 1), m = input(10 * k + 2), v = abs(input(10 * k + 3));
      const Tensor vmax = k % 3 == 0 ? abs(input(10 * k + 4)) + 0.5 : Tensor();
      const kernels::AdamHyper ah{.lr = 1e-3 * (1 + k), .weight_decay = 0.01 * (k % 2), .decoupled = k % 4 < 2,
                                  .step = 1 + k};
      const auto copy_on = [](const Tensor& t, const Device& d) { return t.defined() ? t.to(d) : Tensor(); };
      for (auto* list : {&adam, &adam_alone})
        list->push_back({on_gpu(p), on_gpu(g), on_gpu(m), on_gpu(v), copy_on(vmax, gpu()), ah});
      adam_cpu.push_back({clone(p), g, clone(m), clone(v), vmax.defined() ? clone(vmax) : Tensor(), ah});
      const kernels::SgdHyper sh{.lr = 0.1, .momentum = k % 5 == 0 ? 0.0 : 0.9, .weight_decay = 0.001 * k,
                                 .nesterov = k % 2 == 0, .first_step = k % 3 == 1};
      const Tensor buf = sh.momentum != 0 ? input(10 * k + 5) : Tensor();
      for (auto* list : {&sgd, &sgd_alone}) list->push_back({on_gpu(p), on_gpu(g), copy_on(buf, gpu()), sh});
      sgd_cpu.push_back({clone(p), g, buf.defined() ? clone(buf) : Tensor(), sh});
    }
    kernels::adam_update_many(adam);
    for (const auto& i : adam_alone)
      kernels::adam_update(i.param, i.grad, i.exp_avg, i.exp_avg_sq, i.max_exp_avg_sq, i.hyper);
    kernels::adam_update_many(adam_cpu);
    kernels::sgd_update_many(sgd);
    for (const auto& i : sgd_alone) kernels::sgd_update(i.param, i.grad, i.momentum_buffer, i.hyper);
    kernels::sgd_update_many(sgd_cpu);
    const double rtol = dtype == DType::Float32 ? 1e-5 : 1e-12;
    for (size_t k = 0; k < adam.size(); ++k) {
      INFO("parameter " << k);
      for (auto [got, alone, cpu] : {std::tuple{adam[k].param, adam_alone[k].param, adam_cpu[k].param},
                                     {adam[k].exp_avg, adam_alone[k].exp_avg, adam_cpu[k].exp_avg},
                                     {adam[k].exp_avg_sq, adam_alone[k].exp_avg_sq, adam_cpu[k].exp_avg_sq},
                                     {sgd[k].param, sgd_alone[k].param, sgd_cpu[k].param}}) {
        expect_equal(got.to(Device("cpu")), alone.to(Device("cpu")));
        expect_close(got.to(Device("cpu")), cpu, rtol, 1e-12);
      }
      if (adam[k].max_exp_avg_sq.defined())
        expect_equal(adam[k].max_exp_avg_sq.to(Device("cpu")), adam_alone[k].max_exp_avg_sq.to(Device("cpu")));
      if (sgd[k].momentum_buffer.defined())
        expect_equal(sgd[k].momentum_buffer.to(Device("cpu")), sgd_alone[k].momentum_buffer.to(Device("cpu")));
    }
  }
}

TEST_CASE("cuda: a multi-tensor update refuses a bad item before changing any parameter", "[cuda]") {
  const Tensor p = on_gpu(cpu_input({8}, DType::Float32, 1)), before = p.to(Device("cpu"));
  const Tensor g = on_gpu(cpu_input({8}, DType::Float32, 2)), wrong = on_gpu(cpu_input({5}, DType::Float32, 3));
  require_error([&] { kernels::sgd_update_many({{p, g, Tensor(), {.lr = 0.1}}, {on_gpu(before), wrong, Tensor(), {}}}); },
                {"sgd_update", "grad has shape [5]", "[8]"});
  expect_equal(p.to(Device("cpu")), before);
}
