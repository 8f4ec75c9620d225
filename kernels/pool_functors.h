// kernels/pool_functors.h — the math of 2-d max and average pooling, written once (MG_HD) and
// applied by the CPU loops (kernels/cpu/pool.cpp) and the CUDA kernels (kernels/cuda/pool.cu),
// so both backends visit the same elements in the same order and agree bit for bit.
//
// Each function works on one (n, c) plane: `in` or `grad_in` is (H, W), `out`, `grad_out` and
// `indices` are (oH, oW), all contiguous. Output (y, x) pools the window
//   rows y sH - pH ... y sH - pH + kH - 1,  columns x sW - pW ... x sW - pW + kW - 1,
// clipped to the plane. Because padding <= kernel / 2 and sizes are floored, every window holds
// at least one element of the plane.
//
// Backward is a gather, not a scatter: one input element sums the gradients of the outputs
// whose windows contain it. Input row h lies in the windows of outputs y with
//   y sH - pH <= h < y sH - pH + kH,  i.e.  y in [ceil((h + pH - kH + 1) / sH), (h + pH) / sH],
// clipped to [0, oH). Gathering needs no atomics and fixes the summation order, so the result
// does not depend on the thread count or the GPU.
#pragma once

#include <cstdint>

#include "multigrad/core/macros.h"

namespace mg::kernels {

struct PoolGeometry {
  int64_t H, W;    // input plane
  int64_t oH, oW;  // output plane
  int64_t kH, kW, sH, sW, pH, pW;
};

MG_HD int64_t pool_min(int64_t a, int64_t b) { return a < b ? a : b; }
MG_HD int64_t pool_max(int64_t a, int64_t b) { return a > b ? a : b; }

// The outputs [begin, end) along one axis whose windows contain input position i.
struct PoolRange {
  int64_t begin, end;
};
MG_HD PoolRange pool_outputs_covering(int64_t i, int64_t k, int64_t s, int64_t pad, int64_t out_size) {
  const int64_t begin = i + pad < k ? 0 : (i + pad - k) / s + 1;
  return {begin, pool_min((i + pad) / s + 1, out_size)};
}

// Max of window (y, x); *index = h * W + w of the first maximum in row-major order, or of the
// last NaN (a NaN wins and propagates; PyTorch's CPU rule).
template <class T>
MG_HD T max_pool_window(const T* in, const PoolGeometry& g, int64_t y, int64_t x, int64_t* index) {
  const int64_t h0 = y * g.sH - g.pH, w0 = x * g.sW - g.pW;
  const int64_t h_begin = pool_max(h0, 0), h_end = pool_min(h0 + g.kH, g.H);
  const int64_t w_begin = pool_max(w0, 0), w_end = pool_min(w0 + g.kW, g.W);
  int64_t best_index = h_begin * g.W + w_begin;
  T best = in[best_index];
  for (int64_t h = h_begin; h < h_end; ++h)
    for (int64_t w = w_begin; w < w_end; ++w) {
      const T v = in[h * g.W + w];
      if (v > best || v != v) {
        best = v;
        best_index = h * g.W + w;
      }
    }
  *index = best_index;
  return best;
}

// Gradient of input element (h, w): grad_out summed over the outputs that chose it.
template <class T>
MG_HD T max_pool_input_grad(const T* grad_out, const int64_t* indices, const PoolGeometry& g, int64_t h, int64_t w) {
  const PoolRange ys = pool_outputs_covering(h, g.kH, g.sH, g.pH, g.oH);
  const PoolRange xs = pool_outputs_covering(w, g.kW, g.sW, g.pW, g.oW);
  const int64_t self = h * g.W + w;
  T acc = T(0);
  for (int64_t y = ys.begin; y < ys.end; ++y)
    for (int64_t x = xs.begin; x < xs.end; ++x)
      if (indices[y * g.oW + x] == self) acc += grad_out[y * g.oW + x];
  return acc;
}

// Mean of window (y, x) with padding counted as zeros: the sum of the plane's elements in it,
// divided by kH * kW.
template <class T>
MG_HD T avg_pool_window(const T* in, const PoolGeometry& g, int64_t y, int64_t x) {
  const int64_t h0 = y * g.sH - g.pH, w0 = x * g.sW - g.pW;
  const int64_t h_begin = pool_max(h0, 0), h_end = pool_min(h0 + g.kH, g.H);
  const int64_t w_begin = pool_max(w0, 0), w_end = pool_min(w0 + g.kW, g.W);
  T acc = T(0);
  for (int64_t h = h_begin; h < h_end; ++h)
    for (int64_t w = w_begin; w < w_end; ++w) acc += in[h * g.W + w];
  return acc / T(g.kH * g.kW);
}

// Gradient of input element (h, w): grad_out / (kH * kW) summed over the windows containing it.
template <class T>
MG_HD T avg_pool_input_grad(const T* grad_out, const PoolGeometry& g, int64_t h, int64_t w) {
  const PoolRange ys = pool_outputs_covering(h, g.kH, g.sH, g.pH, g.oH);
  const PoolRange xs = pool_outputs_covering(w, g.kW, g.sW, g.pW, g.oW);
  const T divisor = T(g.kH * g.kW);
  T acc = T(0);
  for (int64_t y = ys.begin; y < ys.end; ++y)
    for (int64_t x = xs.begin; x < xs.end; ++x) acc += grad_out[y * g.oW + x] / divisor;
  return acc;
}

}  // namespace mg::kernels
