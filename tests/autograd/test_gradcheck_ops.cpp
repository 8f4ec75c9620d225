// tests/autograd/test_gradcheck_ops.cpp — the derivative of every differentiable op of ops.h
// (and split/chunk) against float64 central differences (mg::gradcheck), on contiguous,
// non-contiguous (transposed, sliced) and broadcast inputs; plus hand-computed gradients where
// PyTorch fixes a convention at a kink (ties of maximum/max, clamp boundaries, relu at 0).
#include <catch2/catch.hpp>

#include <functional>
#include <vector>

#include "core/cpu_devices_guard.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// A non-contiguous Float64 leaf of shape (cols, rows): the transpose of a (rows, cols) tensor.
Tensor transposed_leaf(int64_t rows, int64_t cols, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v = pseudo_random(size_t(rows * cols), seed);
  for (double& x : v) x = lo + (x + 1.0) * 0.5 * (hi - lo);
  Tensor t = tensor(v, {rows, cols}, {.dtype = DType::Float64}).transpose(0, 1);
  REQUIRE_FALSE(t.is_contiguous());
  return t.requires_grad_();
}

// Every other column of a (rows, 2 * cols) tensor: a non-contiguous (rows, cols) leaf.
Tensor sliced_leaf(int64_t rows, int64_t cols, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v = pseudo_random(size_t(rows * cols * 2), seed);
  for (double& x : v) x = lo + (x + 1.0) * 0.5 * (hi - lo);
  Tensor t = tensor(v, {rows, 2 * cols}, {.dtype = DType::Float64}).slice(1, 0, 2 * cols, 2);
  REQUIRE_FALSE(t.is_contiguous());
  return t.requires_grad_();
}

void check(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs) {
  REQUIRE(gradcheck(fn, inputs));
}

Tensor f64(const std::vector<double>& v, const Shape& shape) {
  return tensor(v, shape, {.dtype = DType::Float64, .requires_grad = true});
}

}  // namespace

// ---- arithmetic ----

TEST_CASE("gradcheck add with broadcasting", "[autograd]") {
  check([](const TensorList& in) { return add(in[0], in[1]); }, {leaf({3, 1, 4}, 1), leaf({2, 4}, 2)});
  check([](const TensorList& in) { return in[0] + in[1]; }, {transposed_leaf(4, 3, 3), leaf({4}, 4)});
}

TEST_CASE("gradcheck add and sub with a scalar", "[autograd]") {
  check([](const TensorList& in) { return add(in[0], 2.5); }, {leaf({2, 3}, 1)});
  check([](const TensorList& in) { return 2.5 + in[0]; }, {sliced_leaf(2, 3, 2)});
  check([](const TensorList& in) { return sub(in[0], 1.5); }, {leaf({2, 3}, 3)});
  check([](const TensorList& in) { return 1.5 - in[0]; }, {transposed_leaf(2, 3, 4)});
}

TEST_CASE("gradcheck sub with broadcasting", "[autograd]") {
  check([](const TensorList& in) { return sub(in[0], in[1]); }, {leaf({2, 1}, 1), leaf({3}, 2)});
  check([](const TensorList& in) { return in[0] - in[1]; }, {sliced_leaf(3, 2, 3), leaf({1, 2}, 4)});
}

TEST_CASE("gradcheck mul with broadcasting", "[autograd]") {
  check([](const TensorList& in) { return mul(in[0], in[1]); }, {leaf({4, 1, 3}, 1), leaf({2, 1}, 2)});
  check([](const TensorList& in) { return in[0] * in[0]; }, {transposed_leaf(3, 2, 3)});
}

TEST_CASE("gradcheck mul and div by a scalar", "[autograd]") {
  check([](const TensorList& in) { return mul(in[0], -3.0); }, {leaf({5}, 1)});
  check([](const TensorList& in) { return 0.5 * in[0]; }, {sliced_leaf(2, 2, 2)});
  check([](const TensorList& in) { return div(in[0], 4.0); }, {leaf({2, 3}, 3)});
}

