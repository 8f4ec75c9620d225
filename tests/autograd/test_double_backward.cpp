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

TEST_CASE("gradgradcheck: ops whose backward reads their output (live outputs)", "[autograd][double_backward]") {
  check2([](const TensorList& in) { return exp(in[0]) * expm1(in[0]); }, {leaf({5}, 40)});
  check2([](const TensorList& in) { return sqrt(in[0]) + sigmoid(in[0]) * tanh(in[0]); }, {leaf({5}, 41, 0.5, 2.0)});
  check2([](const TensorList& in) { return div(in[0], in[1]) + 2.0 / in[1]; },
         {leaf({4}, 42), leaf({4}, 43, 0.5, 2.0)});
  check2([](const TensorList& in) { return pow(in[0], in[1]); }, {leaf({4}, 44, 0.5, 2.0), leaf({4}, 45)});
  check2([](const TensorList& in) { return softmax(in[0], 1) * log_softmax(in[0], 0); }, {leaf({3, 4}, 46)});
  check2([](const TensorList& in) { return abs(in[0]) * relu(in[0]) + gelu(in[0]); }, {leaf({6}, 47)});
  check2([](const TensorList& in) { return mul(max(in[0], {1}), min(in[0], {0, 1})); }, {leaf({3, 4}, 48)});
}

TEST_CASE("create_graph: the second derivative of exp is exp, through the node's live output",
          "[autograd][double_backward]") {
  Tensor x = tensor({0.0, 1.0, -2.0}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor dx = grad({sum(exp(x))}, {}, {x}, false, true)[0];
  const Tensor ddx = grad({sum(dx)}, {}, {x})[0];
  CHECK(values(ddx) == values(exp(x.detach())));
}

TEST_CASE("gradgradcheck: the fused nn ops (linear, norms, cross_entropy, attention, conv, pools, embedding)",
          "[autograd][double_backward]") {
  check2([](const TensorList& in) { return gelu(linear(in[0], in[1], in[2])); },
         {leaf({2, 3, 4}, 50), leaf({5, 4}, 51), leaf({5}, 52)});
  check2([](const TensorList& in) { return layer_norm(in[0], {2, 3}, in[1], in[2]); },
         {leaf({4, 2, 3}, 53), leaf({2, 3}, 54), leaf({2, 3}, 55)});
  check2([](const TensorList& in) { return layer_norm(in[0] * in[0], {3}); }, {leaf({2, 3}, 56)});
  for (bool training : {true, false}) {
    INFO("training " << training);
    const Tensor running_mean = tensor({0.1, -0.2}, {2}, {.dtype = DType::Float64});
    const Tensor running_var = tensor({0.5, 2.0}, {2}, {.dtype = DType::Float64});
    check2([&](const TensorList& in) {
      return batch_norm(in[0], clone(running_mean), clone(running_var), in[1], in[2], training);
    }, {leaf({3, 2, 2}, 57), leaf({2}, 58), leaf({2}, 59)});
  }
  const Tensor targets = int64s({2, 0, 1}, {3});
  check2([&](const TensorList& in) { return cross_entropy(mul(in[0], in[0]), targets); }, {leaf({3, 4}, 60)});
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    check2([&](const TensorList& in) { return scaled_dot_product_attention(in[0], in[1], in[2], causal); },
           {leaf({1, 2, 3, 4}, 61), leaf({1, 2, 3, 4}, 62), leaf({1, 2, 3, 2}, 63)});
    check2([&](const TensorList& in) { return scaled_dot_product_attention(in[0], in[1], in[2], causal, 0.7); },
           {leaf({2, 3, 4}, 64), leaf({2, 4, 4}, 65), leaf({2, 4, 3}, 66)});
  }
  for (const Pool2dOptions& pool : {Pool2dOptions{}, Pool2dOptions{.kernel_size = {3, 2}, .stride = {1, 2},
                                                                   .padding = {1, 1}}}) {
    check2([&](const TensorList& in) { return mul(max_pool2d(in[0], pool), avg_pool2d(in[0], pool)); },
           {leaf({1, 2, 4, 5}, 68)});
  }
  for (const Conv2dOptions& conv : {Conv2dOptions{}, Conv2dOptions{.stride = {2, 1}, .padding = {1, 1},
                                                                   .dilation = {1, 2}, .groups = 2}}) {
    check2([&](const TensorList& in) { return conv2d(in[0], in[1], in[2], conv); },
           {leaf({2, 2, 4, 5}, 74), leaf({2, 2 / conv.groups, 2, 2}, 75), leaf({2}, 76)});
  }
  const Tensor tokens = int64s({1, 0, 1, 2}, {2, 2});
  check2([&](const TensorList& in) { return mul(embedding(in[0], tokens), embedding(in[0], tokens)); },
         {leaf({3, 2}, 67)});
}

