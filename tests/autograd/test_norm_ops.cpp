// Normalisation (autograd/norm_ops.cpp): batch_norm and layer_norm against per-channel /
// per-row loops, PyTorch's running-statistics rules (momentum, unbiased running variance, eval
// vs train), argument errors, and float64 gradcheck of every differentiable input; batch_norm
// records one node (the fused kernels of kernels/norm.h, tested on their own in
// tests/kernels/test_norm_kernels.cpp).
#include <cmath>
#include <vector>

#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

struct Moments {
  std::vector<double> mean, var;  // biased variance
};

// Per-channel mean and biased variance of x (N, C, S) stored row-major, S = spatial size.
Moments channel_moments(const std::vector<double>& x, int64_t n, int64_t c, int64_t s) {
  Moments m{std::vector<double>(size_t(c), 0), std::vector<double>(size_t(c), 0)};
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) sum += x[size_t((i * c + ch) * s + k)];
    const double mu = sum / double(n * s);
    double sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) sq += (x[size_t((i * c + ch) * s + k)] - mu) * (x[size_t((i * c + ch) * s + k)] - mu);
    m.mean[size_t(ch)] = mu;
    m.var[size_t(ch)] = sq / double(n * s);
  }
  return m;
}

// y = (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c] over x (N, C, S).
std::vector<double> channel_normalize(const std::vector<double>& x, int64_t n, int64_t c, int64_t s,
                                      const Moments& m, const std::vector<double>& w, const std::vector<double>& b,
                                      double eps) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < s; ++k) {
        const size_t at = size_t((i * c + ch) * s + k);
        y[at] = (x[at] - m.mean[size_t(ch)]) / std::sqrt(m.var[size_t(ch)] + eps) * w[size_t(ch)] + b[size_t(ch)];
      }
  return y;
}

Tensor f64(const std::vector<double>& v, const Shape& shape, bool requires_grad = false) {
  return tensor(v, shape, {.dtype = DType::Float64, .requires_grad = requires_grad});
}

}  // namespace

TEST_CASE("batch_norm: training forward matches a per-channel reference, (N, C, H, W)", "[autograd][norm]") {
  const int64_t n = 3, c = 2, h = 2, w = 3;
  std::vector<double> x = pseudo_random(size_t(n * c * h * w), 40);
  std::vector<double> weight{1.5, -0.5}, bias{0.25, 2.0};
  Tensor y = batch_norm(f64(x, {n, c, h, w}), Tensor(), Tensor(), f64(weight, {c}), f64(bias, {c}), true);
  CHECK(y.shape() == Shape{n, c, h, w});
  require_close(y, channel_normalize(x, n, c, h * w, channel_moments(x, n, c, h * w), weight, bias, 1e-5), 1e-10,
                1e-12);
}

TEST_CASE("batch_norm: running stats after one step use momentum and the unbiased variance", "[autograd][norm]") {
  const int64_t n = 4, c = 3;
  std::vector<double> x = pseudo_random(size_t(n * c), 41);
  Tensor running_mean = f64({0.5, -1.0, 2.0}, {c});
  Tensor running_var = f64({1.0, 2.0, 0.5}, {c});
  batch_norm(f64(x, {n, c}), running_mean, running_var, Tensor(), Tensor(), true, 0.2);
  Moments m = channel_moments(x, n, c, 1);
  std::vector<double> want_mean{0.5, -1.0, 2.0}, want_var{1.0, 2.0, 0.5};
  for (size_t ch = 0; ch < 3; ++ch) {
    want_mean[ch] = 0.8 * want_mean[ch] + 0.2 * m.mean[ch];
    want_var[ch] = 0.8 * want_var[ch] + 0.2 * m.var[ch] * double(n) / double(n - 1);
  }
  require_close(running_mean, want_mean, 1e-12, 1e-14);
  require_close(running_var, want_var, 1e-12, 1e-14);
}

