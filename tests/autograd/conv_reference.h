// tests/autograd/conv_reference.h — naive references for convolution and pooling: direct loops
// over row-major std::vector<double>, written without multigrad code (no im2col, no gather), so
// the tests compare two independent computations. Backward references scatter along the forward
// loops, the opposite of the kernels' formulation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace mg::test {

struct ConvRef {
  int64_t N, C, H, W, O, kH, kW;
  int64_t sH = 1, sW = 1, pH = 0, pW = 0, dH = 1, dW = 1, groups = 1;

  int64_t oH() const { return (H + 2 * pH - dH * (kH - 1) - 1) / sH + 1; }
  int64_t oW() const { return (W + 2 * pW - dW * (kW - 1) - 1) / sW + 1; }
  int64_t Cg() const { return C / groups; }
  int64_t Og() const { return O / groups; }
  int64_t x_numel() const { return N * C * H * W; }
  int64_t w_numel() const { return O * Cg() * kH * kW; }
  int64_t y_numel() const { return N * O * oH() * oW(); }

  // Calls f(x_index, w_index, y_index) for every multiply of the convolution.
  template <class F>
  void for_each_term(const F& f) const {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t y = 0; y < oH(); ++y)
          for (int64_t x = 0; x < oW(); ++x)
            for (int64_t ci = 0; ci < Cg(); ++ci)
              for (int64_t i = 0; i < kH; ++i)
                for (int64_t j = 0; j < kW; ++j) {
                  const int64_t h = y * sH - pH + i * dH, w = x * sW - pW + j * dW;
                  if (h < 0 || h >= H || w < 0 || w >= W) continue;
                  const int64_t c = (o / Og()) * Cg() + ci;
                  f(((n * C + c) * H + h) * W + w, ((o * Cg() + ci) * kH + i) * kW + j,
                    ((n * O + o) * oH() + y) * oW() + x);
                }
  }

  std::vector<double> forward(const std::vector<double>& xs, const std::vector<double>& ws,
                              const std::vector<double>& bs) const {
    std::vector<double> out(size_t(y_numel()), 0.0);
    for_each_term([&](int64_t xi, int64_t wi, int64_t yi) { out[size_t(yi)] += xs[size_t(xi)] * ws[size_t(wi)]; });
    if (!bs.empty())
      for (int64_t yi = 0; yi < y_numel(); ++yi) out[size_t(yi)] += bs[size_t((yi / (oH() * oW())) % O)];
    return out;
  }
  std::vector<double> grad_input(const std::vector<double>& gy, const std::vector<double>& ws) const {
    std::vector<double> gx(size_t(x_numel()), 0.0);
    for_each_term([&](int64_t xi, int64_t wi, int64_t yi) { gx[size_t(xi)] += gy[size_t(yi)] * ws[size_t(wi)]; });
    return gx;
  }
  std::vector<double> grad_weight(const std::vector<double>& gy, const std::vector<double>& xs) const {
    std::vector<double> gw(size_t(w_numel()), 0.0);
    for_each_term([&](int64_t xi, int64_t wi, int64_t yi) { gw[size_t(wi)] += gy[size_t(yi)] * xs[size_t(xi)]; });
    return gw;
  }
};

struct PoolRef {
  int64_t N, C, H, W, kH, kW, sH, sW, pH = 0, pW = 0;

  int64_t oH() const { return (H + 2 * pH - kH) / sH + 1; }
  int64_t oW() const { return (W + 2 * pW - kW) / sW + 1; }
  int64_t y_numel() const { return N * C * oH() * oW(); }

  // Calls f(x_index, y_index) for every in-plane element of every window, in row-major order.
  template <class F>
  void for_each_window_element(const F& f) const {
    for (int64_t p = 0; p < N * C; ++p)
      for (int64_t y = 0; y < oH(); ++y)
        for (int64_t x = 0; x < oW(); ++x)
          for (int64_t i = 0; i < kH; ++i)
            for (int64_t j = 0; j < kW; ++j) {
              const int64_t h = y * sH - pH + i, w = x * sW - pW + j;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              f((p * H + h) * W + w, (p * oH() + y) * oW() + x);
            }
  }

  // Max of each window and the flat input index (over the whole tensor) of its first maximum.
  std::vector<double> max(const std::vector<double>& xs, std::vector<int64_t>* argmax = nullptr) const {
    std::vector<double> out(size_t(y_numel()), -std::numeric_limits<double>::infinity());
    std::vector<int64_t> where(size_t(y_numel()), -1);
    for_each_window_element([&](int64_t xi, int64_t yi) {
      if (where[size_t(yi)] < 0 || xs[size_t(xi)] > out[size_t(yi)]) {
        out[size_t(yi)] = xs[size_t(xi)];
        where[size_t(yi)] = xi;
      }
    });
    if (argmax) *argmax = where;
    return out;
  }
  std::vector<double> max_grad(const std::vector<double>& xs, const std::vector<double>& gy) const {
    std::vector<int64_t> where;
    max(xs, &where);
    std::vector<double> gx(size_t(N * C * H * W), 0.0);
    for (size_t yi = 0; yi < where.size(); ++yi) gx[size_t(where[yi])] += gy[yi];
    return gx;
  }
  std::vector<double> avg(const std::vector<double>& xs) const {
    std::vector<double> out(size_t(y_numel()), 0.0);
    for_each_window_element([&](int64_t xi, int64_t yi) { out[size_t(yi)] += xs[size_t(xi)]; });
    for (double& v : out) v /= double(kH * kW);
    return out;
  }
  std::vector<double> avg_grad(const std::vector<double>& gy) const {
    std::vector<double> gx(size_t(N * C * H * W), 0.0);
    for_each_window_element([&](int64_t xi, int64_t yi) { gx[size_t(xi)] += gy[size_t(yi)] / double(kH * kW); });
    return gx;
  }
};

}  // namespace mg::test