TEST_CASE("create_graph: a fused op's recorded gradient equals its kernel's", "[autograd][double_backward]") {
  // Under create_graph the backward is composed from primitives; it must give the fused kernel's
  // first derivative. Float64: the two differ by rounding only, a few ulps of the inputs' scale.
  const Tensor targets = int64s({2, 0, 1}, {3});
  const std::vector<std::pair<std::string, std::function<Tensor(const TensorList&)>>> cases{
      {"linear", [](const TensorList& in) { return linear(in[0], mul(in[0], in[1]), in[2]); }},
      {"layer_norm", [](const TensorList& in) { return layer_norm(in[0], {3}, in[1], in[2]); }},
      {"batch_norm", [](const TensorList& in) { return batch_norm(in[0], {}, {}, in[1], in[2], true); }},
      {"cross_entropy", [&](const TensorList& in) { return cross_entropy(in[0] * in[1].sum(), targets); }},
      {"gelu", [](const TensorList& in) { return gelu(in[0]) * in[1].sum() + relu(in[2]); }},
      {"pools", [](const TensorList& in) {
         const Tensor x = in[0].view({1, 1, 3, 3}) * in[1].sum();
         const Pool2dOptions pool{.kernel_size = {2, 2}, .stride = {1, 1}};
         return max_pool2d(x, pool) + avg_pool2d(x, pool);
       }},
      {"conv2d", [](const TensorList& in) {
         return conv2d(in[0].view({1, 1, 3, 3}), in[1].view({1, 1, 1, 3}), in[2].sum().view({1}),
                       {.padding = {1, 0}});
       }},
      {"embedding", [](const TensorList& in) { return embedding(in[0], int64s({2, 0, 2}, {3})) * in[1]; }},
      {"attention", [](const TensorList& in) {
         return scaled_dot_product_attention(in[0].view({1, 1, 3, 3}), in[1].view({1, 1, 1, 3}).expand({1, 1, 3, 3}),
                                             in[2].view({1, 1, 1, 3}).expand({1, 1, 3, 3}), true);
       }}};
  for (const auto& [name, fn] : cases) {
    INFO(name);
    const TensorList in{leaf({3, 3}, 70), leaf({3}, 71), leaf({3}, 72)};
    const Tensor out = fn(in);
    const Tensor w = leaf(out.shape(), 73).detach();
    const Tensor y = out.dim() == 0 ? out : sum(mul(out, w));
    const TensorList plain = grad({y}, {}, in, true);
    const TensorList recorded = grad({y}, {}, in, true, true);
    for (size_t i = 0; i < in.size(); ++i) {
      INFO("input " << i);
      REQUIRE(plain[i].defined() == recorded[i].defined());
      if (plain[i].defined()) require_close(recorded[i], values(plain[i]), 1e-12, 1e-13);
    }
  }
}

TEST_CASE("create_graph: a second derivative through an op that does not support it names the op",
          "[autograd][double_backward]") {
  // Activation recomputation runs its own backward pass, which does not record; under autocast
  // the backward reads rounded copies of the inputs.
  for (const auto& [name, fn] : std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>>{
           {"checkpoint", [](const Tensor& x) { return checkpoint([](const Tensor& t) { return sin(t); }, x, {}); }},
           {"matmul", [](const Tensor& x) {
              AutocastGuard bf16(Precision::BFloat16);
              return matmul(x, x);
            }}}) {
    INFO(name);
    Tensor x = to(leaf({3, 3}, 30), DType::Float32).detach().requires_grad_();
    const Tensor g = grad({sum(mul(fn(x), x))}, {}, {x}, false, true)[0];
    REQUIRE(g.requires_grad());  // first derivatives are right and recorded ...
    require_error([&] { grad({sum(g)}, {}, {x}); }, {"second derivative", "'" + name + "'"});
  }
  require_error([&] {
    gradgradcheck([](const TensorList& in) { return checkpoint([](const Tensor& t) { return sin(t); }, in[0], {}); },
                  {leaf({3}, 31)});
  }, {"'checkpoint'"});
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
