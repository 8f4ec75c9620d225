// Losses (autograd/loss_ops.cpp, kernels/cpu/loss.cpp): cross_entropy and mse_loss against
// naive loops, hand-computed values, PyTorch's edge cases (one row, N = 0), errors, and
// gradients (the softmax-minus-one-hot formula written out, and float64 gradcheck).
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// Mean over rows of log(sum_c exp(x[n, c])) - x[n, t[n]], by the definition (no max shift: the
// test data is small).
double cross_entropy_ref(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t rows, int64_t cols) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[size_t(r * cols + c)]);
    total += std::log(s) - x[size_t(r * cols + t[size_t(r)])];
  }
  return total / double(rows);
}

// d(mean loss)/dx = (softmax - onehot) / N, by the definition.
std::vector<double> cross_entropy_grad_ref(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t rows,
                                           int64_t cols) {
  std::vector<double> g(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[size_t(r * cols + c)]);
    for (int64_t c = 0; c < cols; ++c)
      g[size_t(r * cols + c)] = (std::exp(x[size_t(r * cols + c)]) / s - (c == t[size_t(r)] ? 1.0 : 0.0)) / double(rows);
  }
  return g;
}

// Int64 tensors (mg::tensor converts to options.dtype, Float32 by default).
Tensor int64s(const std::vector<int64_t>& values, const Shape& shape) {
  return tensor(values, shape, {.dtype = DType::Int64});
}

std::vector<int64_t> some_targets(int64_t rows, int64_t cols) {
  std::vector<int64_t> t(size_t(rows), 0);
  for (int64_t r = 0; r < rows; ++r) t[size_t(r)] = (r * 5 + 3) % cols;
  return t;
}

}  // namespace

TEST_CASE("cross_entropy: forward matches a naive log-sum-exp, Float32 and Float64", "[autograd][loss]") {
  const int64_t rows = 6, cols = 7;
  std::vector<double> x = pseudo_random(size_t(rows * cols), 3);
  for (double& v : x) v *= 4;
  std::vector<int64_t> t = some_targets(rows, cols);
  const double want = cross_entropy_ref(x, t, rows, cols);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor loss = cross_entropy(tensor(x, {rows, cols}, {.dtype = dtype}), int64s(t, {rows}));
    CHECK(loss.dim() == 0);
    CHECK(loss.dtype() == dtype);
    require_close(loss, {want}, dtype == DType::Float32 ? 1e-6 : 1e-12, 1e-7);
  }
}

TEST_CASE("cross_entropy: one row against a hand-computed value", "[autograd][loss]") {
  // log(e^1 + e^2 + e^3) - 3 = log(1 + e^-1 + e^-2)
  Tensor loss = cross_entropy(tensor({1.0, 2.0, 3.0}, {1, 3}, {.dtype = DType::Float64}), int64s({2}, {1}));
  require_close(loss, {std::log(1 + std::exp(-1.0) + std::exp(-2.0))}, 1e-14, 0);
}

TEST_CASE("cross_entropy: huge logits stay finite (the row max is subtracted)", "[autograd][loss]") {
  // Row 0: the target holds the max, loss = log(1 + e^-2000 + e^-1000) = 0. Row 1: loss = 2000.
  Tensor logits = tensor({1000.0, -1000.0, 0.0, 1000.0, -1000.0, 0.0}, {2, 3});
  Tensor loss = cross_entropy(logits, int64s({0, 1}, {2}));
  require_close(loss, {1000.0}, 1e-6, 0);
}

TEST_CASE("cross_entropy: an empty batch gives NaN, as PyTorch's mean", "[autograd][loss]") {
  Tensor loss = cross_entropy(zeros({0, 4}), int64s({}, {0}));
  CHECK(std::isnan(loss.item<double>()));
}