TEST_CASE("batch_norm: running stats in Float32 follow a Float32 input over several steps", "[autograd][norm]") {
  const int64_t n = 5, c = 2, s = 3;
  Tensor running_mean = zeros({c}), running_var = ones({c});
  std::vector<double> want_mean{0, 0}, want_var{1, 1};
  for (uint64_t step = 0; step < 3; ++step) {
    std::vector<double> x = pseudo_random(size_t(n * c * s), 50 + step);
    batch_norm(tensor(x, {n, c, s}), running_mean, running_var, Tensor(), Tensor(), true);
    Moments m = channel_moments(x, n, c, s);
    for (size_t ch = 0; ch < 2; ++ch) {
      want_mean[ch] = 0.9 * want_mean[ch] + 0.1 * m.mean[ch];
      want_var[ch] = 0.9 * want_var[ch] + 0.1 * m.var[ch] * double(n * s) / double(n * s - 1);
    }
  }
  CHECK(running_mean.dtype() == DType::Float32);
  require_close(running_mean, want_mean, 1e-5, 1e-6);
  require_close(running_var, want_var, 1e-5, 1e-6);
}

TEST_CASE("batch_norm: eval uses the running statistics and leaves them alone", "[autograd][norm]") {
  const int64_t n = 2, c = 2, s = 2;
  std::vector<double> x = pseudo_random(size_t(n * c * s), 42);
  Moments running{{0.3, -0.2}, {1.5, 0.7}};
  Tensor running_mean = f64(running.mean, {c}), running_var = f64(running.var, {c});
  std::vector<double> weight{2.0, 0.5}, bias{-1.0, 1.0};
  Tensor y = batch_norm(f64(x, {n, c, s}), running_mean, running_var, f64(weight, {c}), f64(bias, {c}), false);
  require_close(y, channel_normalize(x, n, c, s, running, weight, bias, 1e-5), 1e-12, 1e-14);
  require_close(running_mean, running.mean, 0, 0);
  require_close(running_var, running.var, 0, 0);
  // Training on the same input normalises with the batch statistics instead.
  Tensor train = batch_norm(f64(x, {n, c, s}), running_mean, running_var, f64(weight, {c}), f64(bias, {c}), true);
  require_close(train, channel_normalize(x, n, c, s, channel_moments(x, n, c, s), weight, bias, 1e-5), 1e-10, 1e-12);
}

TEST_CASE("batch_norm: without running stats, eval normalises with the batch statistics", "[autograd][norm]") {
  const int64_t n = 3, c = 2;
  std::vector<double> x = pseudo_random(size_t(n * c), 43);
  Tensor y = batch_norm(f64(x, {n, c}), Tensor(), Tensor(), Tensor(), Tensor(), false, 0.1, 1e-3);
  require_close(y, channel_normalize(x, n, c, 1, channel_moments(x, n, c, 1), {1, 1}, {0, 0}, 1e-3), 1e-10, 1e-12);
}

TEST_CASE("batch_norm: one value per channel in training is an error", "[autograd][norm]") {
  require_error([] { batch_norm(zeros({1, 3}), zeros({3}), ones({3}), Tensor(), Tensor(), true); },
                {"batch_norm", "more than 1 value per channel", "[1, 3]"});
  // In eval one sample is fine.
  Tensor y = batch_norm(ones({1, 3}), zeros({3}), ones({3}), Tensor(), Tensor(), false, 0.1, 0.0);
  require_close(y, {1, 1, 1}, 0, 0);
}

TEST_CASE("batch_norm: an empty batch returns an empty result and keeps the running stats", "[autograd][norm]") {
  Tensor running_mean = full({2}, 0.5), running_var = full({2}, 2.0);
  Tensor y = batch_norm(zeros({0, 2, 3}), running_mean, running_var, Tensor(), Tensor(), true);
  CHECK(y.shape() == Shape{0, 2, 3});
  require_close(running_mean, {0.5, 0.5}, 0, 0);
  require_close(running_var, {2.0, 2.0}, 0, 0);
}

TEST_CASE("batch_norm: parameter errors name the parameter and its shape", "[autograd][norm]") {
  Tensor x = zeros({4, 3, 2});
  require_error([&] { batch_norm(x, Tensor(), Tensor(), zeros({4}), Tensor(), true); }, {"weight", "[4]", "[3]"});
  require_error([&] { batch_norm(x, zeros({2}), ones({3}), Tensor(), Tensor(), true); }, {"running_mean", "[2]"});
  require_error([&] { batch_norm(x, zeros({3}), Tensor(), Tensor(), Tensor(), true); }, {"running_var"});
  require_error([&] { batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true); }, {"(N, C, ...)", "[4]"});
}

TEST_CASE("batch_norm: gradcheck of input, weight and bias in training", "[autograd][norm]") {
  Tensor x = f64(pseudo_random(24, 44), {3, 2, 4}, true);
  Tensor weight = f64({1.2, -0.7}, {2}, true), bias = f64({0.1, 0.3}, {2}, true);
  CHECK(gradcheck(
      [](const TensorList& in) { return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true); }, {x, weight, bias}));
}

