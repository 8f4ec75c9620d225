// tests/optim/test_fused_update.cpp — kernels/optim.h: the fused CPU updates against naive
// per-element loops at sizes that take the multi-threaded path, and the kernel's contract
// checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "multigrad/kernels/optim.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// Over kGrain / 4 elements per thread, so several threads share the work, plus an odd tail.
constexpr int64_t kLarge = 200003;

// |got - want| <= rtol |want| + atol everywhere: one REQUIRE for the whole tensor, naming the
// first mismatch (a REQUIRE per element would dominate the run time at this size).
void require_all_close(const Tensor& got, const std::vector<double>& want, double rtol, double atol) {
  std::vector<double> g = values(got);
  REQUIRE(g.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - want[i]) <= atol + rtol * std::abs(want[i])) && bad++ == 0) first = i;
  INFO(bad << " mismatches; first at " << first << ": got " << g[first] << ", want " << want[first]);
  REQUIRE(bad == 0);
}

}  // namespace

TEST_CASE("fused sgd_update matches a naive loop, with momentum and nesterov", "[optim]") {
  std::vector<double> p0 = pseudo_random(size_t(kLarge), 1), g = pseudo_random(size_t(kLarge), 2),
                      b0 = pseudo_random(size_t(kLarge), 3);
  Tensor p = tensor(p0, {kLarge}, {.dtype = DType::Float64});
  Tensor grad = tensor(g, {kLarge}, {.dtype = DType::Float64});
  Tensor buf = tensor(b0, {kLarge}, {.dtype = DType::Float64});
  kernels::SgdHyper h{.lr = 0.1, .momentum = 0.9, .dampening = 0.0, .weight_decay = 0.01, .nesterov = true};
  kernels::sgd_update(p, grad, buf, h);
  std::vector<double> want_p(p0.size()), want_b(p0.size());
  for (size_t i = 0; i < p0.size(); ++i) {
    double gi = g[i] + 0.01 * p0[i];
    want_b[i] = 0.9 * b0[i] + gi;
    want_p[i] = p0[i] - 0.1 * (gi + 0.9 * want_b[i]);
  }
  require_all_close(buf, want_b, 1e-14, 1e-15);
  require_all_close(p, want_p, 1e-14, 1e-15);
}

TEST_CASE("fused adam_update matches a naive loop, amsgrad and decoupled decay", "[optim]") {
  std::vector<double> p0 = pseudo_random(size_t(kLarge), 4), g = pseudo_random(size_t(kLarge), 5);
  std::vector<double> m0 = pseudo_random(size_t(kLarge), 6), v0 = pseudo_random(size_t(kLarge), 7);
  std::vector<double> vmax0(v0.size());
  for (double& v : v0) v = v * v;  // second moments are non-negative
  for (size_t i = 0; i < v0.size(); ++i) vmax0[i] = i % 2 ? v0[i] * 2 : v0[i] / 2;
  auto t64 = [](const std::vector<double>& v) { return tensor(v, {kLarge}, {.dtype = DType::Float64}); };
  Tensor p = t64(p0), grad = t64(g), m = t64(m0), v = t64(v0), vmax = t64(vmax0);
  kernels::AdamHyper h{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1,
                       .decoupled = true, .step = 4};
  kernels::adam_update(p, grad, m, v, vmax, h);
  const double bc1 = 1 - std::pow(0.9, 4), bc2 = 1 - std::pow(0.99, 4);
  std::vector<double> want(p0.size());
  for (size_t i = 0; i < p0.size(); ++i) {
    double pi = p0[i] * (1 - 0.01 * 0.1);
    double mi = 0.9 * m0[i] + 0.1 * g[i];
    double vi = 0.99 * v0[i] + 0.01 * g[i] * g[i];
    double vh = std::max(vmax0[i], vi);
    want[i] = pi - 0.01 / bc1 * mi / (std::sqrt(vh) / std::sqrt(bc2) + 1e-8);
  }
  require_all_close(p, want, 1e-12, 1e-14);
}

