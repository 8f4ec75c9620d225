// tests/nn/test_layers.cpp — nn/layers.h: initialisation bounds and determinism, forward values
// against naive references, BatchNorm2d's running statistics, Sequential indexing and slicing.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "core/cpu_devices_guard.h"
#include "multigrad/nn/layers.h"
#include "multigrad/nn/models.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// Every value lies in [-bound, bound] and the extremes come close to it (a uniform draw of n
// values misses the ends by ~bound * 2/n).
void check_uniform_within(const Tensor& t, double bound) {
  std::vector<double> v = values(t);
  REQUIRE(!v.empty());
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  CHECK(*lo >= -bound);
  CHECK(*hi <= bound);
  if (v.size() >= 100) {
    CHECK(*lo < -0.9 * bound);
    CHECK(*hi > 0.9 * bound);
  }
}

}  // namespace

TEST_CASE("Linear: weight and bias are uniform within 1 over sqrt of in_features", "[nn]") {
  manual_seed(0);
  nn::Linear fc(50, 40);
  CHECK(fc.weight().shape() == Shape{40, 50});
  CHECK(fc.bias().shape() == Shape{40});
  check_uniform_within(fc.weight(), 1.0 / std::sqrt(50.0));
  check_uniform_within(fc.bias(), 1.0 / std::sqrt(50.0));
}

TEST_CASE("Linear: construction after manual_seed is deterministic", "[nn]") {
  manual_seed(42);
  nn::Linear a(7, 5);
  manual_seed(42);
  nn::Linear b(7, 5);
  nn::Linear c(7, 5);  // later draws: different numbers
  CHECK(values(a.weight()) == values(b.weight()));
  CHECK(values(a.bias()) == values(b.bias()));
  CHECK(values(a.weight()) != values(c.weight()));
}

TEST_CASE("Linear: forward is x times W transposed plus b", "[nn]") {
  manual_seed(1);
  nn::Linear fc(3, 2);
  std::vector<double> x = pseudo_random(12, 2);  // (4, 3)
  std::vector<double> w = values(fc.weight()), b = values(fc.bias());
  std::vector<double> want(8);
  for (int n = 0; n < 4; ++n)
    for (int o = 0; o < 2; ++o) {
      double acc = b[size_t(o)];
      for (int i = 0; i < 3; ++i) acc += x[size_t(n * 3 + i)] * w[size_t(o * 3 + i)];
      want[size_t(n * 2 + o)] = acc;
    }
  require_close(fc.forward(tensor(x, {4, 3})), want);
  // Leading dims pass through: (2, 2, 3) -> (2, 2, 2), same rows.
  require_close(fc.forward(tensor(x, {2, 2, 3})), want);
  CHECK(fc.forward(tensor(x, {2, 2, 3})).shape() == Shape{2, 2, 2});
}

TEST_CASE("Linear: without bias has only a weight, a wrong input width is an error", "[nn]") {
  nn::Linear fc(3, 2, /*bias=*/false);
  CHECK(fc.parameters().size() == 1);
  CHECK_FALSE(fc.bias().defined());
  require_close(fc.forward(zeros({1, 3})), {0.0, 0.0});
  require_error([&] { fc.forward(zeros({2, 4})); }, {"Linear", "last dim is 3", "[2, 4]"});
}

TEST_CASE("Conv2d: initialisation uses fan_in = in/groups * kH * kW", "[nn]") {
  manual_seed(2);
  nn::Conv2d conv(8, 6, 3, 1, 0, 1, /*groups=*/2);
  CHECK(conv.weight().shape() == Shape{6, 4, 3, 3});
  CHECK(conv.bias().shape() == Shape{6});
  check_uniform_within(conv.weight(), 1.0 / std::sqrt(4.0 * 9.0));
  check_uniform_within(conv.bias(), 1.0 / std::sqrt(4.0 * 9.0));
  manual_seed(2);
  nn::Conv2d again(8, 6, 3, 1, 0, 1, 2);
  CHECK(values(again.weight()) == values(conv.weight()));
}

