// tests/autograd/test_conv_ops.cpp — mg::conv2d, mg::max_pool2d and mg::avg_pool2d
// (autograd/conv_ops.cpp): forward against direct loops (tests/autograd/conv_reference.h) over
// strides, paddings, dilations, groups, odd sizes and batches; argument errors; and gradients,
// by float64 finite differences (mg::gradcheck) and against the direct derivative.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/conv_reference.h"
#include "core/cpu_devices_guard.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

Tensor make(const std::vector<double>& v, const Shape& shape, DType dtype = DType::Float64, bool grad = false) {
  return tensor(v, shape, {.dtype = dtype, .requires_grad = grad});
}

Conv2dOptions options_of(const ConvRef& r) {
  return {.stride = {r.sH, r.sW}, .padding = {r.pH, r.pW}, .dilation = {r.dH, r.dW}, .groups = r.groups};
}

// conv2d of pseudo-random data against the direct loop, with or without bias.
void check_conv(const ConvRef& r, bool with_bias, DType dtype = DType::Float64) {
  INFO("N " << r.N << " C " << r.C << " H " << r.H << " W " << r.W << " O " << r.O << " k " << r.kH << "x" << r.kW
            << " stride " << r.sH << "x" << r.sW << " pad " << r.pH << "x" << r.pW << " dil " << r.dH << "x" << r.dW
            << " groups " << r.groups << " bias " << with_bias);
  const auto xs = pseudo_random(size_t(r.x_numel()), 1), ws = pseudo_random(size_t(r.w_numel()), 2);
  const auto bs = with_bias ? pseudo_random(size_t(r.O), 3) : std::vector<double>{};
  const Tensor bias = with_bias ? make(bs, {r.O}, dtype) : Tensor();
  const Tensor out = conv2d(make(xs, {r.N, r.C, r.H, r.W}, dtype), make(ws, {r.O, r.Cg(), r.kH, r.kW}, dtype), bias,
                            options_of(r));
  REQUIRE(out.shape() == Shape{r.N, r.O, r.oH(), r.oW()});
  REQUIRE(out.dtype() == dtype);
  const double tol = dtype == DType::Float32 ? 1e-5 : 1e-12;
  require_close(out, r.forward(xs, ws, bs), tol, tol);
}

Pool2dOptions pool_options(const PoolRef& r) {
  return {.kernel_size = {r.kH, r.kW}, .stride = {r.sH, r.sW}, .padding = {r.pH, r.pW}};
}

// Gradient of sum(f(leaves) * g) for the given leaves, by backward().
std::vector<Tensor> grads_of(const Tensor& out, const std::vector<double>& g, const std::vector<Tensor>& leaves) {
  sum(mul(out, make(g, out.shape(), out.dtype()))).backward();
  std::vector<Tensor> grads;
  for (const Tensor& t : leaves) grads.push_back(t.grad());
  return grads;
}

}  // namespace

// ---- conv2d forward ----

TEST_CASE("conv2d matches a direct convolution over strides, paddings and dilations", "[autograd][conv]") {
  for (int64_t stride : {1, 2})
    for (int64_t pad : {0, 1, 2})
      for (int64_t dil : {1, 2})
        for (int64_t n : {1, 3})
          check_conv({.N = n, .C = 3, .H = 7, .W = 6, .O = 4, .kH = 3, .kW = 2, .sH = stride, .sW = stride,
                      .pH = pad, .pW = pad, .dH = dil, .dW = dil},
                     /*with_bias=*/n == 3);
}

TEST_CASE("conv2d with unequal strides, paddings and dilations per axis", "[autograd][conv]") {
  check_conv({.N = 2, .C = 2, .H = 9, .W = 8, .O = 3, .kH = 2, .kW = 3, .sH = 2, .sW = 1, .pH = 1, .pW = 0,
              .dH = 1, .dW = 2},
             true);
  check_conv({.N = 1, .C = 1, .H = 5, .W = 11, .O = 2, .kH = 5, .kW = 1, .sH = 3, .sW = 4, .pH = 2, .pW = 0}, true);
}