TEST_CASE("batch_norm: gradcheck in eval with running stats", "[autograd][norm]") {
  Tensor x = f64(pseudo_random(12, 45), {3, 4}, true);
  Tensor weight = f64(pseudo_random(4, 46), {4}, true), bias = f64(pseudo_random(4, 47), {4}, true);
  Tensor running_mean = f64({0.1, 0.2, -0.3, 0.0}, {4}), running_var = f64({1.0, 0.5, 2.0, 1.5}, {4});
  CHECK(gradcheck([&](const TensorList& in) { return batch_norm(in[0], running_mean, running_var, in[1], in[2], false); },
                  {x, weight, bias}));
}

TEST_CASE("batch_norm records one node, also for a non-contiguous input", "[autograd][norm]") {
  Tape tape;
  TapeScope scope(tape);
  const Tensor leaf = f64(pseudo_random(3 * 4 * 2, 55), {3, 4, 2}, true);
  const Tensor x = leaf.transpose(1, 2);  // (3, 2, 4), non-contiguous; one node: transpose
  const Tensor weight = f64({0.5, 2.0}, {2}, true), bias = f64({1.0, -1.0}, {2}, true);
  const size_t before = tape.size();
  const Tensor y = batch_norm(x, Tensor(), Tensor(), weight, bias, true);
  REQUIRE(tape.size() == before + 1);
  REQUIRE(tape.live_nodes().back()->name == "batch_norm");
  const std::vector<double> xs = values(contiguous(x));
  require_close(y, channel_normalize(xs, 3, 2, 4, channel_moments(xs, 3, 2, 4), {0.5, 2.0}, {1.0, -1.0}, 1e-5), 1e-10,
                1e-12);
  CHECK(gradcheck(
      [](const TensorList& in) { return batch_norm(in[0].transpose(1, 2), Tensor(), Tensor(), in[1], in[2], true); },
      {leaf, weight, bias}));
}

TEST_CASE("batch_norm: an eval backward uses the running stats its forward saw", "[autograd][norm]") {
  const int64_t n = 3, c = 2;
  Tensor x = f64(pseudo_random(size_t(n * c), 56), {n, c}, true);
  Tensor weight = f64({1.5, -0.5}, {c}, true);
  Tensor running_mean = f64({0.2, -0.1}, {c}), running_var = f64({0.8, 1.7}, {c});
  Tensor y = batch_norm(x, running_mean, running_var, weight, Tensor(), false);
  // A training step before this backward updates the running stats in place.
  batch_norm(f64(pseudo_random(size_t(n * c), 57), {n, c}), running_mean, running_var, Tensor(), Tensor(), true);
  y.sum().backward();
  std::vector<double> want_gx, want_gw{0, 0};
  const std::vector<double> xs = values(x), mean{0.2, -0.1}, var{0.8, 1.7}, w{1.5, -0.5};
  for (size_t i = 0; i < size_t(n * c); ++i) {
    const size_t ch = i % size_t(c);
    want_gx.push_back(w[ch] / std::sqrt(var[ch] + 1e-5));
    want_gw[ch] += (xs[i] - mean[ch]) / std::sqrt(var[ch] + 1e-5);
  }
  require_close(x.grad(), want_gx, 1e-12, 1e-14);
  require_close(weight.grad(), want_gw, 1e-12, 1e-14);
}

TEST_CASE("batch_norm: Float32 gradients match the Float64 ones", "[autograd][norm]") {
  // The fused backward in Float32 (float64 sums) against the same computation in Float64.
  const std::vector<double> xs = pseudo_random(4 * 3 * 25, 58), gs = pseudo_random(4 * 3 * 25, 59);
  std::vector<std::vector<double>> grads[2];
  for (int i = 0; i < 2; ++i) {
    const TensorOptions opt{.dtype = i == 0 ? DType::Float32 : DType::Float64, .requires_grad = true};
    Tensor x = tensor(xs, {4, 3, 5, 5}, opt), weight = tensor({0.5, 1.0, 2.0}, {3}, opt);
    Tensor bias = tensor({0.0, 0.1, 0.2}, {3}, opt);
    backward({batch_norm(x, Tensor(), Tensor(), weight, bias, true)}, {tensor(gs, {4, 3, 5, 5}, {.dtype = opt.dtype})});
    grads[i] = {values(x.grad()), values(weight.grad()), values(bias.grad())};
  }
  for (size_t k = 0; k < 3; ++k) {
    INFO("gradient " << k);
    require_close(grads[0][k], grads[1][k], 1e-4, 1e-5);
  }
}