TEST_CASE("Conv2d: forward matches a naive convolution with stride and padding", "[nn]") {
  manual_seed(3);
  nn::Conv2d conv(2, 3, 3, /*stride=*/2, /*padding=*/1);
  const int64_t N = 2, C = 2, H = 5, W = 4, O = 3, K = 3, S = 2, P = 1;
  const int64_t Ho = (H + 2 * P - K) / S + 1, Wo = (W + 2 * P - K) / S + 1;
  std::vector<double> x = pseudo_random(size_t(N * C * H * W), 4);
  std::vector<double> w = values(conv.weight()), b = values(conv.bias());
  std::vector<double> want;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          double acc = b[size_t(o)];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t ki = 0; ki < K; ++ki)
              for (int64_t kj = 0; kj < K; ++kj) {
                int64_t h = i * S - P + ki, ww = j * S - P + kj;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                acc += x[size_t(((n * C + c) * H + h) * W + ww)] * w[size_t(((o * C + c) * K + ki) * K + kj)];
              }
          want.push_back(acc);
        }
  Tensor y = conv.forward(tensor(x, {N, C, H, W}));
  CHECK(y.shape() == Shape{N, O, Ho, Wo});
  require_close(y, want, 1e-5, 1e-5);
}

TEST_CASE("Conv2d: groups must divide both channel counts", "[nn]") {
  require_error([] { nn::Conv2d conv(6, 4, 3, 1, 0, 1, 3); }, {"groups=3", "in_channels=6", "out_channels=4"});
  require_error([] { nn::Conv2d conv(0, 4, 3); }, {"Conv2d", "in_channels=0"});
}

TEST_CASE("MaxPool2d and AvgPool2d: 2x2 windows, stride defaulting to the kernel", "[nn]") {
  // (1, 1, 4, 4) holding 0..15
  Tensor x = arange(16).reshape({1, 1, 4, 4});
  nn::MaxPool2d max_pool(2);
  nn::AvgPool2d avg_pool(2);
  CHECK(max_pool.name() == "MaxPool2d(kernel_size=2, stride=2, padding=0)");
  Tensor m = max_pool.forward(x), a = avg_pool.forward(x);
  CHECK(m.shape() == Shape{1, 1, 2, 2});
  require_close(m, {5, 7, 13, 15});
  require_close(a, {2.5, 4.5, 10.5, 12.5});
  nn::MaxPool2d overlapping(3, 1);
  CHECK(overlapping.forward(x).shape() == Shape{1, 1, 2, 2});
}

TEST_CASE("BatchNorm2d: PyTorch's initial parameters and buffers", "[nn]") {
  nn::BatchNorm2d bn(3);
  CHECK(values(bn.parameter("weight")) == std::vector<double>{1, 1, 1});
  CHECK(values(bn.parameter("bias")) == std::vector<double>{0, 0, 0});
  CHECK(values(bn.buffer("running_mean")) == std::vector<double>{0, 0, 0});
  CHECK(values(bn.buffer("running_var")) == std::vector<double>{1, 1, 1});
  CHECK(bn.buffer("num_batches_tracked").dtype() == DType::Int64);
  CHECK(bn.buffer("num_batches_tracked").item<int64_t>() == 0);
}

TEST_CASE("BatchNorm2d: training normalises with batch statistics and updates the running ones", "[nn]") {
  nn::BatchNorm2d bn(2, 1e-5, 0.1);
  // (2, 2, 1, 2): channel 0 holds {1, 2, 3, 4}, channel 1 {10, 10, 10, 14}
  Tensor x = tensor({1., 2., 10., 10., 3., 4., 10., 14.}, {2, 2, 1, 2});
  Tensor y = bn.forward(x);
  // channel 0: mean 2.5, biased var 1.25, unbiased 5/3
  std::vector<double> got = values(y);
  CHECK(got[0] == Approx((1 - 2.5) / std::sqrt(1.25 + 1e-5)).epsilon(1e-4));
  CHECK(got[5] == Approx((4 - 2.5) / std::sqrt(1.25 + 1e-5)).epsilon(1e-4));
  // running = 0.9 * running + 0.1 * batch (unbiased variance)
  require_close(bn.buffer("running_mean"), {0.25, 1.1}, 1e-5);
  require_close(bn.buffer("running_var"), {0.9 + 0.1 * 5.0 / 3.0, 0.9 + 0.1 * 4.0}, 1e-5);
  CHECK(bn.buffer("num_batches_tracked").item<int64_t>() == 1);
  bn.forward(x);
  CHECK(bn.buffer("num_batches_tracked").item<int64_t>() == 2);
}

