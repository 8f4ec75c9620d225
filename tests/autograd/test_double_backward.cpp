// Higher-order gradients (autograd/tape.h, Higher-order gradients): create_graph records the
// backward, gradgradcheck checks second derivatives against differences, and an op whose
// backward cannot be differentiated is an error naming it, never a silent zero.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

Tensor int64s(const std::vector<int64_t>& values, const Shape& shape) {
  return tensor(values, shape, {.dtype = DType::Int64});
}

void check2(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs) {
  REQUIRE(gradgradcheck(fn, inputs));
}

}  // namespace

TEST_CASE("create_graph: the gradient of x^3 is 3x^2, and its gradient 6x", "[autograd][double_backward]") {
  Tensor x = tensor({1.0, -2.0, 0.5}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor y = sum(mul(mul(x, x), x));
  const Tensor dx = grad({y}, {}, {x}, false, true)[0];
  REQUIRE(dx.requires_grad());
  CHECK(values(dx) == std::vector<double>{3.0, 12.0, 0.75});
  const Tensor ddx = grad({sum(dx)}, {}, {x})[0];
  CHECK(values(ddx) == std::vector<double>{6.0, -12.0, 3.0});
  // Without create_graph the gradient is a plain tensor.
  CHECK_FALSE(grad({sum(mul(x, x))}, {}, {x})[0].requires_grad());
}

TEST_CASE("create_graph through backward(): a gradient penalty reaches the parameters", "[autograd][double_backward]") {
  // loss = sum(sin(x W)) + |d loss0 / dx|^2: the penalty's gradient in W needs second derivatives.
  Tensor w = leaf({3, 2}, 1), x = leaf({4, 3}, 2);
  const Tensor out = sum(sin(matmul(x, w)));
  out.backward(false, true);
  const Tensor gx = x.grad();
  REQUIRE(gx.requires_grad());
  x.set_grad(Tensor());
  w.set_grad(Tensor());
  sum(mul(gx, gx)).backward();
  REQUIRE(w.grad().defined());
  // The penalty's gradients in w and x against differences.
  REQUIRE(gradcheck([](const TensorList& in) {
    EnableGradGuard recording;  // gradcheck's differences run under NoGradGuard
    const Tensor g = grad({sum(sin(matmul(in[1], in[0])))}, {}, {in[1]}, false, true)[0];
    return sum(mul(g, g));
  }, {w, x}));
}

TEST_CASE("gradgradcheck: arithmetic, math, reductions, views and matmul", "[autograd][double_backward]") {
  check2([](const TensorList& in) { return mul(in[0], in[1]); }, {leaf({3, 1}, 3), leaf({2, 3, 4}, 4)});
  check2([](const TensorList& in) { return mul(add(in[0], in[1]), sub(in[0], 2.0)); }, {leaf({2, 3}, 5), leaf({3}, 6)});
  check2([](const TensorList& in) { return pow(in[0], 3.0) * 0.5 - in[0]; }, {leaf({5}, 7)});
  check2([](const TensorList& in) { return sin(in[0]) * cos(in[1]); }, {leaf({4}, 8), leaf({4}, 9)});
  check2([](const TensorList& in) { return log(in[0]) * erf(in[0]) + log1p(in[0]); }, {leaf({4}, 10, 0.5, 2.0)});
  check2([](const TensorList& in) { return mean(mul(in[0], in[0]), {1}); }, {leaf({3, 4}, 11)});
  check2([](const TensorList& in) { return sum(mul(transpose(in[0], 0, 1), reshape(in[1], {4, 3})), {0}); },
         {leaf({3, 4}, 12), leaf({12}, 13)});
  check2([](const TensorList& in) { return mul(expand(in[0], {3, 4}), squeeze(unsqueeze(in[0], 0), 0)); },
         {leaf({3, 1}, 14)});
  check2([](const TensorList& in) { return matmul(sin(in[0]), matmul(in[0], in[1])); },
         {leaf({3, 3}, 15), leaf({3, 2}, 16)});
  check2([](const TensorList& in) { return mul(maximum(in[0], in[1]), clamp(in[0], -0.5, 0.5)); },
         {leaf({6}, 17), leaf({6}, 18)});
  check2([](const TensorList& in) { return where(gt(in[0].detach(), 0.0), mul(in[0], in[1]), in[1]); },
         {leaf({5}, 19), leaf({5}, 20)});
}

TEST_CASE("gradgradcheck: index_select, index_add, gather, scatter_add, cumsum, sort and topk",
          "[autograd][double_backward]") {
  const Tensor rows = int64s({2, 0, 2}, {3});
  const Tensor picks = int64s({1, 1, 0, 2, 0, 0}, {2, 3});
  check2([&](const TensorList& in) { return mul(index_select(in[0], 0, rows), in[0].sum()); }, {leaf({3, 2}, 21)});
  check2([&](const TensorList& in) { return index_add(mul(in[0], in[0]), 0, rows, sin(in[1])); },
         {leaf({3, 2}, 22), leaf({3, 2}, 23)});
  check2([&](const TensorList& in) { return mul(gather(in[0], 1, picks), gather(in[0], 1, picks)); },
         {leaf({2, 3}, 24)});
  check2([&](const TensorList& in) { return scatter_add(in[0], 1, picks, mul(in[1], in[1])); },
         {leaf({2, 3}, 25), leaf({2, 3}, 26)});
  check2([](const TensorList& in) { return cumsum(mul(in[0], in[0]), 1); }, {leaf({2, 4}, 27)});
  check2([](const TensorList& in) { return mul(sort(in[0], 1).values, in[0]); }, {leaf({2, 4}, 28)});
  check2([](const TensorList& in) { return pow(topk(in[0], 2, 0).values, 2.0); }, {leaf({4, 3}, 29)});
}

TEST_CASE("create_graph: a second derivative through an op that does not support it names the op",
          "[autograd][double_backward]") {
  for (const auto& [name, fn] : std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>>{
           {"exp", [](const Tensor& x) { return exp(x); }},
           {"tanh", [](const Tensor& x) { return tanh(x); }},
           {"relu", [](const Tensor& x) { return relu(x); }},
           {"softmax", [](const Tensor& x) { return softmax(x, 0); }}}) {
    INFO(name);
    Tensor x = leaf({4}, 30);
    const Tensor g = grad({sum(mul(fn(x), x))}, {}, {x}, false, true)[0];
    REQUIRE(g.requires_grad());  // first derivatives are right and recorded ...
    require_error([&] { grad({sum(g)}, {}, {x}); }, {"second derivative", "'" + name + "'"});
    require_error([&] { gradgradcheck([&](const TensorList& in) { return fn(in[0]); }, {leaf({3}, 31)}); },
                  {"'" + name + "'"});
  }
}

TEST_CASE("gradgradcheck catches a backward marked twice differentiable that is not", "[autograd][double_backward]") {
  // x^2 whose backward reads a detached x: first derivatives right, second ones 0 instead of 2.
  const auto square = [](const Tensor& x) {
    Tensor out = mul(x.detach(), x.detach());
    if (any_requires_grad({&x}))
      record("square", {out}, {x}, [x](const TensorList& g) -> TensorList { return {mul(mul(g[0], x.detach()), 2.0)}; },
             Saves::Inputs, true);
    return out;
  };
  CHECK(gradcheck([&](const TensorList& in) { return square(in[0]); }, {leaf({3}, 32)}));
  require_error([&] { gradgradcheck([&](const TensorList& in) { return square(in[0]); }, {leaf({3}, 33)}); },
                {"gradcheck", "analytic gradient", "numeric"});
}

TEST_CASE("create_graph gradients of two leaves are distinct tensors, and later passes add out of place",
          "[autograd][double_backward]") {
  Tensor a = leaf({3}, 34), b = leaf({3}, 35), c = leaf({3}, 36);
  sum(mul(add(a, b), c)).backward(false, true);  // add's backward hands one tensor to both inputs
  REQUIRE(a.grad().requires_grad());
  CHECK_FALSE(a.grad().is_same(b.grad()));
  CHECK(values(a.grad()) == values(c));
  const Tensor first = a.grad();
  sum(mul(a, c)).backward();  // a plain pass onto a recorded gradient
  CHECK(values(first) == values(c));  // untouched: the sum is a new tensor
  CHECK(values(a.grad()) == values(mul(c, 2.0)));
  // zero_grad(false) drops the recorded history rather than filling a tensor the graph saved.
  optim::SGD sgd(std::vector<Tensor>{a, b, c}, {.lr = 0.1});
  sgd.zero_grad(false);
  CHECK_FALSE(a.grad().requires_grad());
  CHECK(values(a.grad()) == std::vector<double>(3, 0.0));
}

TEST_CASE("sort's gradient keeps its own indices: writing into the returned ones changes nothing",
          "[autograd][index]") {
  Tensor x = tensor({3.0, 1.0, 2.0}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  const ValuesIndices sorted = sort(x);
  copy_(sorted.indices, zeros({3}, {.dtype = DType::Int64}));
  mul(sorted.values, tensor({1.0, 2.0, 3.0}, {3}, {.dtype = DType::Float64})).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{3, 1, 2});
}
