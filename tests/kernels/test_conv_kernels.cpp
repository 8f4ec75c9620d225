// tests/kernels/test_conv_kernels.cpp — the CPU kernels of kernels/conv.h called directly (no
// autograd): both convolution backwards, the max-pool indices and the pooling backwards against
// the direct loops of tests/autograd/conv_reference.h; float32 convolutions through oneDNN and
// through im2col + GEMM within the error bound of the exact result, and when oneDNN declines;
// outputs are assigned, not accumulated; the device check.
#include <cmath>
#include <limits>

#include "autograd/conv_reference.h"
#include "multigrad/kernels/conv.h"
#include "multigrad/kernels/cpu/conv_onednn.h"
#include "core/cpu_devices_guard.h"
#include "kernels/kernel_test_util.h"

using namespace mg;
using namespace mg::test;
namespace k = mg::kernels;

namespace {

k::Conv2dParams params_of(const ConvRef& r) { return {{r.sH, r.sW}, {r.pH, r.pW}, {r.dH, r.dW}, r.groups}; }
k::Pool2dParams params_of(const PoolRef& r) { return {{r.kH, r.kW}, {r.sH, r.sW}, {r.pH, r.pW}}; }

// Shapes covering the kernels' paths: plain, strided/padded/dilated, grouped, depthwise, 1x1
// without columns, a batch spread over two column chunks, and 8 input channels per group, grouped
// and dilated (which oneDNN's backwards take).
std::vector<ConvRef> conv_cases() {
  return {
      {.N = 3, .C = 2, .H = 5, .W = 6, .O = 3, .kH = 3, .kW = 3},
      {.N = 2, .C = 3, .H = 8, .W = 7, .O = 2, .kH = 2, .kW = 3, .sH = 2, .sW = 3, .pH = 1, .pW = 2, .dH = 2, .dW = 1},
      {.N = 1, .C = 4, .H = 6, .W = 6, .O = 6, .kH = 3, .kW = 1, .pH = 1, .pW = 0, .groups = 2},
      {.N = 2, .C = 3, .H = 5, .W = 4, .O = 3, .kH = 2, .kW = 2, .sH = 2, .sW = 1, .pH = 1, .pW = 1, .groups = 3},
      {.N = 3, .C = 4, .H = 3, .W = 5, .O = 2, .kH = 1, .kW = 1},
      {.N = 9, .C = 16, .H = 64, .W = 64, .O = 2, .kH = 3, .kW = 3, .pH = 1, .pW = 1},
      {.N = 2, .C = 16, .H = 6, .W = 5, .O = 4, .kH = 3, .kW = 3, .sH = 2, .pH = 1, .pW = 1, .groups = 2},
      {.N = 2, .C = 8, .H = 9, .W = 8, .O = 4, .kH = 3, .kW = 3, .pH = 2, .pW = 2, .dH = 2, .dW = 2},
  };
}

// Filled with a sentinel, to show that a kernel assigns every element.
Tensor stale(const Shape& shape) {
  Tensor t = Tensor::empty(shape, {.dtype = DType::Float64});
  std::fill(t.data<double>(), t.data<double>() + t.numel(), 1e30);
  return t;
}

// For each output element of a sum of products (term(x, w, y) adds a * b into element e): the
// exact sum of the float32 inputs, the sum of |a b| and the number of terms.
struct ExactSums {
  std::vector<double> exact, magnitude;
  std::vector<int64_t> terms;
  explicit ExactSums(size_t n) : exact(n, 0.0), magnitude(n, 0.0), terms(n, 0) {}
  void add(int64_t e, double a, double b) {
    exact[size_t(e)] += a * b;
    magnitude[size_t(e)] += std::abs(a * b);
    ++terms[size_t(e)];
  }
};

// A float32 sum of K products in any order, FMA or not, then stored, is within
// gamma_{K+1} * sum |a b| of the exact sum (Higham, Accuracy and Stability of Numerical
// Algorithms, eq. 3.5, plus the final rounding): what any correct convolution, whatever its
// blocking, threads and kernels, must meet.
void require_within_bound(const Tensor& got, const ExactSums& want) {
  const std::vector<float> g = read<float>(got);
  REQUIRE(g.size() == want.exact.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double k = double(want.terms[i] + 1), u = 0x1p-24;
    INFO("element " << i << ": got " << g[i] << ", exact " << want.exact[i] << ", sum |a b| " << want.magnitude[i]);
    REQUIRE(std::abs(double(g[i]) - want.exact[i]) <= k * u / (1 - k * u) * want.magnitude[i]);
  }
}

// The three float32 convolutions of `r` on fixed data (forward with a bias), each against its
// exact sums; `run(op, x, w, b, gy, out)` performs one of them (0 forward, 1 input gradient,
// 2 weight gradient) into its output.
template <class Run>
void check_float32_conv(const ConvRef& r, Run&& run) {
  const Tensor x = random_tensor<float>({r.N, r.C, r.H, r.W}, 11), w = random_tensor<float>({r.O, r.Cg(), r.kH, r.kW}, 12);
  const Tensor b = random_tensor<float>({r.O}, 14), gy = random_tensor<float>({r.N, r.O, r.oH(), r.oW()}, 13);
  const std::vector<float> xs = read<float>(x), ws = read<float>(w), bs = read<float>(b), gys = read<float>(gy);
  ExactSums y(size_t(r.y_numel())), gx(size_t(r.x_numel())), gw(size_t(r.w_numel()));
  r.for_each_term([&](int64_t xi, int64_t wi, int64_t yi) {
    y.add(yi, xs[size_t(xi)], ws[size_t(wi)]);
    gx.add(xi, gys[size_t(yi)], ws[size_t(wi)]);
    gw.add(wi, gys[size_t(yi)], xs[size_t(xi)]);
  });
  for (int64_t yi = 0; yi < r.y_numel(); ++yi) y.add(yi, bs[size_t((yi / (r.oH() * r.oW())) % r.O)], 1.0);
  Tensor out = Tensor::empty(gy.shape(), {.dtype = DType::Float32}), dx = Tensor::empty(x.shape(), {.dtype = DType::Float32}),
         dw = Tensor::empty(w.shape(), {.dtype = DType::Float32});
  run(0, x, w, b, gy, out);
  require_within_bound(out, y);
  run(1, x, w, b, gy, dx);
  require_within_bound(dx, gx);
  run(2, x, w, b, gy, dw);
  require_within_bound(dw, gw);
}

// Restores the process-wide convolution algorithm however a test ends.
struct ConvAlgorithmScope {
  explicit ConvAlgorithmScope(k::cpu::CpuConvAlgorithm a) { k::cpu::set_cpu_conv_algorithm(a); }
  ~ConvAlgorithmScope() { k::cpu::set_cpu_conv_algorithm(k::cpu::CpuConvAlgorithm::Auto); }
};

// A stride-2 convolution whose floor-divided output leaves the last input row and column unread:
// the right padding oneDNN would need is -1, so it declines and im2col runs.
const ConvRef kFloorDrops{.N = 2, .C = 3, .H = 10, .W = 10, .O = 2, .kH = 3, .kW = 3, .sH = 2, .sW = 2};

}  // namespace