TEST_CASE("BatchNorm2d: eval uses the running statistics and leaves them alone", "[nn]") {
  nn::BatchNorm2d bn(1);
  bn.eval();
  Tensor y = bn.forward(tensor({2., -4.}, {1, 1, 1, 2}));
  require_close(y, {2 / std::sqrt(1 + 1e-5), -4 / std::sqrt(1 + 1e-5)});
  CHECK(bn.buffer("num_batches_tracked").item<int64_t>() == 0);
  require_close(bn.buffer("running_mean"), {0.0});
  require_error([&] { bn.forward(zeros({1, 2, 1, 1})); }, {"BatchNorm2d", "[1, 2, 1, 1]"});
}

TEST_CASE("LayerNorm: each row comes out with mean 0 and variance 1", "[nn]") {
  nn::LayerNorm ln({4});
  CHECK(ln.parameters().size() == 2);
  Tensor y = ln.forward(tensor(pseudo_random(12, 8), {3, 4}));
  std::vector<double> v = values(y);
  for (int r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 4; ++c) mean += v[size_t(r * 4 + c)] / 4;
    for (int c = 0; c < 4; ++c) var += (v[size_t(r * 4 + c)] - mean) * (v[size_t(r * 4 + c)] - mean) / 4;
    CHECK(mean == Approx(0).margin(1e-5));
    CHECK(var == Approx(1).epsilon(1e-3));
  }
  nn::LayerNorm plain({4}, 1e-5, /*elementwise_affine=*/false);
  CHECK(plain.parameters().empty());
}

TEST_CASE("Dropout: identity in eval mode and at p = 0, zero or scaled in training", "[nn]") {
  Tensor x = full({1000}, 2.0);
  nn::Dropout keep_all(0.0);
  CHECK(values(keep_all.forward(x)) == values(x));
  nn::Dropout drop(0.5);
  drop.eval();
  CHECK(values(drop.forward(x)) == values(x));
  drop.train();
  std::vector<double> v = values(drop.forward(x));
  size_t zeros_seen = 0;
  for (double e : v) {
    CHECK((e == 0.0 || e == 4.0));
    zeros_seen += e == 0.0;
  }
  CHECK(zeros_seen > 400);
  CHECK(zeros_seen < 600);
  require_error([] { nn::Dropout bad(1.5); }, {"Dropout", "1.5"});
}

TEST_CASE("Embedding: N(0, 1) initialisation and row lookup", "[nn]") {
  manual_seed(9);
  nn::Embedding emb(100, 50);
  std::vector<double> w = values(emb.weight());
  double mean = std::accumulate(w.begin(), w.end(), 0.0) / double(w.size()), var = 0;
  for (double e : w) var += (e - mean) * (e - mean) / double(w.size());
  CHECK(std::abs(mean) < 0.05);
  CHECK(std::abs(var - 1.0) < 0.05);
  Tensor rows = emb.forward(tensor({3, 0, 3}, {3}, {.dtype = DType::Int64}));
  CHECK(rows.shape() == Shape{3, 50});
  std::vector<double> r = values(rows);
  for (int d = 0; d < 50; ++d) {
    CHECK(r[size_t(d)] == w[size_t(3 * 50 + d)]);
    CHECK(r[size_t(50 + d)] == w[size_t(d)]);
  }
}

TEST_CASE("Activations: ReLU, GELU (tanh), Tanh and Sigmoid match their formulas", "[nn]") {
  std::vector<double> x = {-2.0, -0.5, 0.0, 0.7, 3.0};
  Tensor t = tensor(x, {5}, {.dtype = DType::Float64});
  std::vector<double> relu_want, gelu_want, tanh_want, sigmoid_want;
  for (double v : x) {
    relu_want.push_back(v > 0 ? v : 0);
    gelu_want.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    tanh_want.push_back(std::tanh(v));
    sigmoid_want.push_back(1 / (1 + std::exp(-v)));
  }
  require_close(nn::ReLU().forward(t), relu_want, 1e-12);
  require_close(nn::GELU().forward(t), gelu_want, 1e-9);
  require_close(nn::Tanh().forward(t), tanh_want, 1e-12);
  require_close(nn::Sigmoid().forward(t), sigmoid_want, 1e-12);
}

