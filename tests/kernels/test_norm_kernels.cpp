// tests/kernels/test_norm_kernels.cpp — the fused batch- and layer-norm kernels of kernels/norm.h
// called directly (no autograd) on the CPU: statistics, forward and backward against a float64
// reference written from the textbook chain rule (not the kernels' simplified grad_x), with
// batch and running statistics, with and without weight and bias, S = 1 and S > 1, odd sizes,
// rows in several backward blocks, Float32 and Float64; outputs are assigned; only the requested
// gradients are written; the dispatch's checks; the same bits for any CPU thread budget.
#include <cmath>
#include <vector>

#include "multigrad/kernels/norm.h"
#include "core/cpu_devices_guard.h"
#include "kernels/kernel_test_util.h"

using namespace mg;
using namespace mg::test;
namespace k = mg::kernels;

namespace {

constexpr double kEps = 1e-5;

// The float64 reference on x (N, C, S): statistics (or the given running ones), y, and the
// gradients for the output gradient g. weight / bias empty means 1 / 0.
struct Reference {
  std::vector<double> mean, var, y, gx, gw, gb;
};

Reference reference(const std::vector<double>& x, const std::vector<double>& g, const std::vector<double>& weight,
                    const std::vector<double>& bias, int64_t n, int64_t c, int64_t s, bool batch_stats,
                    const std::vector<double>& running_mean, const std::vector<double>& running_var) {
  const double m = double(n * s);
  auto at = [&](int64_t i, int64_t ch, int64_t k) { return size_t((i * c + ch) * s + k); };
  Reference r{std::vector<double>(size_t(c)), std::vector<double>(size_t(c)), std::vector<double>(x.size()),
              std::vector<double>(x.size()), std::vector<double>(size_t(c)), std::vector<double>(size_t(c))};
  for (int64_t ch = 0; ch < c; ++ch) {
    const size_t cc = size_t(ch);
    double mu = 0, var = 0;
    if (batch_stats) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < s; ++k) mu += x[at(i, ch, k)] / m;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < s; ++k) var += (x[at(i, ch, k)] - mu) * (x[at(i, ch, k)] - mu) / m;
    } else {
      mu = running_mean[cc];
      var = running_var[cc];
    }
    r.mean[cc] = mu;
    r.var[cc] = var;
    const double w = weight.empty() ? 1.0 : weight[cc], b = bias.empty() ? 0.0 : bias[cc];
    const double invstd = 1.0 / std::sqrt(var + kEps);
    // dL/dxhat = g w; through var = mean((x - mu)^2) and mu = mean(x) when they are batch statistics.
    double sum_dxhat = 0, sum_dxhat_centered = 0, sum_centered = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) {
        const size_t j = at(i, ch, k);
        const double xhat = (x[j] - mu) * invstd;
        r.y[j] = xhat * w + b;
        r.gb[cc] += g[j];
        r.gw[cc] += g[j] * xhat;
        sum_dxhat += g[j] * w;
        sum_dxhat_centered += g[j] * w * (x[j] - mu);
        sum_centered += x[j] - mu;
      }
    const double dvar = sum_dxhat_centered * -0.5 * invstd * invstd * invstd;
    const double dmu = -invstd * sum_dxhat + dvar * -2.0 * sum_centered / m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) {
        const size_t j = at(i, ch, k);
        r.gx[j] = g[j] * w * invstd;
        if (batch_stats) r.gx[j] += dvar * 2.0 * (x[j] - mu) / m + dmu / m;
      }
  }
  return r;
}

// Filled with a sentinel, to show that a kernel assigns every element.
Tensor stale(const Shape& shape, DType dtype) { return full(shape, 1e30, {.dtype = dtype}); }

struct Case {
  Shape shape;
  bool weight, bias, batch_stats;
};