TEST_CASE("float32 convolutions through oneDNN stay within the error bound of the exact result", "[kernels][conv]") {
  if (k::cpu::conv_library().name.empty()) {
    WARN("built without oneDNN: every convolution runs im2col + GEMM (the next test case)");
    return;
  }
  CHECK(k::cpu::conv_library().name.rfind("oneDNN ", 0) == 0);
  for (const ConvRef& r : conv_cases()) {
    INFO("C " << r.C << " O " << r.O << " k " << r.kH << "x" << r.kW << " groups " << r.groups << " N " << r.N);
    check_float32_conv(r, [&](int op, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& gy,
                              const Tensor& out) {
      const k::Conv2dParams p = params_of(r);
      const bool taken = op == 0   ? k::cpu::onednn_conv2d_forward(x, w, b, out, p)
                         : op == 1 ? k::cpu::onednn_conv2d_backward_input(gy, w, out, p)
                                   : k::cpu::onednn_conv2d_backward_weight(gy, x, out, p);
      // Backwards with fewer than 8 input channels per group are left to im2col (conv_onednn.h).
      REQUIRE(taken == (op == 0 || r.Cg() >= 8));
      if (!taken) op == 1 ? k::conv2d_backward_input(gy, w, out, p) : k::conv2d_backward_weight(gy, x, out, p);
    });
  }
}

TEST_CASE("float32 convolutions through im2col + GEMM stay within the error bound of the exact result", "[kernels][conv]") {
  ConvAlgorithmScope im2col(k::cpu::CpuConvAlgorithm::Im2col);
  std::vector<ConvRef> cases = conv_cases();
  cases.push_back(kFloorDrops);
  for (const ConvRef& r : cases) {
    INFO("C " << r.C << " O " << r.O << " k " << r.kH << "x" << r.kW << " groups " << r.groups << " N " << r.N);
    check_float32_conv(r, [&](int op, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& gy,
                              const Tensor& out) {
      if (op == 0) k::conv2d_forward(x, w, b, out, params_of(r));
      if (op == 1) k::conv2d_backward_input(gy, w, out, params_of(r));
      if (op == 2) k::conv2d_backward_weight(gy, x, out, params_of(r));
    });
  }
}