TEST_CASE("conv2d with groups 2 and depthwise groups matches a direct convolution", "[autograd][conv]") {
  for (int64_t n : {1, 3}) {
    check_conv({.N = n, .C = 4, .H = 6, .W = 5, .O = 6, .kH = 3, .kW = 3, .pH = 1, .pW = 1, .groups = 2}, true);
    check_conv({.N = n, .C = 4, .H = 6, .W = 5, .O = 4, .kH = 3, .kW = 3, .sH = 2, .sW = 2, .groups = 4}, true);
    // depthwise with a channel multiplier: 2 filters per input channel
    check_conv({.N = n, .C = 3, .H = 5, .W = 7, .O = 6, .kH = 2, .kW = 2, .pH = 1, .pW = 1, .dH = 2, .dW = 2,
                .groups = 3},
               false);
  }
}

TEST_CASE("conv2d in Float32 matches a direct convolution", "[autograd][conv]") {
  check_conv({.N = 3, .C = 5, .H = 9, .W = 7, .O = 4, .kH = 3, .kW = 3, .sH = 2, .sW = 1, .pH = 1, .pW = 2}, true,
             DType::Float32);
  check_conv({.N = 2, .C = 4, .H = 8, .W = 8, .O = 2, .kH = 3, .kW = 3, .dH = 2, .dW = 2, .groups = 2}, false,
             DType::Float32);
}

TEST_CASE("conv2d 1x1 kernels, plain, grouped, strided and padded", "[autograd][conv]") {
  check_conv({.N = 3, .C = 4, .H = 5, .W = 3, .O = 6, .kH = 1, .kW = 1}, true);
  check_conv({.N = 2, .C = 4, .H = 5, .W = 3, .O = 2, .kH = 1, .kW = 1, .groups = 2}, false, DType::Float32);
  check_conv({.N = 2, .C = 3, .H = 5, .W = 6, .O = 2, .kH = 1, .kW = 1, .sH = 2, .sW = 2}, true);
  check_conv({.N = 1, .C = 2, .H = 3, .W = 3, .O = 2, .kH = 1, .kW = 1, .pH = 1, .pW = 1}, true);
}

TEST_CASE("conv2d over several column chunks matches a direct convolution", "[autograd][conv]") {
  // (16 * 3 * 3 + 2) * 64 * 64 doubles = 4.8 MB of columns and channel-major output per image:
  // 9 images need two 32 MiB chunks
  check_conv({.N = 9, .C = 16, .H = 64, .W = 64, .O = 2, .kH = 3, .kW = 3, .pH = 1, .pW = 1}, true);
}