TEST_CASE("gradcheck div with broadcasting", "[autograd]") {
  check([](const TensorList& in) { return div(in[0], in[1]); }, {leaf({2, 3}, 1), leaf({3}, 2, 1.0, 2.0)});
  check([](const TensorList& in) { return in[0] / in[1]; }, {leaf({3, 1}, 3), transposed_leaf(2, 3, 4, 0.5, 2.0)});
}

TEST_CASE("gradcheck scalar divided by a tensor", "[autograd]") {
  check([](const TensorList& in) { return 3.0 / in[0]; }, {leaf({2, 3}, 1, 0.5, 2.0)});
}

TEST_CASE("gradcheck pow of two tensors", "[autograd]") {
  check([](const TensorList& in) { return pow(in[0], in[1]); }, {leaf({2, 3}, 1, 0.5, 2.0), leaf({3}, 2)});
  check([](const TensorList& in) { return pow(in[0], in[1]); },
        {transposed_leaf(3, 2, 3, 0.5, 2.0), leaf({2, 3}, 4, -2.0, 2.0)});
}

TEST_CASE("gradcheck pow with a scalar exponent", "[autograd]") {
  for (double e : {2.0, 3.0, 0.5, -1.0, -2.5}) {
    INFO("exponent " << e);
    check([e](const TensorList& in) { return pow(in[0], e); }, {leaf({2, 3}, 1, 0.5, 2.0)});
  }
  check([](const TensorList& in) { return in[0].pow(2.0); }, {leaf({4}, 2, -2.0, 2.0)});
}

TEST_CASE("pow gradients at PyTorch's conventions", "[autograd]") {
  Tensor x = f64({0.0, 2.0}, {2});
  pow(x, 0.0).sum().backward();  // d/dx x^0 = 0 everywhere, also at 0
  require_close(x.grad().defined() ? x.grad() : zeros_like(x), {0.0, 0.0});

  Tensor a = f64({0.0, 0.0}, {2}), b = f64({2.0, 1.0}, {2});
  pow(a, b).sum().backward();  // d/db a^b at a = 0, b >= 0 is 0, not 0 * -inf
  require_close(b.grad(), {0.0, 0.0});
  require_close(a.grad(), {0.0, 1.0});
}

TEST_CASE("gradcheck maximum and minimum", "[autograd]") {
  check([](const TensorList& in) { return maximum(in[0], in[1]); }, {leaf({2, 3}, 1), leaf({3}, 2)});
  check([](const TensorList& in) { return minimum(in[0], in[1]); }, {transposed_leaf(3, 2, 3), leaf({2, 1}, 4)});
}

TEST_CASE("maximum and minimum split the gradient in half on ties", "[autograd]") {
  Tensor a = f64({1, 2, 3}, {3}), b = f64({1, 0, 5}, {3});
  maximum(a, b).sum().backward();
  require_close(a.grad(), {0.5, 1, 0});
  require_close(b.grad(), {0.5, 0, 1});
  a.set_grad(Tensor());
  b.set_grad(Tensor());
  minimum(a, b).sum().backward();
  require_close(a.grad(), {0.5, 0, 1});
  require_close(b.grad(), {0.5, 1, 0});
}

// ---- unary math ----

TEST_CASE("gradcheck neg", "[autograd]") {
  check([](const TensorList& in) { return -in[0]; }, {transposed_leaf(2, 3, 1)});
}

TEST_CASE("gradcheck exp", "[autograd]") {
  check([](const TensorList& in) { return exp(in[0]); }, {sliced_leaf(3, 2, 1)});
}

TEST_CASE("gradcheck log", "[autograd]") {
  check([](const TensorList& in) { return log(in[0]); }, {transposed_leaf(2, 3, 1, 0.2, 3.0)});
}

TEST_CASE("gradcheck sqrt", "[autograd]") {
  check([](const TensorList& in) { return sqrt(in[0]); }, {leaf({2, 3}, 1, 0.2, 3.0)});
}

TEST_CASE("gradcheck abs", "[autograd]") {
  check([](const TensorList& in) { return abs(in[0]); }, {transposed_leaf(3, 3, 1)});
  Tensor x = f64({-2, 0, 3}, {3});
  abs(x).sum().backward();
  require_close(x.grad(), {-1, 0, 1});  // sign(0) = 0
}