TEST_CASE("Flatten: keeps the batch dim by default", "[nn]") {
  Tensor x = zeros({2, 3, 4, 5});
  CHECK(nn::Flatten().forward(x).shape() == Shape{2, 60});
  CHECK(nn::Flatten(0).forward(x).shape() == Shape{120});
  CHECK(nn::Flatten(1, 2).forward(x).shape() == Shape{2, 12, 5});
}

TEST_CASE("Sequential: children named 0, 1, ... and indexed with bounds checks", "[nn]") {
  auto fc = std::make_shared<nn::Linear>(2, 3);
  nn::Sequential seq{fc, std::make_shared<nn::ReLU>()};
  seq.add(std::make_shared<nn::Linear>(3, 1));
  REQUIRE(seq.size() == 3);
  CHECK(seq[0] == fc);
  CHECK(seq.at(1)->name() == "ReLU()");
  CHECK(seq.named_children()[2].first == "2");
  CHECK(seq.named_parameters()[2].first == "2.weight");
  require_error([&] { seq.at(3); }, {"index 3 out of range for 3 modules"});
  require_error([&] { seq[7]; }, {"index 7"});
}

TEST_CASE("Sequential: slices share modules and compose to the whole", "[nn]") {
  manual_seed(10);
  nn::Sequential seq{std::make_shared<nn::Linear>(4, 5), std::make_shared<nn::Tanh>(),
                     std::make_shared<nn::Linear>(5, 3), std::make_shared<nn::Sigmoid>()};
  auto head = seq.slice(0, 2), tail = seq.slice(2, 4);
  CHECK(head->size() == 2);
  CHECK(tail->at(0) == seq[2]);
  CHECK(tail->named_parameters()[0].first == "0.weight");  // renumbered
  CHECK(tail->parameters()[0].is_same(seq.parameters()[2]));
  Tensor x = tensor(pseudo_random(8, 11), {2, 4});
  CHECK(values(tail->forward(head->forward(x))) == values(seq.forward(x)));
  CHECK(seq.slice(1, 1)->size() == 0);
  require_error([&] { seq.slice(3, 5); }, {"Sequential::slice", "[3, 5)", "4 modules"});
}

TEST_CASE("TiedLinear: x @ W^T by its owner's weight, which stays the owner's, a stand-in replaces it", "[nn]") {
  CpuDevicesGuard guard(2);
  manual_seed(3);
  auto owner = std::make_shared<nn::Embedding>(5, 3);
  nn::TiedLinear head(owner, "weight");
  CHECK(head.parameters().empty());  // listed once, under the owner
  const Tensor x = randn({2, 4, 3});
  const Tensor y = head(x);
  CHECK(y.shape() == Shape{2, 4, 5});
  CHECK(values(y) == values(matmul(x, transpose(owner->weight(), 0, 1))));
  y.sum().backward();
  REQUIRE(owner->weight().grad().defined());  // the gradient reaches the owner's parameter

  // Read from the owner's registry on each forward: a move reaches it.
  owner->to(Device("cpu:1"));
  CHECK(head(x.to(Device("cpu:1"))).device() == Device("cpu:1"));
  const Tensor stand_in = zeros({5, 3});
  head.set_stand_in(stand_in);
  CHECK(values(head(x)) == std::vector<double>(2 * 4 * 5, 0.0));
  head.set_stand_in(Tensor());
  require_error([&] { head(x); }, {"cpu:0", "cpu:1"});

  require_error([] { nn::TiedLinear(std::make_shared<nn::LayerNorm>(Shape{3}), "weight"); }, {"matrix", "[3]"});
  require_error([&] { nn::TiedLinear(owner, "bias"); }, {"bias"});
}

TEST_CASE("Recomputed: the child's output and gradients, bit for bit", "[nn][checkpoint]") {
  manual_seed(4);
  auto mlp = nn::mlp({3, 8, 2});
  nn::Recomputed wrapped(mlp);
  CHECK(wrapped.parameters().size() == mlp->parameters().size());
  const Tensor x = randn({4, 3});
  const auto grads = [&](nn::Module& m) {
    for (const Tensor& p : mlp->parameters()) p.set_grad(Tensor());
    m(x).sum().backward();
    std::vector<std::vector<double>> out;
    for (const Tensor& p : mlp->parameters()) out.push_back(values(p.grad()));
    return out;
  };
  CHECK(values(wrapped(x)) == values((*mlp)(x)));
  CHECK(grads(wrapped) == grads(*mlp));
}