TEST_CASE("conv2d of a hand-computed example", "[autograd][conv]") {
  // x = 1..9 in a 3x3 plane, w = [[1, 0], [0, -1]]: out[i, j] = x[i, j] - x[i + 1, j + 1] = -4
  const Tensor x = make({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  const Tensor w = make({1, 0, 0, -1}, {1, 1, 2, 2});
  require_close(conv2d(x, w, make({0.5}, {1})), {-3.5, -3.5, -3.5, -3.5});
  // padding 1, stride 2: windows at (-1, -1), (-1, 1), (1, -1), (1, 1) see -x[0,0], -x[0,2], -x[2,0], x[1,1] - x[2,2]
  require_close(conv2d(x, w, Tensor(), {.stride = {2, 2}, .padding = {1, 1}}), {-1, -3, -7, 5 - 9});
}

TEST_CASE("conv2d accepts an unbatched CHW input", "[autograd][conv]") {
  const ConvRef r{.N = 1, .C = 2, .H = 5, .W = 4, .O = 3, .kH = 3, .kW = 2, .pH = 1, .pW = 0};
  const auto xs = pseudo_random(size_t(r.x_numel()), 4), ws = pseudo_random(size_t(r.w_numel()), 5);
  const Tensor out = conv2d(make(xs, {2, 5, 4}), make(ws, {3, 2, 3, 2}), Tensor(), options_of(r));
  REQUIRE(out.shape() == Shape{3, r.oH(), r.oW()});
  require_close(out, r.forward(xs, ws, {}), 1e-12, 1e-12);
}

TEST_CASE("conv2d reads non-contiguous inputs and weights", "[autograd][conv]") {
  const ConvRef r{.N = 2, .C = 3, .H = 5, .W = 6, .O = 2, .kH = 3, .kW = 3, .pH = 1, .pW = 1};
  const auto xs = pseudo_random(size_t(r.x_numel()), 6), ws = pseudo_random(size_t(r.w_numel()), 7);
  // the same values stored (W, H) and (kW, kH), read through transposed views
  std::vector<double> xt(xs.size()), wt(ws.size());
  for (int64_t p = 0; p < r.N * r.C; ++p)
    for (int64_t h = 0; h < r.H; ++h)
      for (int64_t w = 0; w < r.W; ++w) xt[size_t((p * r.W + w) * r.H + h)] = xs[size_t((p * r.H + h) * r.W + w)];
  for (int64_t p = 0; p < r.O * r.C; ++p)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j) wt[size_t(p * 9 + j * 3 + i)] = ws[size_t(p * 9 + i * 3 + j)];
  const Tensor x = make(xt, {r.N, r.C, r.W, r.H}).transpose(2, 3);
  const Tensor w = make(wt, {r.O, r.C, 3, 3}).transpose(2, 3);
  REQUIRE_FALSE(x.is_contiguous());
  require_close(conv2d(x, w, Tensor(), options_of(r)), r.forward(xs, ws, {}), 1e-12, 1e-12);
}

TEST_CASE("conv2d of an empty batch gives an empty output", "[autograd][conv]") {
  const Tensor out = conv2d(zeros({0, 2, 5, 5}), zeros({3, 2, 3, 3}), zeros({3}));
  REQUIRE(out.shape() == Shape{0, 3, 3, 3});
}

TEST_CASE("conv2d rejects a weight that does not match the input channels and groups", "[autograd][conv]") {
  const Tensor x = zeros({2, 3, 8, 8});
  require_error([&] { conv2d(x, zeros({4, 2, 3, 3})); },
                {"conv2d", "[O, C/groups, kH, kW]", "[O, 3, kH, kW]", "[2, 3, 8, 8]", "groups 1", "[4, 2, 3, 3]"});
  require_error([&] { conv2d(zeros({2, 4, 8, 8}), zeros({3, 2, 3, 3}), Tensor(), {.groups = 2}); },
                {"conv2d", "[O, 2, kH, kW]", "groups 2", "[3, 2, 3, 3]"});
  require_error([&] { conv2d(x, zeros({4, 3, 3, 3}), Tensor(), {.groups = 2}); },
                {"conv2d", "input channels 3", "groups 2"});
  require_error([&] { conv2d(x, zeros({4, 3, 3})); }, {"conv2d", "[4, 3, 3]"});
}

TEST_CASE("conv2d rejects bad bias, dtypes, ranks, options and empty outputs", "[autograd][conv]") {
  const Tensor x = zeros({2, 3, 8, 8}), w = zeros({4, 3, 3, 3});
  require_error([&] { conv2d(x, w, zeros({5})); }, {"conv2d", "bias", "[4]", "[5]"});
  require_error([&] { conv2d(x, w, zeros({4}, {.dtype = DType::Float64})); }, {"conv2d", "Float32", "Float64"});
  require_error([&] { conv2d(x, zeros({4, 3, 3, 3}, {.dtype = DType::Float64})); }, {"conv2d", "Float32", "Float64"});
  require_error([&] { conv2d(zeros({2, 3, 8, 8}, {.dtype = DType::Int64}), w); }, {"conv2d", "Int64"});
  require_error([&] { conv2d(zeros({3, 8}), w); }, {"conv2d", "4-d", "[3, 8]"});
  require_error([&] { conv2d(x, w, Tensor(), {.stride = {0, 1}}); }, {"conv2d", "stride 0 x 1"});
  require_error([&] { conv2d(x, w, Tensor(), {.padding = {-1, 0}}); }, {"conv2d", "padding -1 x 0"});
  require_error([&] { conv2d(x, w, Tensor(), {.dilation = {1, 0}}); }, {"conv2d", "dilation 1 x 0"});
  require_error([&] { conv2d(x, w, Tensor(), {.groups = 0}); }, {"conv2d", "groups > 0"});
  // a 9x9 dilated kernel on an 8x8 input
  require_error([&] { conv2d(x, w, Tensor(), {.dilation = {4, 4}}); }, {"conv2d", "[2, 3, 8, 8]", "9 x 9", "empty"});
  CpuDevicesGuard devices(2);
  require_error([&] { conv2d(x, w.to(Device("cpu:1"))); }, {"conv2d", "cpu:0", "cpu:1"});
}

// ---- pooling forward ----

TEST_CASE("max_pool2d matches a direct window maximum", "[autograd][pool]") {
  for (int64_t k : {2, 3})
    for (int64_t s : {1, 2, 3})
      for (int64_t pad : {int64_t(0), k / 2})
        for (int64_t n : {1, 3}) {
          const PoolRef r{.N = n, .C = 2, .H = 7, .W = 6, .kH = k, .kW = k, .sH = s, .sW = s, .pH = pad, .pW = pad};
          INFO("k " << k << " stride " << s << " pad " << pad << " N " << n);
          const auto xs = pseudo_random(size_t(n * 2 * 7 * 6), 8);
          const Tensor out = max_pool2d(make(xs, {n, 2, 7, 6}), pool_options(r));
          REQUIRE(out.shape() == Shape{n, 2, r.oH(), r.oW()});
          require_close(out, r.max(xs), 0, 0);
        }
}

TEST_CASE("max_pool2d defaults its stride to the kernel size and keeps Float32", "[autograd][pool]") {
  const PoolRef r{.N = 2, .C = 3, .H = 9, .W = 5, .kH = 3, .kW = 2, .sH = 3, .sW = 2};
  const auto xs = pseudo_random(size_t(2 * 3 * 9 * 5), 9);
  const Tensor out = max_pool2d(make(xs, {2, 3, 9, 5}, DType::Float32), {.kernel_size = {3, 2}});
  REQUIRE(out.dtype() == DType::Float32);
  REQUIRE(out.shape() == Shape{2, 3, 3, 2});
  require_close(out, r.max(xs), 1e-7, 0);
}

TEST_CASE("max_pool2d propagates NaN and pads with minus infinity", "[autograd][pool]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = make({1, nan, 3, 4, -5, -6, -7, -8}, {1, 2, 2, 2});
  const std::vector<double> got = values(max_pool2d(x));
  REQUIRE(std::isnan(got[0]));
  REQUIRE(got[1] == -5);
  // padding 1, kernel 3, stride 2 over a 2x2 plane of negatives: the maximum is never the padding
  require_close(max_pool2d(make({-4, -3, -2, -1}, {1, 1, 2, 2}), {.kernel_size = {3, 3}, .stride = {2, 2},
                                                                     .padding = {1, 1}}),
                {-1});
}

TEST_CASE("avg_pool2d matches a direct window mean counting padding", "[autograd][pool]") {
  for (int64_t k : {2, 3})
    for (int64_t s : {1, 2})
      for (int64_t pad : {int64_t(0), k / 2}) {
        const PoolRef r{.N = 3, .C = 2, .H = 6, .W = 7, .kH = k, .kW = k, .sH = s, .sW = s, .pH = pad, .pW = pad};
        INFO("k " << k << " stride " << s << " pad " << pad);
        const auto xs = pseudo_random(size_t(3 * 2 * 6 * 7), 10);
        const Tensor out = avg_pool2d(make(xs, {3, 2, 6, 7}), pool_options(r));
        REQUIRE(out.shape() == Shape{3, 2, r.oH(), r.oW()});
        require_close(out, r.avg(xs), 1e-12, 1e-12);
      }
  // hand-computed: padding 1 with a 2x2 kernel puts x[0, 0] alone in the first window: 1 / 4
  require_close(avg_pool2d(make({1, 2, 3, 4}, {1, 1, 2, 2}), {.kernel_size = {2, 2}, .stride = {1, 1},
                                                            .padding = {1, 1}}),
                {0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0});
}

TEST_CASE("pooling accepts an unbatched CHW input", "[autograd][pool]") {
  const PoolRef r{.N = 1, .C = 2, .H = 5, .W = 5, .kH = 2, .kW = 2, .sH = 2, .sW = 2};
  const auto xs = pseudo_random(50, 11);
  const Tensor mx = max_pool2d(make(xs, {2, 5, 5}));
  const Tensor av = avg_pool2d(make(xs, {2, 5, 5}));
  REQUIRE(mx.shape() == Shape{2, 2, 2});
  require_close(mx, r.max(xs), 0, 0);
  require_close(av, r.avg(xs), 1e-12, 1e-12);
}

TEST_CASE("pooling rejects padding over half the kernel, bad sizes and empty outputs", "[autograd][pool]") {
  const Tensor x = zeros({1, 2, 4, 4});
  for (auto pool : {max_pool2d, avg_pool2d}) {
    require_error([&] { pool(x, {.kernel_size = {3, 3}, .padding = {2, 1}}); },
                  {"pool2d", "padding", "half", "2 x 1", "3 x 3"});
    require_error([&] { pool(x, {.kernel_size = {0, 2}}); }, {"pool2d", "kernel_size 0 x 2"});
    require_error([&] { pool(x, {.kernel_size = {2, 2}, .stride = {-1, 2}}); }, {"pool2d", "stride -1 x 2"});
    require_error([&] { pool(x, {.kernel_size = {5, 2}}); }, {"pool2d", "[1, 2, 4, 4]", "5 x 2", "empty"});
    require_error([&] { pool(zeros({4, 4}), {}); }, {"pool2d", "4-d", "[4, 4]"});
    require_error([&] { pool(zeros({1, 1, 4, 4}, {.dtype = DType::Int64}), {}); }, {"pool2d", "Int64"});
  }
}

// ---- gradients ----

TEST_CASE("gradcheck of conv2d with respect to input, weight and bias", "[autograd][conv][gradcheck]") {
  const Tensor x = make(pseudo_random(2 * 3 * 5 * 4, 12), {2, 3, 5, 4}, DType::Float64, true);
  const Tensor w = make(pseudo_random(2 * 3 * 3 * 2, 13), {2, 3, 3, 2}, DType::Float64, true);
  const Tensor b = make(pseudo_random(2, 14), {2}, DType::Float64, true);
  REQUIRE(gradcheck([](const TensorList& in) { return conv2d(in[0], in[1], in[2], {.padding = {1, 0}}); },
                    {x, w, b}));
}

TEST_CASE("gradcheck of conv2d with stride, dilation and groups", "[autograd][conv][gradcheck]") {
  const Tensor x = make(pseudo_random(2 * 4 * 7 * 6, 15), {2, 4, 7, 6}, DType::Float64, true);
  const Tensor w = make(pseudo_random(6 * 2 * 2 * 3, 16), {6, 2, 2, 3}, DType::Float64, true);
  const Tensor b = make(pseudo_random(6, 17), {6}, DType::Float64, true);
  const Conv2dOptions o{.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}, .groups = 2};
  REQUIRE(gradcheck([&](const TensorList& in) { return conv2d(in[0], in[1], in[2], o); }, {x, w, b}));
  // 1x1 kernel, stride 1: the column-free path
  const Tensor w1 = make(pseudo_random(6 * 2, 18), {6, 2, 1, 1}, DType::Float64, true);
  REQUIRE(gradcheck([](const TensorList& in) { return conv2d(in[0], in[1], Tensor(), {.groups = 2}); }, {x, w1}));
}

