// tests/cuda/test_cuda_conv.cpp — conv2d (cuDNN, kernels/cuda/conv.cu) and pooling
// (kernels/cuda/pool.cu) on cuda:0 against the CPU, forward and backward through autograd, and
// conv2d's weight gradient written into a gradient destination. A build without cuDNN skips the
// conv2d cases, saying so, and checks the error conv2d gives there (kernels/cuda/no_cudnn.cu).
//
// Tolerances: cuDNN sums a convolution in its own order (and its algorithm varies with the
// shape), so a conv result is compared against the same computation on magnitudes:
// |got - want| <= tol * conv(|x|, |w|), which bounds the rounding of any summation order. Float32
// allows 1e-4: Winograd and FFT algorithms transform the data and lose a few bits more than a
// direct sum. Pooling
// runs the same functors (kernels/pool_functors.h) on both backends: exact equality.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "multigrad/kernels/conv.h"

using namespace mg;
using namespace mg::test;

namespace {

// The output and the gradients of sum(conv2d(x, w, b) * g) on `device`.
struct ConvRun {
  Tensor y, gx, gw, gb;
};

ConvRun run_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g, const Conv2dOptions& o,
                 const Device& device) {
  Tensor xd = x.to(device).detach(), wd = w.to(device).detach(), bd = b.to(device).detach();
  xd.requires_grad_(true);
  wd.requires_grad_(true);
  bd.requires_grad_(true);
  Tensor y = conv2d(xd, wd, bd, o);
  sum(mul(y, g.to(device))).backward();
  return {y, xd.grad(), wd.grad(), bd.grad()};
}

// |got - want| <= tol * bound elementwise (plus a tiny absolute slack for exact zeros).
void expect_within(const Tensor& got, const Tensor& want, const Tensor& bound, double tol) {
  REQUIRE(got.device() == gpu());
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<double> g = values(got), w = values(want), m = values(bound);
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < w.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= tol * m[i] + 1e-12) && bad++ == 0)
      first << "index " << i << ": got " << g[i] << ", want " << w[i] << ", bound " << m[i];
  INFO(bad << " of " << w.size() << " elements differ; first: " << first.str());
  REQUIRE(bad == 0);
}

struct ConvCase {
  Shape x, w;
  Conv2dOptions o;
};

// Plain, strided/padded/dilated, grouped, depthwise, 1x1, and a larger layer (cuDNN picks
// other algorithms for it).
std::vector<ConvCase> conv_cases() {
  return {
      {{2, 3, 9, 8}, {4, 3, 3, 3}, {}},
      {{3, 2, 11, 7}, {5, 2, 2, 3}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}}},
      {{2, 4, 8, 8}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}},
      {{1, 6, 7, 9}, {6, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 6}},
      {{4, 8, 5, 5}, {3, 8, 1, 1}, {}},
      {{16, 32, 28, 28}, {64, 32, 3, 3}, {.padding = {1, 1}}},
  };
}

void check_conv_case(const ConvCase& c, DType dtype, double tol) {
  const Tensor x = cpu_input(c.x, dtype, 1), w = cpu_input(c.w, dtype, 2);
  const Tensor b = cpu_input({c.w[0]}, dtype, 3);
  const Shape y_shape = conv2d(x, w, b, c.o).shape();
  const Tensor g = cpu_input(y_shape, dtype, 4);
  const ConvRun want = run_conv(x, w, b, g, c.o, Device("cpu"));
  const ConvRun got = run_conv(x, w, b, g, c.o, gpu());
  // the same computation on magnitudes bounds each result's rounding
  const ConvRun bound = run_conv(abs(x), abs(w), abs(b), abs(g), c.o, Device("cpu"));
  expect_within(got.y, want.y, bound.y, tol);
  expect_within(got.gx, want.gx, bound.gx, tol);
  expect_within(got.gw, want.gw, bound.gw, tol);
  expect_within(got.gb, want.gb, bound.gb, tol);
}

bool build_has_cudnn() {
#if MG_WITH_CUDA
  return kernels::cuda::has_cudnn();
#else
  return false;  // no CUDA at all: cuda_main.cpp skips every test case before it runs
#endif
}

// True where this build can run conv2d on CUDA; else false after skip_test (no cuDNN).
bool have_cudnn() {
  if (build_has_cudnn()) return true;
  skip_test("this build has no cuDNN (MG_CUDNN: none was found when configuring)");
  return false;
}

Tensor max_pool_op(const std::vector<Tensor>& in, const Pool2dOptions& o) { return max_pool2d(in[0], o); }

// The gradient of sum(pool(x) * g) with respect to x on x's device.
Tensor pool_grad(const Tensor& x, const Tensor& g, bool max, const Pool2dOptions& o) {
  Tensor leaf = x.detach();
  leaf.requires_grad_(true);
  Tensor y = max ? max_pool2d(leaf, o) : avg_pool2d(leaf, o);
  sum(mul(y, g.to(x.device()))).backward();
  return leaf.grad();
}

}  // namespace