TEST_CASE("gradcheck relu", "[autograd]") {
  check([](const TensorList& in) { return relu(in[0]); }, {sliced_leaf(2, 4, 1)});
  Tensor x = f64({-1, 0, 2}, {3});
  relu(x).sum().backward();
  require_close(x.grad(), {0, 0, 1});  // 0 at 0, as PyTorch
}

TEST_CASE("gradcheck gelu", "[autograd]") {
  check([](const TensorList& in) { return gelu(in[0]); }, {leaf({7}, 1, -4.0, 4.0)});
  check([](const TensorList& in) { return in[0].gelu(); }, {transposed_leaf(2, 3, 2)});
}

TEST_CASE("gradcheck sigmoid", "[autograd]") {
  check([](const TensorList& in) { return sigmoid(in[0]); }, {leaf({2, 3}, 1, -5.0, 5.0)});
}

TEST_CASE("gradcheck sin, cos, erf, expm1 and log1p", "[autograd]") {
  check([](const TensorList& in) { return sin(in[0]); }, {transposed_leaf(3, 2, 2, -4.0, 4.0)});
  check([](const TensorList& in) { return cos(in[0]); }, {sliced_leaf(2, 3, 3, -4.0, 4.0)});
  check([](const TensorList& in) { return erf(in[0]); }, {leaf({7}, 4, -2.5, 2.5)});
  check([](const TensorList& in) { return expm1(in[0]); }, {leaf({2, 3}, 5, -3.0, 3.0)});
  check([](const TensorList& in) { return log1p(in[0]); }, {leaf({2, 3}, 6, -0.9, 3.0)});
}

TEST_CASE("gradcheck logsumexp, var, std and masked_fill", "[autograd]") {
  check([](const TensorList& in) { return logsumexp(in[0], {1}); }, {transposed_leaf(3, 4, 7, -3.0, 3.0)});
  check([](const TensorList& in) { return logsumexp(in[0], {}, true); }, {leaf({2, 3}, 8)});
  check([](const TensorList& in) { return var(in[0], {0}); }, {sliced_leaf(4, 3, 9)});
  check([](const TensorList& in) { return var(in[0], {}, 0); }, {leaf({2, 3}, 10)});
  check([](const TensorList& in) { return mg::std(in[0], {1}, 1, true); }, {leaf({3, 4}, 11)});
  check([](const TensorList& in) { return masked_fill(in[0], gt(in[0].detach(), 0.2), 7.0); }, {leaf({3, 4}, 12)});
}

TEST_CASE("gradcheck index_select, index_add, gather, scatter_add (repeated indices), cumsum, sort and topk",
          "[autograd]") {
  const Tensor rows = tensor(std::vector<int64_t>{2, 0, 2, 1}, {4}, {.dtype = DType::Int64});
  check([&](const TensorList& in) { return index_select(in[0], 1, rows); }, {transposed_leaf(4, 3, 13)});
  check([&](const TensorList& in) { return index_add(in[0], 0, rows, in[1]); }, {leaf({3, 2}, 14), leaf({4, 2}, 15)});
  const Tensor picks = tensor(std::vector<int64_t>{1, 1, 0, 2, 2, 2, 0, 1}, {2, 4}, {.dtype = DType::Int64});
  check([&](const TensorList& in) { return gather(in[0], 1, picks); }, {sliced_leaf(2, 3, 16)});
  check([&](const TensorList& in) { return scatter_add(in[0], 1, picks, in[1]); }, {leaf({2, 3}, 17), leaf({2, 4}, 18)});
  check([](const TensorList& in) { return cumsum(in[0], 0); }, {transposed_leaf(3, 4, 19)});
  // Distinct values: a perturbation of eps cannot reorder them.
  check([](const TensorList& in) { return sort(in[0], 1, true).values; }, {leaf({3, 5}, 20)});
  check([](const TensorList& in) { return topk(in[0], 2, 0).values; }, {sliced_leaf(4, 3, 21)});
}