TEST_CASE("cross_entropy: non-contiguous logits", "[autograd][loss]") {
  const int64_t rows = 5, cols = 4;
  std::vector<double> xt = pseudo_random(size_t(rows * cols), 8);  // stored (C, N)
  std::vector<double> x(xt.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[size_t(r * cols + c)] = xt[size_t(c * rows + r)];
  std::vector<int64_t> t = some_targets(rows, cols);
  Tensor logits = tensor(xt, {cols, rows}, {.dtype = DType::Float64}).transpose(0, 1);
  REQUIRE_FALSE(logits.is_contiguous());
  require_close(cross_entropy(logits, int64s(t, {rows})), {cross_entropy_ref(x, t, rows, cols)}, 1e-12, 0);
}

TEST_CASE("cross_entropy: a target out of range names it and C", "[autograd][loss]") {
  Tensor logits = zeros({3, 5});
  require_error([&] { cross_entropy(logits, int64s({0, 5, 1}, {3})); }, {"cross_entropy", "target 5", "C = 5"});
  require_error([&] { cross_entropy(logits, int64s({0, 1, -1}, {3})); }, {"target -1", "C = 5"});
}

TEST_CASE("cross_entropy: bad shapes and dtypes are errors naming them", "[autograd][loss]") {
  require_error([] { cross_entropy(zeros({4}), int64s({0}, {1})); }, {"cross_entropy", "(N, C)", "[4]"});
  require_error([] { cross_entropy(zeros({2, 3}), int64s({0, 1, 2}, {3})); }, {"[3]", "[2, 3]"});
  require_error([] { cross_entropy(zeros({2, 3}), zeros({2})); }, {"Int64", "Float32"});
  require_error([] { cross_entropy(zeros({2, 3}, {.dtype = DType::Int64}), int64s({0, 1}, {2})); }, {"Int64"});
}

TEST_CASE("cross_entropy_flat: (B, T, V) with (B, T) is the mean over every position, shapes must match",
          "[autograd][loss]") {
  const int64_t b = 2, t = 3, v = 5;
  const std::vector<double> x = pseudo_random(size_t(b * t * v), 11);
  const std::vector<int64_t> y = some_targets(b * t, v);
  Tensor logits = tensor(x, {b, t, v}, {.requires_grad = true});
  const Tensor loss = cross_entropy_flat(logits, int64s(y, {b, t}));
  require_close(loss, {cross_entropy_ref(x, y, b * t, v)}, 1e-5, 1e-6);
  loss.backward();
  CHECK(logits.grad().shape() == Shape{b, t, v});
  require_close(values(logits.grad()), cross_entropy_grad_ref(x, y, b * t, v), 1e-5, 1e-7);
  // (N, C) and (N): cross_entropy itself.
  CHECK(values(cross_entropy_flat(tensor(x, {b * t, v}), int64s(y, {b * t}))) ==
        values(cross_entropy(tensor(x, {b * t, v}), int64s(y, {b * t}))));
  require_error([&] { cross_entropy_flat(zeros({b, t, v}), int64s(y, {t, b})); }, {"[3, 2]", "[2, 3, 5]", "expected [2, 3]"});
  require_error([&] { cross_entropy_flat(zeros({b, t, v}), int64s(y, {b * t})); }, {"[6]", "expected [2, 3]"});
}

TEST_CASE("cross_entropy: backward is (softmax - onehot) / N", "[autograd][loss]") {
  const int64_t rows = 4, cols = 6;
  std::vector<double> x = pseudo_random(size_t(rows * cols), 5);
  std::vector<int64_t> t = some_targets(rows, cols);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor logits = tensor(x, {rows, cols}, {.dtype = dtype, .requires_grad = true});
    cross_entropy(logits, int64s(t, {rows})).backward();
    REQUIRE(logits.grad().defined());
    CHECK(logits.grad().shape() == Shape{rows, cols});
    require_close(logits.grad(), cross_entropy_grad_ref(x, t, rows, cols), 1e-5, 1e-7);
  }
}

