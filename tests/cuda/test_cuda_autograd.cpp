// tests/cuda/test_cuda_autograd.cpp — the backward of every differentiable op of ops.h on
// cuda:0 against the same backward on the CPU: same inputs, same upstream gradient, outputs
// and every input's gradient compared (Float32, the tolerances of cuda_test_util.h unless a
// case says why). Also the engine on CUDA: gradients crossing devices, accumulation, hooks.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

using Fn = std::function<Tensor(const TensorList&)>;

// fn on CPU leaves and on their cuda:0 copies, backward with one upstream gradient on both;
// compares the outputs and each input's gradient. `inputs` are CPU tensors (any layout: a
// transposed one stays transposed on both devices).
void check_backward(const Fn& fn, const TensorList& inputs, double rtol = 1e-5, double atol = 1e-6) {
  TensorList cpu, gpu;
  for (const Tensor& t : inputs) {
    cpu.push_back(t.detach().requires_grad_());
    gpu.push_back(t.to(test::gpu()).requires_grad_());
  }
  Tensor want = fn(cpu);
  Tensor got = fn(gpu);
  REQUIRE(got.device() == test::gpu());
  expect_close(got, want, rtol, atol);
  Tensor upstream = cpu_input(want.shape(), want.dtype(), 99);
  backward({want}, {upstream});
  backward({got}, {upstream.to(test::gpu())});
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE(gpu[i].grad().device() == test::gpu());
    expect_close(gpu[i].grad(), cpu[i].grad(), rtol, atol);
  }
}

Tensor positive(const Shape& shape, uint64_t seed) { return add(abs(cpu_input(shape, DType::Float32, seed)), 0.5); }
Tensor transposed(int64_t rows, int64_t cols, uint64_t seed) {
  return cpu_input({rows, cols}, DType::Float32, seed).transpose(0, 1);
}

}  // namespace

TEST_CASE("cuda: backward of binary arithmetic with broadcasting", "[cuda]") {
  const std::vector<std::pair<std::string, Fn>> ops{
      {"add", [](const TensorList& in) { return add(in[0], in[1]); }},
      {"sub", [](const TensorList& in) { return sub(in[0], in[1]); }},
      {"mul", [](const TensorList& in) { return mul(in[0], in[1]); }},
      {"div", [](const TensorList& in) { return div(in[0], add(abs(in[1]), 0.5)); }},
      {"maximum", [](const TensorList& in) { return maximum(in[0], in[1]); }},
      {"minimum", [](const TensorList& in) { return minimum(in[0], in[1]); }},
  };
  for (const auto& [name, fn] : ops) {
    INFO(name);
    check_backward(fn, {cpu_input({33, 1, 65}, DType::Float32, 1), cpu_input({7, 65}, DType::Float32, 2)});
    check_backward(fn, {transposed(65, 33, 3), cpu_input({65}, DType::Float32, 4)});
  }
}

TEST_CASE("cuda: backward of pow", "[cuda]") {
  check_backward([](const TensorList& in) { return pow(in[0], in[1]); },
                 {positive({17, 9}, 1), cpu_input({9}, DType::Float32, 2)}, 1e-4, 1e-5);
  check_backward([](const TensorList& in) { return pow(in[0], 2.5); }, {positive({1023}, 3)}, 1e-4, 1e-5);
}

TEST_CASE("cuda: backward of tensor-scalar arithmetic", "[cuda]") {
  check_backward([](const TensorList& in) { return add(mul(sub(in[0], 1.0), 3.0), div(in[0], 4.0)); },
                 {cpu_input({1023}, DType::Float32, 1)});
  check_backward([](const TensorList& in) { return 2.0 - 3.0 / in[0]; }, {positive({1023}, 2)});
}

TEST_CASE("cuda: backward of unary math", "[cuda]") {
  const std::vector<std::pair<std::string, Fn>> ops{
      {"neg", [](const TensorList& in) { return neg(in[0]); }},
      {"exp", [](const TensorList& in) { return exp(in[0]); }},
      {"log", [](const TensorList& in) { return log(add(abs(in[0]), 0.5)); }},
      {"sqrt", [](const TensorList& in) { return sqrt(add(abs(in[0]), 0.5)); }},
      {"abs", [](const TensorList& in) { return abs(in[0]); }},
      {"relu", [](const TensorList& in) { return relu(in[0]); }},
      {"gelu", [](const TensorList& in) { return gelu(in[0]); }},
      {"sigmoid", [](const TensorList& in) { return sigmoid(in[0]); }},
      {"tanh", [](const TensorList& in) { return tanh(in[0]); }},
      {"clamp", [](const TensorList& in) { return clamp(in[0], -0.5, 0.25); }},
      {"sin", [](const TensorList& in) { return sin(in[0]); }},
      {"cos", [](const TensorList& in) { return cos(in[0]); }},
      {"erf", [](const TensorList& in) { return erf(in[0]); }},
      {"expm1", [](const TensorList& in) { return expm1(in[0]); }},
      {"log1p", [](const TensorList& in) { return log1p(abs(in[0])); }},
  };
  for (const auto& [name, fn] : ops) {
    INFO(name);
    // CUDA's expf/tanhf against libm: a few ulp apart, so 1e-4 relative for these.
    check_backward(fn, {cpu_input({(int64_t(1) << 16) + 3}, DType::Float32, 1, 3.0)}, 1e-4, 1e-5);
    check_backward(fn, {transposed(31, 17, 2)}, 1e-4, 1e-5);
  }
}