TEST_CASE("gradcheck tanh", "[autograd]") {
  check([](const TensorList& in) { return tanh(in[0]); }, {transposed_leaf(3, 2, 1, -3.0, 3.0)});
}

TEST_CASE("gradcheck clamp, and the gradient passes at the bounds", "[autograd]") {
  check([](const TensorList& in) { return clamp(in[0], -0.5, 0.4); }, {leaf({3, 4}, 1)});
  Tensor x = f64({-2, -1, 0, 1, 2}, {5});
  clamp(x, -1, 1).sum().backward();
  require_close(x.grad(), {0, 1, 1, 1, 0});
}

TEST_CASE("gradcheck where with broadcasting", "[autograd]") {
  Tensor cond = tensor<int64_t>({1, 0, 1}, {3}).to(DType::Bool);
  check([cond](const TensorList& in) { return where(cond, in[0], in[1]); }, {leaf({2, 3}, 1), leaf({2, 1}, 2)});
  Tensor a = f64({1, 2, 3}, {3});
  Tensor b = f64({5}, {1});
  where(cond, a, b).sum().backward();
  require_close(a.grad(), {1, 0, 1});
  require_close(b.grad(), {1});
}

// ---- reductions ----

TEST_CASE("gradcheck sum over all and over dims", "[autograd]") {
  check([](const TensorList& in) { return sum(in[0]); }, {leaf({2, 3}, 1)});
  check([](const TensorList& in) { return sum(in[0], {0, 2}); }, {leaf({2, 3, 4}, 2)});
  check([](const TensorList& in) { return sum(in[0], {-1}, true); }, {transposed_leaf(4, 3, 3)});
  check([](const TensorList& in) { return in[0].sum({1}); }, {sliced_leaf(3, 2, 4)});
}

TEST_CASE("gradcheck mean over all and over dims", "[autograd]") {
  check([](const TensorList& in) { return mean(in[0]); }, {transposed_leaf(2, 3, 1)});
  check([](const TensorList& in) { return mean(in[0], {1}, true); }, {leaf({2, 3, 4}, 2)});
  check([](const TensorList& in) { return in[0].mean({0, 1}); }, {leaf({2, 3, 2}, 3)});
}

TEST_CASE("gradcheck max and min over dims", "[autograd]") {
  check([](const TensorList& in) { return max(in[0], {1}); }, {leaf({3, 4}, 1)});
  check([](const TensorList& in) { return min(in[0], {0}, true); }, {transposed_leaf(3, 4, 2)});
  check([](const TensorList& in) { return max(in[0]); }, {leaf({2, 3}, 3)});
  check([](const TensorList& in) { return min(in[0], {0, 2}); }, {leaf({2, 3, 2}, 4)});
}

TEST_CASE("max over one dim sends the gradient to the first maximum", "[autograd]") {
  Tensor x = f64({1, 3, 3, 2, 2, 0}, {2, 3});
  max(x, {1}).sum().backward();
  require_close(x.grad(), {0, 1, 0, 1, 0, 0});
  Tensor y = f64({1, 1, 0}, {3});
  min(y, {0}).backward();
  require_close(y.grad(), {0, 0, 1});
}

TEST_CASE("max and min over all dims share the gradient among ties", "[autograd]") {
  Tensor x = f64({1, 3, 3, 2}, {2, 2});
  max(x).backward();
  require_close(x.grad(), {0, 0.5, 0.5, 0});
  Tensor y = f64({0, 1, 0, 0, 2, 2}, {2, 3});
  mul(min(y, {0, 1}), 6.0).backward();
  require_close(y.grad(), {2, 0, 2, 2, 0, 0});
}

TEST_CASE("gradcheck softmax", "[autograd]") {
  check([](const TensorList& in) { return softmax(in[0], -1); }, {leaf({3, 4}, 1, -2.0, 2.0)});
  check([](const TensorList& in) { return softmax(in[0], 0); }, {transposed_leaf(3, 4, 2, -2.0, 2.0)});
}