// Runs stats (with batch statistics), forward and the full backward of one case and compares
// every output with the reference.
void check_case(const Case& cs, DType dtype) {
  const int64_t n = cs.shape[0], c = cs.shape[1], numel = numel_of(cs.shape), s = numel / (n * c);
  const double rtol = dtype == DType::Float32 ? 1e-4 : 1e-10, atol = dtype == DType::Float32 ? 1e-5 : 1e-12;
  const TensorOptions opt{.dtype = dtype};
  std::vector<double> xs = pseudo_random(size_t(numel), uint64_t(numel + c));
  for (double& v : xs) v = 2.0 * v + 3.0;  // a mean far from 0: the centering must keep its digits
  const Tensor x = tensor(xs, cs.shape, opt), g = tensor(pseudo_random(size_t(numel), 7), cs.shape, opt);
  const Tensor weight = cs.weight ? tensor(pseudo_random(size_t(c), 8), {c}, opt) : Tensor();
  const Tensor bias = cs.bias ? tensor(pseudo_random(size_t(c), 9), {c}, opt) : Tensor();
  Tensor mean = stale({c}, dtype), var = stale({c}, dtype);
  if (cs.batch_stats) {
    k::batch_norm_stats(x, mean, var);
  } else {
    std::vector<double> rv = pseudo_random(size_t(c), 10);
    for (double& v : rv) v = v * v + 0.5;
    mean = tensor(pseudo_random(size_t(c), 11), {c}, opt);
    var = tensor(rv, {c}, opt);
  }
  // The reference reads the inputs as the kernels see them (rounded to the dtype).
  const Reference want = reference(values(x), values(g), cs.weight ? values(weight) : std::vector<double>{},
                                   cs.bias ? values(bias) : std::vector<double>{}, n, c, s, cs.batch_stats,
                                   values(mean), values(var));
  if (cs.batch_stats) {
    INFO("statistics");
    require_close(mean, want.mean, rtol, atol);
    require_close(var, want.var, rtol, atol);
  }
  Tensor y = stale(cs.shape, dtype);
  k::batch_norm_forward(x, mean, var, weight, bias, kEps, y);
  {
    INFO("forward");
    require_close(y, want.y, rtol, atol);
  }
  Tensor gx = stale(cs.shape, dtype), gw = stale({c}, dtype), gb = stale({c}, dtype);
  k::batch_norm_backward(g, x, mean, var, weight, kEps, cs.batch_stats, gx, gw, gb);
  INFO("backward");
  require_close(gx, want.gx, rtol, atol);
  require_close(gw, want.gw, rtol, atol);
  require_close(gb, want.gb, rtol, atol);
}

}  // namespace

TEST_CASE("batch-norm kernels match a float64 reference", "[kernels][norm]") {
  // S > 1, S = 1 ((N, C) input), an odd S past a SIMD multiple, one sample.
  for (const Shape& shape : std::vector<Shape>{{4, 3, 5, 7}, {6, 5}, {3, 2, 1001}, {1, 4, 9}})
    for (DType dtype : {DType::Float32, DType::Float64})
      for (bool batch_stats : {true, false})
        for (int affine = 0; affine < 4; ++affine) {
          const Case cs{shape, (affine & 1) != 0, (affine & 2) != 0, batch_stats};
          INFO("shape " << to_string(shape) << " " << dtype << (batch_stats ? " batch" : " running")
                        << " statistics, weight " << cs.weight << ", bias " << cs.bias);
          check_case(cs, dtype);
        }
}

TEST_CASE("batch-norm statistics of Float32 accumulate in float64", "[kernels][norm]") {
  // 1 then 2^17 - 1 copies of 2^-24 in one channel: a float32 running sum would stay at 1.
  const int64_t m = int64_t(1) << 17;
  std::vector<double> x(size_t(m), 1.0 / 16777216);
  x[0] = 1;
  Tensor mean = Tensor::empty({1}), var = Tensor::empty({1});
  k::batch_norm_stats(tensor(x, {1, 1, m}), mean, var);
  REQUIRE(values(mean)[0] == double(float((1.0 + double(m - 1) / 16777216) / double(m))));
}