TEST_CASE("oneDNN declines what it cannot do as kernels/conv.h defines, deterministic mode and im2col asked for", "[kernels][conv]") {
  const ConvRef r = kFloorDrops;
  const Tensor x = random_tensor<float>({r.N, r.C, r.H, r.W}, 1), w = random_tensor<float>({r.O, r.C, r.kH, r.kW}, 2);
  Tensor out = Tensor::empty({r.N, r.O, r.oH(), r.oW()}, {.dtype = DType::Float32});
  CHECK_FALSE(k::cpu::onednn_conv2d_forward(x, w, Tensor(), out, params_of(r)));
  const ConvRef plain{.N = 2, .C = 3, .H = 8, .W = 8, .O = 2, .kH = 3, .kW = 3};
  Tensor plain_out = Tensor::empty({plain.N, plain.O, plain.oH(), plain.oW()}, {.dtype = DType::Float32});
  const Tensor px = random_tensor<float>({2, 3, 8, 8}, 3);
  {
    DeterministicScope deterministic(true);
    CHECK_FALSE(k::cpu::onednn_conv2d_forward(px, w, Tensor(), plain_out, params_of(plain)));  // im2col's fixed order
  }
  {
    ConvAlgorithmScope im2col(k::cpu::CpuConvAlgorithm::Im2col);
    CHECK_FALSE(k::cpu::onednn_conv2d_forward(px, w, Tensor(), plain_out, params_of(plain)));
  }
  if (!k::cpu::conv_library().name.empty()) CHECK(k::cpu::onednn_conv2d_forward(px, w, Tensor(), plain_out, params_of(plain)));
  const Tensor xd = random_tensor<double>({2, 3, 8, 8}, 3), wd = random_tensor<double>({2, 3, 3, 3}, 2);
  Tensor outd = Tensor::empty(plain_out.shape(), {.dtype = DType::Float64});
  CHECK_FALSE(k::cpu::onednn_conv2d_forward(xd, wd, Tensor(), outd, params_of(plain)));  // no f64 in oneDNN
}

TEST_CASE("conv2d_backward_input kernel matches the direct derivative", "[kernels][conv]") {
  for (const ConvRef& r : conv_cases()) {
    INFO("C " << r.C << " O " << r.O << " k " << r.kH << "x" << r.kW << " groups " << r.groups << " N " << r.N);
    const auto gy = random_values<double>(size_t(r.y_numel()), 1);
    const auto ws = random_values<double>(size_t(r.w_numel()), 2);
    Tensor gx = stale({r.N, r.C, r.H, r.W});
    k::conv2d_backward_input(from_vector<double>({r.N, r.O, r.oH(), r.oW()}, gy),
                             from_vector<double>({r.O, r.Cg(), r.kH, r.kW}, ws), gx, params_of(r));
    require_close(gx, r.grad_input(gy, ws), 1e-12, 1e-12);
  }
}

TEST_CASE("conv2d_backward_weight kernel matches the direct derivative", "[kernels][conv]") {
  for (const ConvRef& r : conv_cases()) {
    INFO("C " << r.C << " O " << r.O << " k " << r.kH << "x" << r.kW << " groups " << r.groups << " N " << r.N);
    const auto gy = random_values<double>(size_t(r.y_numel()), 3);
    const auto xs = random_values<double>(size_t(r.x_numel()), 4);
    Tensor gw = stale({r.O, r.Cg(), r.kH, r.kW});
    k::conv2d_backward_weight(from_vector<double>({r.N, r.O, r.oH(), r.oW()}, gy),
                              from_vector<double>({r.N, r.C, r.H, r.W}, xs), gw, params_of(r));
    require_close(gw, r.grad_weight(gy, xs), 1e-11, 1e-11);
  }
}

TEST_CASE("conv2d_backward_weight of an empty batch is zero", "[kernels][conv]") {
  const ConvRef r{.N = 0, .C = 2, .H = 4, .W = 4, .O = 3, .kH = 3, .kW = 3};
  Tensor gw = stale({3, 2, 3, 3});
  k::conv2d_backward_weight(Tensor::empty({0, 3, 2, 2}, {.dtype = DType::Float64}),
                            Tensor::empty({0, 2, 4, 4}, {.dtype = DType::Float64}), gw, params_of(r));
  require_close(gw, std::vector<double>(54, 0.0));
}