TEST_CASE("gradcheck log_softmax", "[autograd]") {
  check([](const TensorList& in) { return log_softmax(in[0], 1); }, {leaf({2, 5}, 1, -2.0, 2.0)});
  check([](const TensorList& in) { return log_softmax(in[0], 1); }, {leaf({2, 3, 2}, 2, -2.0, 2.0)});
}

// ---- matmul in every rank combination ----

TEST_CASE("gradcheck matmul of matrices", "[autograd]") {
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf({2, 3}, 1), leaf({3, 4}, 2)});
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {transposed_leaf(3, 2, 3), transposed_leaf(4, 3, 4)});
  // a batch of rows against a column-major weight (a linear layer on a 3-d input)
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf({2, 2, 3}, 7), transposed_leaf(4, 3, 8)});
}

TEST_CASE("gradcheck matmul with vectors", "[autograd]") {
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf({3}, 1), leaf({3}, 2)});
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf({3}, 3), leaf({3, 2}, 4)});
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf({2, 3}, 5), leaf({3}, 6)});
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf({2, 2, 3}, 7), leaf({3}, 8)});
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf({3}, 9), leaf({2, 3, 2}, 10)});
}

TEST_CASE("gradcheck batched matmul with broadcast batch dims", "[autograd]") {
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf({2, 1, 3, 4}, 1), leaf({3, 4, 2}, 2)});
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf({2, 3, 4}, 3), leaf({1, 4, 2}, 4)});
}

TEST_CASE("gradcheck matmul of a batch with a shared matrix", "[autograd]") {
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf({2, 3, 4}, 1), leaf({4, 5}, 2)});
  check([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf({2, 3}, 3), leaf({4, 3, 2}, 4)});
}

// ---- views ----

TEST_CASE("gradcheck reshape and view", "[autograd]") {
  check([](const TensorList& in) { return reshape(in[0], {3, -1}); }, {leaf({2, 3, 2}, 1)});
  check([](const TensorList& in) { return reshape(in[0], {6}); }, {transposed_leaf(2, 3, 2)});  // copies
  check([](const TensorList& in) { return mul(view(in[0], {2, 6}), in[1]); }, {leaf({4, 3}, 3), leaf({6}, 4)});
}

TEST_CASE("gradcheck transpose and permute", "[autograd]") {
  check([](const TensorList& in) { return mul(transpose(in[0], 0, 2), in[1]); },
        {leaf({2, 3, 4}, 1), leaf({4, 3, 2}, 2)});
  check([](const TensorList& in) { return mul(permute(in[0], {2, 0, 1}), in[1]); },
        {leaf({2, 3, 4}, 3), leaf({4, 2, 3}, 4)});
}

TEST_CASE("gradcheck slice with a step", "[autograd]") {
  check([](const TensorList& in) { return slice(in[0], 1, 1, 6, 2); }, {leaf({2, 7}, 1)});
  check([](const TensorList& in) { return slice(in[0], 0, -3, 100); }, {transposed_leaf(3, 5, 2)});
}

TEST_CASE("gradcheck expand", "[autograd]") {
  check([](const TensorList& in) { return mul(expand(in[0], {2, 3, 4}), in[1]); },
        {leaf({3, 1}, 1), leaf({2, 3, 4}, 2)});
}

TEST_CASE("gradcheck squeeze, unsqueeze and flatten", "[autograd]") {
  check([](const TensorList& in) { return mul(squeeze(in[0], 1), in[1]); }, {leaf({3, 1, 2}, 1), leaf({3, 2}, 2)});
  check([](const TensorList& in) { return mul(unsqueeze(in[0], 0), in[1]); }, {leaf({3}, 3), leaf({2, 3}, 4)});
  check([](const TensorList& in) { return mul(flatten(in[0], 1), in[1]); }, {leaf({2, 3, 2}, 5), leaf({6}, 6)});
}

// ---- copies ----

TEST_CASE("gradcheck contiguous and clone", "[autograd]") {
  check([](const TensorList& in) { return mul(contiguous(in[0]), in[1]); }, {transposed_leaf(2, 3, 1), leaf({3, 2}, 2)});
  check([](const TensorList& in) { return mul(clone(in[0]), in[0]); }, {sliced_leaf(2, 2, 3)});
}