TEST_CASE("cross_entropy: masked (-inf) logits get exactly 0 gradient, at every row length", "[autograd][loss]") {
  // Float32 rows run their exponentials in 16-lane vector loops (kernels/cpu/exp_rows.h).
  for (int64_t cols = 2; cols <= 37; ++cols) {
    INFO("cols " << cols);
    const int64_t rows = 3;
    std::vector<double> x = pseudo_random(size_t(rows * cols), uint64_t(cols));
    const std::vector<int64_t> t = some_targets(rows, cols);
    for (int64_t i = 1; i < rows * cols; i += 4)
      if (i % cols != t[size_t(i / cols)]) x[size_t(i)] = -std::numeric_limits<double>::infinity();
    Tensor logits = tensor(x, {rows, cols}, {.requires_grad = true});
    Tensor loss = cross_entropy(logits, int64s(t, {rows}));
    require_close(loss, {cross_entropy_ref(x, t, rows, cols)}, 1e-5, 1e-6);
    loss.backward();
    const std::vector<double> got = values(logits.grad()), want = cross_entropy_grad_ref(x, t, rows, cols);
    require_close(got, want, 1e-5, 1e-7);
    for (size_t i = 0; i < x.size(); ++i)
      if (std::isinf(x[i])) REQUIRE(got[i] == 0.0);
  }
}

TEST_CASE("cross_entropy: the gradient scales with the upstream gradient", "[autograd][loss]") {
  std::vector<double> x = pseudo_random(6, 12);
  Tensor logits = tensor(x, {2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  (cross_entropy(logits, int64s({2, 0}, {2})) * 3.0).backward();
  std::vector<double> want = cross_entropy_grad_ref(x, {2, 0}, 2, 3);
  for (double& g : want) g *= 3;
  require_close(logits.grad(), want, 1e-12, 1e-14);
}

TEST_CASE("cross_entropy: gradcheck of the logits", "[autograd][loss]") {
  Tensor logits = tensor(pseudo_random(15, 21), {5, 3}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor targets = int64s({0, 2, 1, 1, 0}, {5});
  CHECK(gradcheck([&](const TensorList& in) { return cross_entropy(in[0], targets); }, {logits}));
}

TEST_CASE("mse_loss: forward matches a naive mean of squares", "[autograd][loss]") {
  std::vector<double> a = pseudo_random(12, 30), b = pseudo_random(12, 31);
  double want = 0;
  for (size_t i = 0; i < a.size(); ++i) want += (a[i] - b[i]) * (a[i] - b[i]);
  want /= double(a.size());
  Tensor loss = mse_loss(tensor(a, {3, 4}), tensor(b, {3, 4}));
  CHECK(loss.dim() == 0);
  require_close(loss, {want}, 1e-6, 1e-8);
}

TEST_CASE("mse_loss: mismatched shapes are an error naming both", "[autograd][loss]") {
  require_error([] { mse_loss(zeros({2, 3}), zeros({3, 2})); }, {"mse_loss", "[2, 3]", "[3, 2]"});
  require_error([] { mse_loss(zeros({3}), zeros({1, 3})); }, {"[3]", "[1, 3]"});
}

TEST_CASE("mse_loss: backward is 2 (input - target) / n for both inputs", "[autograd][loss]") {
  std::vector<double> a = pseudo_random(6, 32), b = pseudo_random(6, 33);
  Tensor input = tensor(a, {2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor target = tensor(b, {2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  mse_loss(input, target).backward();
  std::vector<double> want(a.size()), want_neg(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    want[i] = 2 * (a[i] - b[i]) / 6.0;
    want_neg[i] = -want[i];
  }
  require_close(input.grad(), want, 1e-12, 1e-14);
  require_close(target.grad(), want_neg, 1e-12, 1e-14);
}

TEST_CASE("mse_loss: gradcheck of input and target", "[autograd][loss]") {
  Tensor input = tensor(pseudo_random(8, 34), {2, 4}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor target = tensor(pseudo_random(8, 35), {2, 4}, {.dtype = DType::Float64, .requires_grad = true});
  CHECK(gradcheck([](const TensorList& in) { return mse_loss(in[0], in[1]); }, {input, target}));
}