TEST_CASE("layer_norm: forward over the last two dims matches a per-row reference", "[autograd][norm]") {
  const int64_t rows = 3, features = 2 * 4;
  std::vector<double> x = pseudo_random(size_t(rows * features), 48);
  std::vector<double> weight = pseudo_random(size_t(features), 49), bias = pseudo_random(size_t(features), 50);
  std::vector<double> want(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t f = 0; f < features; ++f) mu += x[size_t(r * features + f)];
    mu /= double(features);
    for (int64_t f = 0; f < features; ++f) var += std::pow(x[size_t(r * features + f)] - mu, 2);
    var /= double(features);
    for (int64_t f = 0; f < features; ++f)
      want[size_t(r * features + f)] =
          (x[size_t(r * features + f)] - mu) / std::sqrt(var + 1e-5) * weight[size_t(f)] + bias[size_t(f)];
  }
  Tensor y = layer_norm(f64(x, {rows, 2, 4}), {2, 4}, f64(weight, {2, 4}), f64(bias, {2, 4}));
  CHECK(y.shape() == Shape{rows, 2, 4});
  require_close(y, want, 1e-10, 1e-12);
}

TEST_CASE("layer_norm: without weight and bias each row has mean 0 and variance 1", "[autograd][norm]") {
  Tensor y = layer_norm(tensor(pseudo_random(20, 51), {4, 5}), {5}, Tensor(), Tensor(), 0.0);
  std::vector<double> v = values(y);
  for (size_t r = 0; r < 4; ++r) {
    double mu = 0, var = 0;
    for (size_t f = 0; f < 5; ++f) mu += v[r * 5 + f] / 5;
    for (size_t f = 0; f < 5; ++f) var += (v[r * 5 + f] - mu) * (v[r * 5 + f] - mu) / 5;
    CHECK(std::abs(mu) < 1e-6);
    CHECK(std::abs(var - 1) < 1e-5);
  }
}

TEST_CASE("layer_norm: shape errors name normalized_shape and the input shape", "[autograd][norm]") {
  require_error([] { layer_norm(zeros({2, 3}), {4}); }, {"layer_norm", "[4]", "[2, 3]"});
  require_error([] { layer_norm(zeros({3}), {1, 3}); }, {"[1, 3]", "[3]"});
  require_error([] { layer_norm(zeros({2, 3}), {3}, zeros({2})); }, {"weight", "[2]", "[3]"});
}

TEST_CASE("layer_norm: gradcheck of input, weight and bias", "[autograd][norm]") {
  Tensor x = f64(pseudo_random(18, 52), {3, 2, 3}, true);
  Tensor weight = f64(pseudo_random(3, 53), {3}, true), bias = f64(pseudo_random(3, 54), {3}, true);
  CHECK(gradcheck([](const TensorList& in) { return layer_norm(in[0], {3}, in[1], in[2]); }, {x, weight, bias}));
}

TEST_CASE("layer_norm: gradcheck over two trailing dims of a transposed input, and an empty input",
          "[autograd][norm]") {
  Tensor base = f64(pseudo_random(24, 55), {4, 3, 2}, true);
  Tensor weight = f64(pseudo_random(6, 56), {3, 2}, true), bias = f64(pseudo_random(6, 57), {3, 2}, true);
  // (2, 3, 4) transposed to (4, 3, 2), normalized over (3, 2): the op reads a non-contiguous input.
  CHECK(gradcheck([](const TensorList& in) { return layer_norm(transpose(in[0], 0, 2), {3, 2}, in[1], in[2]); },
                  {f64(pseudo_random(24, 58), {2, 3, 4}, true), weight, bias}));
  CHECK(gradcheck([](const TensorList& in) { return layer_norm(in[0], {3, 2}, in[1], in[2]); }, {base, weight, bias}));
  Tensor empty = zeros({0, 3, 2}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor y = layer_norm(empty, {3, 2}, weight, bias);
  REQUIRE(y.shape() == Shape{0, 3, 2});
  sum(y).backward();
  REQUIRE(values(weight.grad()) == std::vector<double>(6, 0.0));
}