TEST_CASE("batch-norm backward writes only the requested gradients and reads x only when needed",
          "[kernels][norm]") {
  const Shape shape{3, 2, 4};
  const Tensor x = tensor(pseudo_random(24, 1), shape, {.dtype = DType::Float64});
  const Tensor g = tensor(pseudo_random(24, 2), shape, {.dtype = DType::Float64});
  const Tensor w = tensor({0.5, -2.0}, {2}, {.dtype = DType::Float64});
  const Tensor mean = tensor({0.1, -0.2}, {2}, {.dtype = DType::Float64});
  const Tensor var = tensor({1.5, 0.25}, {2}, {.dtype = DType::Float64});
  Tensor gx_all = stale(shape, DType::Float64), gw_all = stale({2}, DType::Float64);
  Tensor gb_all = stale({2}, DType::Float64);
  k::batch_norm_backward(g, x, mean, var, w, kEps, false, gx_all, gw_all, gb_all);
  // Running statistics: grad_x and grad_bias need no x.
  Tensor gx = stale(shape, DType::Float64), gb = stale({2}, DType::Float64);
  k::batch_norm_backward(g, Tensor(), mean, var, w, kEps, false, gx, Tensor(), gb);
  REQUIRE(values(gx) == values(gx_all));
  REQUIRE(values(gb) == values(gb_all));
  Tensor gw = stale({2}, DType::Float64);
  k::batch_norm_backward(g, x, mean, var, w, kEps, false, Tensor(), gw, Tensor());
  REQUIRE(values(gw) == values(gw_all));
  // grad_weight, and grad_x with batch statistics, need x.
  require_error([&] { k::batch_norm_backward(g, Tensor(), mean, var, w, kEps, false, Tensor(), gw, Tensor()); },
                {"batch_norm_backward", "x is undefined"});
  require_error([&] { k::batch_norm_backward(g, Tensor(), mean, var, w, kEps, true, gx, Tensor(), Tensor()); },
                {"batch_norm_backward", "x is undefined"});
}

TEST_CASE("batch-norm kernels check layouts, dtypes and devices", "[kernels][norm]") {
  const Tensor x = zeros({4, 3, 2}), mean = zeros({3}), var = ones({3});
  Tensor out = Tensor::empty({4, 3, 2});
  const Tensor strided = Tensor::empty({24}).as_strided({4, 3, 2}, {1, 4, 12}, 0);
  require_error([&] { k::batch_norm_forward(strided, mean, var, Tensor(), Tensor(), kEps, out); },
                {"batch_norm_forward", "x must be contiguous (N, C, ...)"});
  require_error([&] { k::batch_norm_stats(x, zeros({3}, {.dtype = DType::Float64}), var); },
                {"batch_norm_stats", "mean", "Float32", "[3]", "Float64"});
  require_error([&] { k::batch_norm_forward(x, mean, var, zeros({4}), Tensor(), kEps, out); },
                {"weight", "[3]", "[4]"});
  require_error([&] { k::batch_norm_forward(x, mean, var, Tensor(), Tensor(), kEps, Tensor::empty({4, 3})); },
                {"out", "[4, 3, 2]", "[4, 3]"});
  require_error([&] { k::batch_norm_stats(zeros({4}), zeros({4}), ones({4})); }, {"(N, C, ...)", "[4]"});
  CpuDevicesGuard devices(2);
  require_error([&] { k::batch_norm_stats(x, zeros({3}, {.device = Device("cpu:1")}), var); },
                {"batch_norm_stats", "cpu:0", "cpu:1"});
}

TEST_CASE("batch-norm kernels give the same bits for any CPU thread budget", "[kernels][norm]") {
  // Float32 with sums over many planes: any change of summation order would show in the bits.
  const Shape shape{16, 8, 48, 48};
  const Tensor x = random_tensor<float>(shape, 12), g = random_tensor<float>(shape, 13);
  const Tensor w = random_tensor<float>({8}, 14), b = random_tensor<float>({8}, 15);
  // Every output of one run on cpu:0, with the thread budget `devices` CPU devices leave it.
  auto run = [&](int devices) {
    CpuDevicesGuard guard(devices);
    std::vector<Tensor> outs{Tensor::empty({8}), Tensor::empty({8}), Tensor::empty(shape), Tensor::empty(shape),
                             Tensor::empty({8}), Tensor::empty({8})};
    k::batch_norm_stats(x, outs[0], outs[1]);
    k::batch_norm_forward(x, outs[0], outs[1], w, b, kEps, outs[2]);
    k::batch_norm_backward(g, x, outs[0], outs[1], w, kEps, true, outs[3], outs[4], outs[5]);
    return outs;
  };
  const std::vector<Tensor> many = run(1), few = run(8);
  for (size_t i = 0; i < many.size(); ++i) {
    INFO("output " << i);
    REQUIRE(read<float>(few[i]) == read<float>(many[i]));
  }
}