TEST_CASE("conv2d backward matches the direct derivative", "[autograd][conv]") {
  const ConvRef r{.N = 3, .C = 4, .H = 6, .W = 7, .O = 4, .kH = 3, .kW = 2, .sH = 2, .sW = 1, .pH = 1, .pW = 1,
                  .dH = 1, .dW = 2, .groups = 2};
  const auto xs = pseudo_random(size_t(r.x_numel()), 19), ws = pseudo_random(size_t(r.w_numel()), 20);
  const auto gy = pseudo_random(size_t(r.y_numel()), 21);
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const double tol = dtype == DType::Float32 ? 1e-5 : 1e-12;
    const Tensor x = make(xs, {r.N, r.C, r.H, r.W}, dtype, true);
    const Tensor w = make(ws, {r.O, r.Cg(), r.kH, r.kW}, dtype, true);
    const Tensor b = make(pseudo_random(size_t(r.O), 22), {r.O}, dtype, true);
    const auto grads = grads_of(conv2d(x, w, b, options_of(r)), gy, {x, w, b});
    require_close(grads[0], r.grad_input(gy, ws), tol, tol);
    require_close(grads[1], r.grad_weight(gy, xs), tol, tol);
    std::vector<double> gb(size_t(r.O), 0.0);
    for (int64_t i = 0; i < r.y_numel(); ++i) gb[size_t((i / (r.oH() * r.oW())) % r.O)] += gy[size_t(i)];
    require_close(grads[2], gb, tol, tol);
  }
}