TEST_CASE("cuda: backward of logsumexp, var, std and masked_fill", "[cuda]") {
  const std::vector<std::pair<std::string, Fn>> ops{
      {"logsumexp", [](const TensorList& in) { return logsumexp(in[0], {1}); }},
      {"logsumexp all", [](const TensorList& in) { return logsumexp(in[0], {}, true); }},
      {"var", [](const TensorList& in) { return var(in[0], {0}); }},
      {"std", [](const TensorList& in) { return mg::std(in[0], {1}, 0, true); }},
      {"masked_fill", [](const TensorList& in) { return masked_fill(in[0], gt(in[0], 0.25), -1.5); }},
  };
  for (const auto& [name, fn] : ops) {
    INFO(name);
    check_backward(fn, {cpu_input({37, 129}, DType::Float32, 3, 3.0)}, 1e-4, 1e-5);
    check_backward(fn, {transposed(31, 17, 4)}, 1e-4, 1e-5);
  }
}

TEST_CASE("cuda: backward of where", "[cuda]") {
  Tensor cond = gt(cpu_input({5, 1}, DType::Float32, 9), 0.0);
  check_backward([cond](const TensorList& in) { return where(cond.to(in[0].device()), in[0], in[1]); },
                 {cpu_input({5, 7}, DType::Float32, 1), cpu_input({7}, DType::Float32, 2)});
}

TEST_CASE("cuda: backward of reductions", "[cuda]") {
  const std::vector<std::pair<std::string, Fn>> ops{
      {"sum", [](const TensorList& in) { return sum(in[0]); }},
      {"sum dims", [](const TensorList& in) { return sum(in[0], {0, 2}, true); }},
      {"mean", [](const TensorList& in) { return mean(in[0], {1}); }},
      {"max dim", [](const TensorList& in) { return max(in[0], {2}); }},
      {"min dims", [](const TensorList& in) { return min(in[0], {0, 1}); }},
      {"max all", [](const TensorList& in) { return max(in[0]); }},
      {"softmax", [](const TensorList& in) { return softmax(in[0], 1); }},
      {"log_softmax", [](const TensorList& in) { return log_softmax(in[0], -1); }},
  };
  for (const auto& [name, fn] : ops) {
    INFO(name);
    // Float32 sums: float64 accumulation on the CPU, tree order on CUDA.
    check_backward(fn, {cpu_input({6, 33, 129}, DType::Float32, 1)}, 1e-4, 1e-5);
  }
}

TEST_CASE("cuda: backward of matmul in every rank combination", "[cuda]") {
  const std::vector<std::pair<Shape, Shape>> cases{
      {{17, 33}, {33, 9}}, {{33}, {33}},         {{33}, {33, 9}},      {{17, 33}, {33}},
      {{3, 17, 33}, {33, 9}}, {{2, 1, 17, 33}, {4, 33, 9}}, {{33}, {3, 33, 9}},
  };
  for (const auto& [sa, sb] : cases) {
    INFO("shapes " << detail::str_cat(sa) << " @ " << detail::str_cat(sb));
    check_backward([](const TensorList& in) { return matmul(in[0], in[1]); },
                   {cpu_input(sa, DType::Float32, 1), cpu_input(sb, DType::Float32, 2)}, 1e-4, 1e-5);
  }
  check_backward([](const TensorList& in) { return matmul(in[0], in[1]); },
                 {transposed(33, 17, 3), transposed(9, 33, 4)}, 1e-4, 1e-5);
}

TEST_CASE("cuda: backward of views", "[cuda]") {
  const std::vector<std::pair<std::string, Fn>> ops{
      {"reshape", [](const TensorList& in) { return reshape(in[0], {-1, 4}); }},
      {"transpose", [](const TensorList& in) { return transpose(in[0], 0, 2); }},
      {"permute", [](const TensorList& in) { return permute(in[0], {1, 2, 0}); }},
      {"slice", [](const TensorList& in) { return slice(in[0], 1, 1, 7, 3); }},
      {"expand", [](const TensorList& in) { return expand(unsqueeze(in[0], 0), {3, 6, 8, 4}); }},
      {"squeeze", [](const TensorList& in) { return squeeze(slice(in[0], 1, 0, 1), 1); }},
      {"flatten", [](const TensorList& in) { return flatten(in[0], 1); }},
      {"contiguous", [](const TensorList& in) { return contiguous(transpose(in[0], 0, 1)); }},
      {"clone", [](const TensorList& in) { return clone(in[0]); }},
  };
  for (const auto& [name, fn] : ops) {
    INFO(name);
    check_backward(fn, {cpu_input({6, 8, 4}, DType::Float32, 1)});
  }
}