namespace {

// The float64 layer-norm reference on x (R, D): each row's mean and 1 / sqrt(var + eps), y, and
// the gradients for g by the chain rule through the row's mean and variance. weight / bias
// empty means 1 / 0.
struct RowReference {
  std::vector<double> mean, rstd, y, gx, gw, gb;
};

RowReference row_reference(const std::vector<double>& x, const std::vector<double>& g,
                           const std::vector<double>& weight, const std::vector<double>& bias, int64_t rows,
                           int64_t d) {
  RowReference r{std::vector<double>(size_t(rows)), std::vector<double>(size_t(rows)), std::vector<double>(x.size()),
                 std::vector<double>(x.size()), std::vector<double>(size_t(d)), std::vector<double>(size_t(d))};
  for (int64_t i = 0; i < rows; ++i) {
    const size_t at = size_t(i * d);
    double mu = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mu += x[at + size_t(j)] / double(d);
    for (int64_t j = 0; j < d; ++j) var += (x[at + size_t(j)] - mu) * (x[at + size_t(j)] - mu) / double(d);
    const double rstd = 1.0 / std::sqrt(var + kEps);
    r.mean[size_t(i)] = mu, r.rstd[size_t(i)] = rstd;
    double sum_dxhat = 0, sum_dxhat_centered = 0, sum_centered = 0;
    for (int64_t j = 0; j < d; ++j) {
      const size_t e = at + size_t(j);
      const double w = weight.empty() ? 1.0 : weight[size_t(j)], b = bias.empty() ? 0.0 : bias[size_t(j)];
      const double xhat = (x[e] - mu) * rstd;
      r.y[e] = xhat * w + b;
      r.gw[size_t(j)] += g[e] * xhat;
      r.gb[size_t(j)] += g[e];
      sum_dxhat += g[e] * w;
      sum_dxhat_centered += g[e] * w * (x[e] - mu);
      sum_centered += x[e] - mu;
    }
    const double dvar = sum_dxhat_centered * -0.5 * rstd * rstd * rstd;
    const double dmu = -rstd * sum_dxhat + dvar * -2.0 * sum_centered / double(d);
    for (int64_t j = 0; j < d; ++j) {
      const size_t e = at + size_t(j);
      const double w = weight.empty() ? 1.0 : weight[size_t(j)];
      r.gx[e] = g[e] * w * rstd + dvar * 2.0 * (x[e] - mu) / double(d) + dmu / double(d);
    }
  }
  return r;
}

}  // namespace

TEST_CASE("layer-norm kernels match a float64 reference", "[kernels][norm]") {
  // One value per row, odd D, 70 rows (three backward blocks of 32), D past a SIMD multiple.
  // Tolerances as for batch norm above (the same few float32 roundings per value).
  for (auto [rows, d] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 7}, {70, 33}, {5, 300}})
    for (DType dtype : {DType::Float32, DType::Float64})
      for (int affine = 0; affine < 4; ++affine) {
        const bool has_w = (affine & 1) != 0, has_b = (affine & 2) != 0;
        INFO(rows << " x " << d << " " << dtype << ", weight " << has_w << ", bias " << has_b);
        const double rtol = dtype == DType::Float32 ? 1e-4 : 1e-10, atol = dtype == DType::Float32 ? 1e-5 : 1e-12;
        const TensorOptions opt{.dtype = dtype};
        std::vector<double> xs = pseudo_random(size_t(rows * d), uint64_t(rows + d));
        for (double& v : xs) v = 2.0 * v + 3.0;  // a mean far from 0: the centering must keep its digits
        const Tensor x = tensor(xs, {rows, d}, opt), g = tensor(pseudo_random(size_t(rows * d), 7), {rows, d}, opt);
        const Tensor w = has_w ? tensor(pseudo_random(size_t(d), 8), {d}, opt) : Tensor();
        const Tensor b = has_b ? tensor(pseudo_random(size_t(d), 9), {d}, opt) : Tensor();
        const RowReference want = row_reference(values(x), values(g), has_w ? values(w) : std::vector<double>{},
                                                has_b ? values(b) : std::vector<double>{}, rows, d);
        Tensor y = stale({rows, d}, dtype), mean = stale({rows}, dtype), rstd = stale({rows}, dtype);
        k::layer_norm_forward(x, w, b, kEps, y, mean, rstd);
        require_close(mean, want.mean, rtol, atol);
        require_close(rstd, want.rstd, rtol, atol);
        require_close(y, want.y, rtol, atol);
        Tensor gx = stale({rows, d}, dtype), gw = stale({d}, dtype), gb = stale({d}, dtype);
        k::layer_norm_backward(g, x, mean, rstd, w, gx, gw, gb);
        require_close(gx, want.gx, rtol, atol);
        require_close(gw, want.gw, rtol, atol);
        require_close(gb, want.gb, rtol, atol);
        // Only what is asked for is written.
        Tensor gb_only = stale({d}, dtype);
        k::layer_norm_backward(g, x, mean, rstd, w, Tensor(), Tensor(), gb_only);
        REQUIRE(values(gb_only) == values(gb));
        Tensor gx_only = stale({rows, d}, dtype);
        k::layer_norm_backward(g, x, mean, rstd, w, gx_only, Tensor(), Tensor());
        REQUIRE(values(gx_only) == values(gx));
      }
}