TEST_CASE("conv2d computes only the gradients that are needed", "[autograd][conv]") {
  const Tensor x = make(pseudo_random(2 * 2 * 4 * 4, 23), {2, 2, 4, 4});
  const Tensor w = make(pseudo_random(3 * 2 * 3 * 3, 24), {3, 2, 3, 3}, DType::Float64, true);
  const Tensor b = make({0, 0, 0}, {3});
  const Tensor out = conv2d(x, w, b);
  REQUIRE(out.requires_grad());
  sum(out).backward();
  REQUIRE_FALSE(x.grad().defined());
  REQUIRE_FALSE(b.grad().defined());
  // d sum(out) / d w[o, c, i, j] = sum over n and the 2x2 outputs of the input under tap (i, j)
  ConvRef r{.N = 2, .C = 2, .H = 4, .W = 4, .O = 3, .kH = 3, .kW = 3};
  require_close(w.grad(), r.grad_weight(std::vector<double>(size_t(r.y_numel()), 1.0), values(x)), 1e-12, 1e-12);
  // no input requires grad: nothing is recorded
  REQUIRE_FALSE(conv2d(x, w.detach()).requires_grad());
}

TEST_CASE("conv2d writes its weight gradient into the weight's destination, unless the weight is the input",
          "[autograd][conv]") {
  // The gradients of sum(conv2d(x, w, b)^2) with and without destinations; then conv2d(w, w),
  // where the input's gradient is added to the same leaf after the node returns.
  for (bool self : {false, true}) {
    INFO("conv2d(w, w): " << self);
    const Shape w_shape{2, 2, 3, 3};
    Tensor w = make(pseudo_random(36, 40), w_shape, DType::Float64, true);
    const Tensor x = self ? w : make(pseudo_random(2 * 2 * 5 * 5, 41), {2, 2, 5, 5}, DType::Float64, true);
    Tensor b = make(pseudo_random(2, 42), {2}, DType::Float64, true);
    auto run = [&] {
      const Tensor y = conv2d(x, w, b, {.padding = {1, 1}});
      sum(mul(y, y)).backward();
    };
    run();
    const std::vector<double> want_w = values(w.grad()), want_b = values(b.grad());
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    if (!self) x.set_grad(Tensor());
    const Tensor w_slot = zeros(w_shape, {.dtype = DType::Float64}), b_slot = zeros({2}, {.dtype = DType::Float64});
    set_grad_destination(w, w_slot);
    set_grad_destination(b, b_slot);
    run();
    REQUIRE(w.grad().is_same(w_slot));
    REQUIRE(b.grad().is_same(b_slot));  // the bias gradient is a fresh sum, copied in
    require_close(w_slot, want_w, 1e-12);
    require_close(b_slot, want_b, 1e-12);
  }
}