TEST_CASE("fused updates: float32 matches the float64 math to float precision", "[optim]") {
  const int64_t n = 1001;
  std::vector<double> p0 = pseudo_random(size_t(n), 8), g = pseudo_random(size_t(n), 9);
  Tensor p32 = tensor(p0, {n}), g32 = tensor(g, {n});
  Tensor p64 = tensor(p0, {n}, {.dtype = DType::Float64}), g64 = tensor(g, {n}, {.dtype = DType::Float64});
  kernels::AdamHyper h{.lr = 0.05, .step = 1};
  kernels::adam_update(p32, g32, zeros({n}), zeros({n}), Tensor(), h);
  kernels::adam_update(p64, g64, zeros({n}, {.dtype = DType::Float64}), zeros({n}, {.dtype = DType::Float64}),
                       Tensor(), h);
  require_close(values(p32), values(p64), 1e-5, 1e-6);
}

TEST_CASE("fused updates check shapes, dtypes, layouts and momentum buffers", "[optim]") {
  Tensor p = zeros({4}), g = zeros({4});
  require_error([&] { kernels::sgd_update(p, zeros({5}), Tensor(), {.lr = 0.1}); },
                {"sgd_update", "grad has shape [5]", "[4]"});
  require_error([&] { kernels::sgd_update(p, zeros({4}, {.dtype = DType::Float64}), Tensor(), {.lr = 0.1}); },
                {"grad has dtype Float64"});
  require_error([&] { kernels::sgd_update(p, g, Tensor(), {.lr = 0.1, .momentum = 0.9}); },
                {"momentum buffer", "momentum 0.9"});
  Tensor wide = zeros({2, 4}).transpose(0, 1);
  require_error([&] { kernels::sgd_update(wide, zeros({4, 2}), Tensor(), {.lr = 0.1}); }, {"contiguous"});
  require_error([&] { kernels::adam_update(p, g, zeros({4}), zeros({4}), Tensor(), {.lr = 0.1, .step = 0}); },
                {"adam_update", "got 0"});
  require_error([&] { kernels::sgd_update(zeros({2}, {.dtype = DType::Int64}), g, Tensor(), {.lr = 0.1}); },
                {"Float32 or Float64", "Int64"});
}

TEST_CASE("multi-tensor updates on the CPU equal each parameter's own update, and check every item first",
          "[optim]") {
  std::vector<kernels::AdamItem> many, alone;
  for (int k = 0; k < 5; ++k) {
    const Tensor p = leaf({3 + k}, 40 + k).detach(), g = leaf({3 + k}, 50 + k).detach();
    const kernels::AdamHyper h{.lr = 0.01 * (k + 1), .weight_decay = 0.1 * k, .decoupled = k % 2 == 0, .step = 1 + k};
    const TensorOptions f64{.dtype = DType::Float64};
    for (auto* list : {&many, &alone}) list->push_back({clone(p), g, zeros({3 + k}, f64), zeros({3 + k}, f64), Tensor(), h});
  }
  kernels::adam_update_many(many);
  for (const auto& i : alone) kernels::adam_update(i.param, i.grad, i.exp_avg, i.exp_avg_sq, Tensor(), i.hyper);
  for (size_t k = 0; k < many.size(); ++k) {
    CHECK(values(many[k].param) == values(alone[k].param));
    CHECK(values(many[k].exp_avg_sq) == values(alone[k].exp_avg_sq));
  }
  // A bad second item: refused naming it, and the first parameter is left as it was.
  const Tensor p = zeros({4}), before = clone(p);
  require_error(
      [&] { kernels::sgd_update_many({{p, ones({4}), Tensor(), {.lr = 0.1}}, {zeros({4}), zeros({5}), Tensor(), {}}}); },
      {"sgd_update", "grad has shape [5]", "[4]"});
  CHECK(values(p) == values(before));
}