TEST_CASE("to(dtype) casts the gradient back", "[autograd]") {
  Tensor x = f64({1, 2, 3}, {3});
  Tensor y = x.to(DType::Float32);
  REQUIRE(y.requires_grad());
  mul(y, 2.0).sum().backward();
  REQUIRE(x.grad().dtype() == DType::Float64);
  require_close(x.grad(), {2, 2, 2});
  REQUIRE_FALSE(x.to(DType::Int64).requires_grad());  // an integral cast ends the graph
  check([](const TensorList& in) { return in[0].to(DType::Float64); }, {leaf({3}, 1)});
}

TEST_CASE("to(device) copies the gradient back to the input's device", "[autograd]") {
  CpuDevicesGuard devices(2);
  Tensor x = f64({1, 2, 3}, {3});
  Tensor y = x.to(Device("cpu:1"));
  REQUIRE(y.device() == Device("cpu:1"));
  mul(y, y).sum().backward();
  REQUIRE(x.grad().device() == Device("cpu:0"));
  require_close(x.grad(), {2, 4, 6});
}

TEST_CASE("gradcheck cat, with inputs that do not require grad", "[autograd]") {
  check([](const TensorList& in) { return cat({in[0], in[1], in[2]}, 1); },
        {leaf({2, 3}, 1), transposed_leaf(2, 2, 2), leaf({2, 2}, 3)});
  Tensor a = f64({1, 2}, {2});
  Tensor b = tensor<double>({3, 4, 5}, {3}, {.dtype = DType::Float64});
  mul(cat({a, b}), tensor<double>({1, 2, 3, 4, 5}, {5}, {.dtype = DType::Float64})).sum().backward();
  require_close(a.grad(), {1, 2});
  REQUIRE_FALSE(b.grad().defined());
}

TEST_CASE("gradcheck stack", "[autograd]") {
  check([](const TensorList& in) { return stack({in[0], in[1]}, 1); }, {leaf({2, 3}, 1), transposed_leaf(3, 2, 2)});
}

TEST_CASE("gradcheck split and chunk", "[autograd]") {
  check(
      [](const TensorList& in) {
        std::vector<Tensor> parts = split(in[0], 2, 1);
        REQUIRE(parts.size() == 3);
        return add(mul(parts[0], parts[1]), sum(parts[2]));
      },
      {leaf({3, 5}, 1)});
  check(
      [](const TensorList& in) {
        std::vector<Tensor> parts = chunk(in[0], 3, 0);
        REQUIRE(parts.size() == 3);
        return mul(mul(parts[0], 2.0), parts[2]);
      },
      {leaf({6, 2}, 2)});
}

TEST_CASE("split and chunk follow torch.split and torch.chunk", "[autograd]") {
  Tensor x = arange(7, {.dtype = DType::Float64});
  std::vector<Tensor> s = split(x, 3);
  REQUIRE(s.size() == 3);
  REQUIRE(s[2].shape() == Shape{1});
  std::vector<Tensor> c = chunk(x, 4);  // ceil(7 / 4) = 2 per chunk -> 4 chunks
  REQUIRE(c.size() == 4);
  REQUIRE(c[3].shape() == Shape{1});
  REQUIRE(chunk(arange(6, {.dtype = DType::Float64}), 4).size() == 3);  // 2 + 2 + 2, as torch.chunk
  REQUIRE(c[1].storage() == x.storage());  // views
  require_error([&] { split(x, 0); }, {"split_size must be positive", "0"});
  require_error([&] { chunk(x, 0); }, {"chunks", "0"});
}

TEST_CASE("gradcheck a composite: a two-layer perceptron", "[autograd]") {
  check(
      [](const TensorList& in) {
        Tensor h = tanh(add(matmul(in[0], in[1]), in[2]));
        return log_softmax(matmul(h, in[3]), 1);
      },
      {leaf({4, 3}, 1), leaf({3, 5}, 2), leaf({5}, 3), leaf({5, 2}, 4)});
}