TEST_CASE("cuda: backward of cat, stack, split and chunk", "[cuda]") {
  check_backward([](const TensorList& in) { return cat({in[0], in[1]}, 1); },
                 {cpu_input({5, 3}, DType::Float32, 1), transposed(4, 5, 2)});
  check_backward([](const TensorList& in) { return stack({in[0], in[1]}, 0); },
                 {cpu_input({5, 3}, DType::Float32, 3), cpu_input({5, 3}, DType::Float32, 4)});
  check_backward([](const TensorList& in) { return mul(split(in[0], 2, 1)[1], chunk(in[0], 3, 1)[2]); },
                 {cpu_input({5, 6}, DType::Float32, 5)});
}

TEST_CASE("cuda: a gradient crossing devices comes back to the CPU leaf", "[cuda]") {
  Tensor x = cpu_input({7, 5}, DType::Float32, 1).requires_grad_();
  Tensor y = mul(x.to(test::gpu()), 3.0);
  sum(mul(y, y)).backward();
  REQUIRE(x.grad().device() == Device("cpu"));
  std::vector<double> want = values(x);
  for (double& v : want) v *= 18.0;
  require_close(x.grad(), want, 1e-5, 1e-5);
}

TEST_CASE("cuda: to(dtype) backward and accumulation across passes on the device", "[cuda]") {
  Tensor x = cpu_input({1023}, DType::Float32, 1).to(test::gpu()).requires_grad_();
  Tensor loss = sum(mul(x.to(DType::Float64), 2.0));
  loss.backward(true);
  const void* memory = x.grad().data_ptr();
  loss.backward();
  REQUIRE(x.grad().dtype() == DType::Float32);
  REQUIRE(x.grad().data_ptr() == memory);
  expect_close(x.grad(), full({1023}, 4.0, {.device = test::gpu()}));
}

TEST_CASE("cuda: on_grad_ready fires with the final device gradient", "[cuda]") {
  Tensor w = cpu_input({9}, DType::Float32, 1).to(test::gpu()).requires_grad_();
  std::vector<double> seen;
  int calls = 0;
  on_grad_ready(w, [&](const Tensor& g) {
    ++calls;
    seen = values(g);
  });
  sum(add(mul(w, w), w)).backward();
  REQUIRE(calls == 1);
  std::vector<double> want = values(w);
  for (double& v : want) v = 2 * v + 1;
  require_close(seen, want, 1e-5, 1e-6);
}

TEST_CASE("cuda: second derivatives (create_graph) of the fused ops match the CPU's", "[cuda]") {
  // The output is a gradient penalty: its value needs the recorded first derivatives, its
  // gradient the second ones. Float64 on both devices: the two differ by the summation order of
  // a few dozen terms of size about 1, under 1e-13; rtol 1e-10 leaves a margin of a thousand.
  const Tensor targets = int64s({2, 0, 1}, {3});
  const std::vector<std::pair<std::string, std::function<Tensor(const TensorList&)>>> cases{
      {"gelu, linear", [](const TensorList& in) { return gelu(linear(in[0], in[1], slice(in[2], 0, 0, 2))); }},
      {"layer_norm", [](const TensorList& in) { return layer_norm(in[0] + in[1].sum(), {4}, in[2], in[2]); }},
      {"cross_entropy", [&](const TensorList& in) {
         return cross_entropy(mul(in[0], in[2]) + in[1].sum(), targets.to(in[0].device()));
       }},
      {"attention", [](const TensorList& in) {
         const auto heads = [](const Tensor& t) { return t.view({1, 1, 3, 4}); };
         return scaled_dot_product_attention(heads(in[0]), in[1].sum({0}).view({1, 1, 1, 4}).expand({1, 1, 3, 4}),
                                             heads(in[0]) * in[2], true);
       }},
      {"conv2d, pools", [](const TensorList& in) {
         const Tensor y = conv2d(in[0].view({1, 1, 3, 4}), in[1].view({2, 1, 2, 2}), slice(in[2], 0, 1, 3),
                                 {.padding = {1, 1}});
         return max_pool2d(y, {}) + avg_pool2d(y, {});
       }}};
  for (const auto& [name, fn] : cases) {
    INFO(name);
    const auto penalty = [&fn](const TensorList& in) {
      const Tensor out = fn(in);
      const TensorList grads = grad({sum(mul(out, out))}, {}, in, true, true);
      Tensor total = zeros({}, {.dtype = DType::Float64, .device = out.device()});
      for (const Tensor& g : grads)
        if (g.defined()) total = add(total, sum(mul(g, g)));
      return total;
    };
    check_forward_backward(penalty, {cpu_input({3, 4}, DType::Float64, 80).requires_grad_(),
                                     cpu_input({2, 4}, DType::Float64, 81).requires_grad_(),
                                     cpu_input({4}, DType::Float64, 82).requires_grad_()},
                           1e-10, 1e-12);
  }
}