TEST_CASE("layer-norm kernels give the same bits for any CPU thread budget", "[kernels][norm]") {
  // Float32, 1000 rows: the column sums of grad_weight and grad_bias span 32 blocks.
  const int64_t rows = 1000, d = 96;
  const Tensor x = random_tensor<float>({rows, d}, 16), g = random_tensor<float>({rows, d}, 17);
  const Tensor w = random_tensor<float>({d}, 18), b = random_tensor<float>({d}, 19);
  auto run = [&](int devices) {
    CpuDevicesGuard guard(devices);
    std::vector<Tensor> outs{Tensor::empty({rows, d}), Tensor::empty({rows}), Tensor::empty({rows}),
                             Tensor::empty({rows, d}), Tensor::empty({d}), Tensor::empty({d})};
    k::layer_norm_forward(x, w, b, kEps, outs[0], outs[1], outs[2]);
    k::layer_norm_backward(g, x, outs[1], outs[2], w, outs[3], outs[4], outs[5]);
    return outs;
  };
  const std::vector<Tensor> many = run(1), few = run(8);
  for (size_t i = 0; i < many.size(); ++i) {
    INFO("output " << i);
    REQUIRE(read<float>(few[i]) == read<float>(many[i]));
  }
}

TEST_CASE("layer-norm kernels check layouts, dtypes, row counts and devices", "[kernels][norm]") {
  const Tensor x = zeros({4, 6}), mean = zeros({4}), rstd = ones({4});
  Tensor out = Tensor::empty({4, 6});
  const Tensor strided = Tensor::empty({24}).as_strided({4, 6}, {1, 4}, 0);
  require_error([&] { k::layer_norm_forward(strided, Tensor(), Tensor(), kEps, out, mean, rstd); },
                {"layer_norm_forward", "x must be contiguous"});
  require_error([&] { k::layer_norm_forward(x, Tensor(), Tensor(), kEps, out, zeros({5}), ones({5})); },
                {"layer_norm_forward", "5 rows do not divide x of shape [4, 6]"});
  require_error([&] { k::layer_norm_forward(x, zeros({4}), Tensor(), kEps, out, mean, rstd); },
                {"weight", "[6]", "[4]"});
  const Tensor rstd64 = ones({4}, {.dtype = DType::Float64});
  require_error([&] { k::layer_norm_forward(x, Tensor(), Tensor(), kEps, out, mean, rstd64); },
                {"rstd", "Float32", "Float64"});
  require_error([&] { k::layer_norm_backward(out, x, mean, rstd, Tensor(), Tensor(), zeros({3}), Tensor()); },
                {"grad_weight", "[6]", "[3]"});
  CpuDevicesGuard devices(2);
  const Tensor mean1 = zeros({4}, {.device = Device("cpu:1")});
  require_error([&] { k::layer_norm_forward(x, Tensor(), Tensor(), kEps, out, mean1, rstd); },
                {"layer_norm_forward", "cpu:0", "cpu:1"});
}