TEST_CASE("max_pool2d kernels give first-maximum indices and gather gradients to them", "[kernels][pool]") {
  const PoolRef r{.N = 2, .C = 2, .H = 7, .W = 5, .kH = 3, .kW = 3, .sH = 2, .sW = 1, .pH = 1, .pW = 1};
  // values in steps of 0.25 repeat, so windows hold ties: the first maximum must win
  std::vector<double> xs(size_t(2 * 2 * 7 * 5));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = double((i * 7) % 9) * 0.25;
  const Tensor x = from_vector<double>({2, 2, 7, 5}, xs);
  Tensor out = stale({2, 2, r.oH(), r.oW()});
  Tensor idx = Tensor::empty(out.shape(), {.dtype = DType::Int64});
  k::max_pool2d_forward(x, out, idx, params_of(r));
  std::vector<int64_t> want_flat;
  require_close(out, r.max(xs, &want_flat), 0, 0);
  // the kernel's index is within the (n, c) plane
  const std::vector<int64_t> got_idx = read<int64_t>(idx);
  for (size_t o = 0; o < got_idx.size(); ++o) {
    INFO("output " << o);
    REQUIRE(got_idx[o] == want_flat[o] % (7 * 5));
  }
  const auto gy = random_values<double>(size_t(r.y_numel()), 5);
  Tensor gx = stale({2, 2, 7, 5});
  k::max_pool2d_backward(from_vector<double>(out.shape(), gy), idx, gx, params_of(r));
  require_close(gx, r.max_grad(xs, gy), 1e-12, 1e-12);
}

TEST_CASE("avg_pool2d_backward kernel spreads each gradient over its window", "[kernels][pool]") {
  for (int64_t pad : {0, 1}) {
    const PoolRef r{.N = 3, .C = 1, .H = 6, .W = 9, .kH = 2, .kW = 3, .sH = 1, .sW = 2, .pH = pad, .pW = pad};
    const auto gy = random_values<double>(size_t(r.y_numel()), 6);
    Tensor gx = stale({3, 1, 6, 9});
    k::avg_pool2d_backward(from_vector<double>({3, 1, r.oH(), r.oW()}, gy), gx, params_of(r));
    require_close(gx, r.avg_grad(gy), 1e-12, 1e-12);
  }
}

TEST_CASE("conv and pool kernels reject tensors on two devices", "[kernels][conv]") {
  CpuDevicesGuard devices(2);
  const TensorOptions on1{.dtype = DType::Float64, .device = Device("cpu:1")};
  const Tensor x = Tensor::empty({1, 1, 4, 4}, {.dtype = DType::Float64});
  require_error([&] { k::conv2d_forward(x, Tensor::empty({1, 1, 3, 3}, on1), Tensor(), stale({1, 1, 2, 2}), {}); },
                {"conv2d", "cpu:0", "cpu:1"});
  require_error([&] { k::avg_pool2d_forward(x, Tensor::empty({1, 1, 2, 2}, on1), {}); },
                {"avg_pool2d", "cpu:0", "cpu:1"});
}

TEST_CASE("conv and pool kernels give the same bits for any CPU thread budget", "[kernels][conv]") {
  const ConvRef r{.N = 9, .C = 16, .H = 64, .W = 64, .O = 4, .kH = 3, .kW = 3, .pH = 1, .pW = 1};
  const PoolRef pr{.N = 9, .C = 16, .H = 64, .W = 64, .kH = 3, .kW = 3, .sH = 2, .sW = 2, .pH = 1, .pW = 1};
  const Tensor x = random_tensor<double>({r.N, r.C, r.H, r.W}, 7);
  const Tensor w = random_tensor<double>({r.O, r.C, r.kH, r.kW}, 8);
  const Tensor gy = random_tensor<double>({r.N, r.O, r.oH(), r.oW()}, 9);
  const Tensor gp = random_tensor<double>({pr.N, pr.C, pr.oH(), pr.oW()}, 10);
  // Every output of one run, computed on cpu:0 with the thread budget `devices` CPU devices leave it.
  auto run = [&](int devices) {
    CpuDevicesGuard guard(devices);
    std::vector<Tensor> outs{stale(gy.shape()), stale(x.shape()), stale(w.shape()), stale(gp.shape()),
                             stale(x.shape()), stale(gp.shape()), stale(x.shape())};
    Tensor idx = Tensor::empty(gp.shape(), {.dtype = DType::Int64});
    k::conv2d_forward(x, w, Tensor(), outs[0], params_of(r));
    k::conv2d_backward_input(gy, w, outs[1], params_of(r));
    k::conv2d_backward_weight(gy, x, outs[2], params_of(r));
    k::max_pool2d_forward(x, outs[3], idx, params_of(pr));
    k::max_pool2d_backward(gp, idx, outs[4], params_of(pr));
    k::avg_pool2d_forward(x, outs[5], params_of(pr));
    k::avg_pool2d_backward(gp, outs[6], params_of(pr));
    return outs;
  };
  const std::vector<Tensor> many = run(1), few = run(8);
  for (size_t i = 0; i < many.size(); ++i) {
    INFO("output " << i);
    REQUIRE(read<double>(few[i]) == read<double>(many[i]));
  }
}