TEST_CASE("conv2d on CUDA matches the CPU in Float32, forward and backward", "[cuda][conv]") {
  if (!have_cudnn()) return;
  for (const ConvCase& c : conv_cases()) {
    INFO("input " << to_string(c.x) << " weight " << to_string(c.w) << " groups " << c.o.groups);
    check_conv_case(c, DType::Float32, 1e-4);
  }
}

TEST_CASE("conv2d on CUDA matches the CPU in Float64, forward and backward", "[cuda][conv]") {
  if (!have_cudnn()) return;
  for (const ConvCase& c : conv_cases()) {
    INFO("input " << to_string(c.x) << " weight " << to_string(c.w) << " groups " << c.o.groups);
    check_conv_case(c, DType::Float64, 1e-13);
  }
}

TEST_CASE("conv2d on CUDA repeats bit for bit", "[cuda][conv]") {
  if (!have_cudnn()) return;
  const ConvCase c = conv_cases().back();
  const Tensor x = cpu_input(c.x, DType::Float32, 5), w = cpu_input(c.w, DType::Float32, 6);
  const Tensor b = cpu_input({c.w[0]}, DType::Float32, 7);
  const Tensor g = cpu_input(conv2d(x, w, b, c.o).shape(), DType::Float32, 8);
  const ConvRun first = run_conv(x, w, b, g, c.o, gpu());
  const ConvRun second = run_conv(x, w, b, g, c.o, gpu());
  expect_equal(second.y, first.y);
  expect_equal(second.gx, first.gx);
  expect_equal(second.gw, first.gw);
}

TEST_CASE("conv2d on CUDA writes its weight gradient into the weight's destination", "[cuda][conv]") {
  if (!have_cudnn()) return;
  const ConvCase c = conv_cases()[2];  // grouped
  const Tensor x = cpu_input(c.x, DType::Float32, 9), w = cpu_input(c.w, DType::Float32, 10);
  const Tensor b = cpu_input({c.w[0]}, DType::Float32, 11);
  const Tensor g = cpu_input(conv2d(x, w, b, c.o).shape(), DType::Float32, 12);
  const ConvRun want = run_conv(x, w, b, g, c.o, gpu());
  Tensor wd = w.to(gpu()).detach().requires_grad_();
  const Tensor slot = full(c.w, 7.0, {.device = gpu()});  // overwritten, not added to
  set_grad_destination(wd, slot);
  sum(mul(conv2d(x.to(gpu()), wd, b.to(gpu()), c.o), g.to(gpu()))).backward();
  REQUIRE(wd.grad().is_same(slot));
  expect_close(slot, want.gw, 1e-5, 1e-6);
}

TEST_CASE("conv2d on CUDA without cuDNN is an error naming the build option", "[cuda][conv]") {
  if (build_has_cudnn()) {
    skip_test("this build has cuDNN: the error is what a build without it gives");
    return;
  }
  const Tensor x = cpu_input({1, 2, 5, 5}).to(gpu()), w = cpu_input({3, 2, 3, 3}).to(gpu());
  REQUIRE_THROWS_WITH(conv2d(x, w, Tensor(), {}), Catch::Contains("needs cuDNN") && Catch::Contains("MG_CUDNN=ON") &&
                                                       Catch::Contains("CUDNN_ROOT"));
}

TEST_CASE("max_pool2d and avg_pool2d on CUDA equal the CPU bit for bit", "[cuda][pool]") {
  const std::vector<Pool2dOptions> configs{
      {},
      {.kernel_size = {3, 3}, .stride = {2, 1}, .padding = {1, 1}},
      {.kernel_size = {2, 3}, .stride = {1, 2}, .padding = {1, 0}},
      {.kernel_size = {3, 2}, .stride = {3, 2}},
  };
  for (DType dtype : {DType::Float32, DType::Float64})
    for (const Pool2dOptions& o : configs) {
      INFO("dtype " << dtype << " kernel " << o.kernel_size[0] << "x" << o.kernel_size[1] << " stride "
                    << o.stride[0] << "x" << o.stride[1] << " padding " << o.padding[0] << "x" << o.padding[1]);
      const Tensor x = cpu_input({3, 5, 17, 13}, dtype, 9);
      check_exact([&](const std::vector<Tensor>& in) { return max_pool_op(in, o); }, {x});
      check_exact([&](const std::vector<Tensor>& in) { return avg_pool2d(in[0], o); }, {x});
      const Tensor g = cpu_input(max_pool2d(x, o).shape(), dtype, 10);
      for (bool max : {true, false}) {
        INFO((max ? "max" : "avg") << " backward");
        expect_equal(pool_grad(x.to(gpu()), g, max, o).to(Device("cpu")), pool_grad(x, g, max, o));
      }
    }
}

TEST_CASE("max_pool2d on CUDA propagates NaN like the CPU", "[cuda][pool]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = tensor({1.0, nan, 3.0, 4.0, nan, -6.0, -7.0, nan}, {1, 2, 2, 2});
  check_exact([](const std::vector<Tensor>& in) { return max_pool2d(in[0]); }, {x});
}