TEST_CASE("conv2d gradients flow through an unbatched input", "[autograd][conv]") {
  const Tensor x = make(pseudo_random(2 * 4 * 5, 25), {2, 4, 5}, DType::Float64, true);
  const Tensor w = make(pseudo_random(3 * 2 * 2 * 2, 26), {3, 2, 2, 2}, DType::Float64, true);
  REQUIRE(gradcheck([](const TensorList& in) { return conv2d(in[0], in[1], Tensor(), {.padding = {1, 1}}); },
                    {x, w}));
}

TEST_CASE("gradcheck of max_pool2d with overlapping and padded windows", "[autograd][pool][gradcheck]") {
  // distinct values (a shuffled ramp) so that no window has a tie that finite differences would split
  std::vector<double> v(2 * 2 * 7 * 6);
  for (size_t i = 0; i < v.size(); ++i) v[i] = double((i * 37) % v.size()) / double(v.size()) - 0.5;
  const Tensor x = make(v, {2, 2, 7, 6}, DType::Float64, true);
  REQUIRE(gradcheck([](const TensorList& in) { return max_pool2d(in[0], {.kernel_size = {3, 3}, .stride = {2, 1},
                                                                         .padding = {1, 1}}); },
                    {x}));
  REQUIRE(gradcheck([](const TensorList& in) { return max_pool2d(in[0]); }, {x}));
}

TEST_CASE("max_pool2d backward sends each gradient to the chosen element", "[autograd][pool]") {
  const PoolRef r{.N = 2, .C = 3, .H = 7, .W = 8, .kH = 3, .kW = 2, .sH = 1, .sW = 2, .pH = 1, .pW = 1};
  const auto xs = pseudo_random(size_t(2 * 3 * 7 * 8), 27);
  const auto gy = pseudo_random(size_t(r.y_numel()), 28);
  const Tensor x = make(xs, {2, 3, 7, 8}, DType::Float64, true);
  const auto grads = grads_of(max_pool2d(x, pool_options(r)), gy, {x});
  require_close(grads[0], r.max_grad(xs, gy), 1e-12, 1e-12);
}

TEST_CASE("gradcheck of avg_pool2d with overlapping and padded windows", "[autograd][pool][gradcheck]") {
  const Tensor x = make(pseudo_random(2 * 2 * 6 * 7, 29), {2, 2, 6, 7}, DType::Float64, true);
  REQUIRE(gradcheck([](const TensorList& in) { return avg_pool2d(in[0], {.kernel_size = {3, 2}, .stride = {2, 1},
                                                                         .padding = {1, 1}}); },
                    {x}));
  const PoolRef r{.N = 2, .C = 2, .H = 6, .W = 7, .kH = 2, .kW = 3, .sH = 1, .sW = 2, .pH = 1, .pW = 0};
  const auto gy = pseudo_random(size_t(r.y_numel()), 30);
  const Tensor x2 = make(values(x), {2, 2, 6, 7}, DType::Float64, true);
  const auto grads = grads_of(avg_pool2d(x2, pool_options(r)), gy, {x2});
  require_close(grads[0], r.avg_grad(gy), 1e-12, 1e-12);
}

TEST_CASE("conv2d and pooling record one node each, also for non-contiguous inputs", "[autograd][conv]") {
  Tape tape;
  TapeScope scope(tape);
  const Tensor leaf = make(pseudo_random(2 * 2 * 5 * 6, 31), {2, 2, 5, 6}, DType::Float64, true);
  const Tensor x = leaf.transpose(2, 3);  // one node: transpose
  const Tensor w = make(pseudo_random(3 * 2 * 2 * 2, 32), {3, 2, 2, 2}, DType::Float64, true).transpose(2, 3);
  const size_t before = tape.size();
  const Tensor y = avg_pool2d(max_pool2d(conv2d(x, w), {.kernel_size = {2, 2}, .stride = {1, 1}}));
  REQUIRE(tape.size() == before + 3);
  const auto nodes = tape.live_nodes();
  REQUIRE(nodes[nodes.size() - 3]->name == "conv2d");
  REQUIRE(nodes[nodes.size() - 2]->name == "max_pool2d");
  REQUIRE(nodes[nodes.size() - 1]->name == "avg_pool2d");
  // and the gradient reaches the leaf through the transposed views
  REQUIRE(gradcheck([](const TensorList& in) { return conv2d(in[0].transpose(2, 3), in[1]); },
                    {leaf, make(pseudo_random(3 * 2 * 2 * 2, 33), {3, 2, 2, 2}, DType::Float64, true)}));
}
