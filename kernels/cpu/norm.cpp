// kernels/cpu/norm.cpp — fused batch and layer norm on the CPU (formulas in kernels/norm.h).
//
// ---- batch norm ----
// x (N, C, S) contiguous: channel c is N planes of S contiguous values, C * S apart. Every pass
// splits the N * C planes over the threads in contiguous chunks (parallel.h), so each thread
// reads its memory in order; walking one channel at a time would jump C * S values after every
// plane and, measured on (128, 32, 28, 28), read at half the speed.
// Per-channel sums (the statistics; the backward's sum g and sum g * (x - mean)), in float64:
// each plane is summed on its own (a SIMD reduction over S), then each channel adds its N plane
// sums in n order. The order depends on the shape alone, never on the thread count (DDP
// compares bits across devices).
// Elementwise passes (forward, grad_x): the channel's functor (norm_functors.h) is built once
// per channel before the pass, and the loop over a plane's S values vectorises.
// Layouts are checked by the dispatch (kernels/norm.cpp). Outputs are assigned (=).
//
// ---- layer norm ----
// x (R, D) contiguous. Forward: rows split over the threads; each row is summed twice (sum x,
// then sum (x - mean)^2, SIMD reductions in float64) and mapped once. Backward: rows in blocks
// of kLayerNormRowBlock, the blocks split over the threads; a block computes each row's two sums
// and its grad_x, and adds g * xhat and g into its own (D) float64 partials of grad_weight and
// grad_bias; then the partials are added block after block. The blocks, and so the bits, depend
// on the shape alone.
#include <algorithm>
#include <vector>

#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/norm.h"
#include "multigrad/kernels/norm_functors.h"

namespace mg::kernels::cpu {
namespace {

// body(p, c, at) for every plane p = n * C + c of x (N, C, S), `at` its first element; the
// planes are split over the device's threads. A plane costs a few operations per value: a
// thread pays for itself from ~kGrain values (parallel.h).
template <class Body>
void for_each_plane(const Device& device, const ChannelShape& sh, const Body& body) {
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(sh.s, 1));
  parallel_for(device, sh.n * sh.c, grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) body(p, p % sh.c, p * sh.s);
  });
}

// Per-channel sums in an order fixed by the shape: plane_sum(c, at) -> Sum sums one plane
// (planes in parallel), then channel c adds its N plane sums in n order. Sum is double or
// BatchNormGradSums; the result is (C).
template <class Sum, class PlaneSum>
std::vector<Sum> channel_sums(const Device& device, const ChannelShape& sh, const PlaneSum& plane_sum) {
  std::vector<Sum> planes(size_t(sh.n * sh.c));  // (N, C)
  for_each_plane(device, sh, [&](int64_t p, int64_t c, int64_t at) { planes[size_t(p)] = plane_sum(c, at); });
  std::vector<Sum> channels(size_t(sh.c));  // (C), zero
  for (int64_t n = 0; n < sh.n; ++n)
    for (int64_t c = 0; c < sh.c; ++c) channels[size_t(c)] += planes[size_t(n * sh.c + c)];
  return channels;
}

// Float64 sums over one plane of `size` values: sum x; sum (x - mu)^2; sum g and, when x is
// given, sum g * (x - mu).
template <class T>
double plane_sum(const T* x, int64_t size) {
  double acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t s = 0; s < size; ++s) acc += double(x[s]);
  return acc;
}

template <class T>
double plane_sum_sq(const T* x, double mu, int64_t size) {
  double acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t s = 0; s < size; ++s) {
    const double d = double(x[s]) - mu;
    acc += d * d;
  }
  return acc;
}

template <class T>
BatchNormGradSums plane_grad_sums(const T* g, const T* x, double mu, int64_t size) {
  if (x == nullptr) return {plane_sum(g, size), 0};
  double sum_g = 0, sum_gc = 0;
#pragma omp simd reduction(+ : sum_g, sum_gc)
  for (int64_t s = 0; s < size; ++s) {
    sum_g += double(g[s]);
    sum_gc += double(g[s]) * (double(x[s]) - mu);
  }
  return {sum_g, sum_gc};
}

// out[s] = f(a[s]) (or f(a[s], b[s])) over one plane: the inner loop of the elementwise
// passes, kept out of the dtype dispatch because a pragma cannot sit in a macro argument. f by
// value: a local copy, whose fields the stores to `out` cannot alias.
template <class T, class F>
void map_plane(const F f, const T* a, T* out, int64_t size) {
#pragma omp simd
  for (int64_t s = 0; s < size; ++s) out[s] = f(a[s]);
}

template <class T, class F>
void map_plane(const F f, const T* a, const T* b, T* out, int64_t size) {
#pragma omp simd
  for (int64_t s = 0; s < size; ++s) out[s] = f(a[s], b[s]);
}

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// One row's statistics (norm_functors.h).
template <class T>
LayerNormRow<T> layer_norm_stats(const T* x, int64_t d, T eps) {
  const double sum = plane_sum(x, d);
  return layer_norm_row<T>(sum, plane_sum_sq(x, sum / double(d), d), d, eps);
}

// The layer-norm passes for element type T (kernels/norm.h; the pointers as there, null for an
// undefined tensor), outside the dtype dispatch: a pragma cannot sit in a macro argument.
template <class T>
void layer_norm_forward_rows(const Device& device, const T* x, const T* w, const T* b, T eps, T* y, T* mean, T* rstd,
                             int64_t rows, int64_t d) {
  parallel_for(device, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(d, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * d;
      T* yr = y + r * d;
      const LayerNormRow<T> row = layer_norm_stats(xr, d, eps);
      mean[r] = row.mean, rstd[r] = row.rstd;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) yr[j] = row(xr[j], w != nullptr ? w[j] : T(1), b != nullptr ? b[j] : T(0));
    }
  });
}

template <class T>
void layer_norm_backward_rows(const Device& device, const T* g, const T* x, const T* mean, const T* rstd, const T* w,
                              T* gx, T* gw, T* gb, int64_t rows, int64_t d) {
  const bool columns = gw != nullptr || gb != nullptr;
  const int64_t blocks = (rows + kLayerNormRowBlock - 1) / kLayerNormRowBlock;
  // (blocks, 2, D): each block's sums of g * xhat and of g over its rows
  std::vector<double> partial(columns ? size_t(blocks * 2 * d) : 0, 0.0);
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(kLayerNormRowBlock * d, 1));
  parallel_for(device, blocks, grain, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      double* gw_part = columns ? partial.data() + blk * 2 * d : nullptr;  // (D)
      double* gb_part = columns ? gw_part + d : nullptr;                    // (D)
      for (int64_t r = blk * kLayerNormRowBlock; r < std::min(rows, (blk + 1) * kLayerNormRowBlock); ++r) {
        const T* gr = g + r * d;
        const T* xr = x + r * d;
        const LayerNormRow<T> row{mean[r], rstd[r]};
        if (columns) {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) {
            gw_part[j] += double(gr[j]) * double(row.xhat(xr[j]));
            gb_part[j] += double(gr[j]);
          }
        }
        if (gx == nullptr) continue;
        double sum_h = 0, sum_hx = 0;
#pragma omp simd reduction(+ : sum_h, sum_hx)
        for (int64_t j = 0; j < d; ++j) {
          const double h = double(gr[j]) * double(w != nullptr ? w[j] : T(1));
          sum_h += h;
          sum_hx += h * double(row.xhat(xr[j]));
        }
        const LayerNormGradRow<T> f = layer_norm_grad_row(row, sum_h, sum_hx, d);
        T* gxr = gx + r * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) gxr[j] = f(gr[j], xr[j], w != nullptr ? w[j] : T(1));
      }
    }
  });
  if (!columns) return;
  for (int64_t j = 0; j < d; ++j) {
    double sum_gx = 0, sum_g = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      sum_gx += partial[size_t(blk * 2 * d + j)];
      sum_g += partial[size_t((blk * 2 + 1) * d + j)];
    }
    if (gw != nullptr) gw[j] = T(sum_gx);
    if (gb != nullptr) gb[j] = T(sum_g);
  }
}

}  // namespace

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var) {
  const ChannelShape sh = channel_shape(x);
  MG_DISPATCH_FLOATING(x.dtype(), "batch_norm_stats", [&] {
    using T = scalar_t;
    const T* xs = x.data<T>();  // (N, C, S)
    const double count = double(sh.count());
    std::vector<double> mu = channel_sums<double>(x.device(), sh, [&](int64_t, int64_t at) {
      return plane_sum(xs + at, sh.s);
    });  // (C)
    for (double& m : mu) m /= count;
    const std::vector<double> sq = channel_sums<double>(x.device(), sh, [&](int64_t c, int64_t at) {
      return plane_sum_sq(xs + at, mu[size_t(c)], sh.s);
    });  // (C)
    for (int64_t c = 0; c < sh.c; ++c) {
      mean.data<T>()[c] = T(mu[size_t(c)]);
      var.data<T>()[c] = T(sq[size_t(c)] / count);
    }
  });
}

void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                        const Tensor& bias, double eps, const Tensor& out) {
  const ChannelShape sh = channel_shape(x);
  MG_DISPATCH_FLOATING(x.dtype(), "batch_norm_forward", [&] {
    using T = scalar_t;
    const T* xs = x.data<T>();  // (N, C, S)
    T* y = out.data<T>();       // (N, C, S)
    std::vector<BatchNormAffine<T>> per_channel(size_t(sh.c));
    for (int64_t c = 0; c < sh.c; ++c)
      per_channel[size_t(c)] = batch_norm_affine(mean.data<T>(), var.data<T>(), data_or_null<T>(weight),
                                                 data_or_null<T>(bias), T(eps), c);
    for_each_plane(x.device(), sh, [&](int64_t, int64_t c, int64_t at) {
      map_plane(per_channel[size_t(c)], xs + at, y + at, sh.s);
    });
  });
}

void batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& var,
                         const Tensor& weight, double eps, bool batch_stats, const Tensor& grad_x,
                         const Tensor& grad_weight, const Tensor& grad_bias) {
  const ChannelShape sh = channel_shape(grad_out);
  MG_DISPATCH_FLOATING(grad_out.dtype(), "batch_norm_backward", [&] {
    using T = scalar_t;
    const T* g = grad_out.data<T>();       // (N, C, S)
    const T* xs = data_or_null<T>(x);      // (N, C, S), or null when not needed
    const T* mu = mean.data<T>();          // (C)
    const T* v = var.data<T>();            // (C)
    const T* w = data_or_null<T>(weight);  // (C) or null
    T* gx = data_or_null<T>(grad_x);       // (N, C, S) or null
    T* gw = data_or_null<T>(grad_weight);  // (C) or null
    T* gb = data_or_null<T>(grad_bias);    // (C) or null
    const bool need_sums = gw != nullptr || gb != nullptr || (batch_stats && gx != nullptr);
    const std::vector<BatchNormGradSums> sums =
        need_sums ? channel_sums<BatchNormGradSums>(grad_out.device(), sh,
                                                    [&](int64_t c, int64_t at) {
                                                      return plane_grad_sums(g + at, xs != nullptr ? xs + at : nullptr,
                                                                             double(mu[c]), sh.s);
                                                    })
                  : std::vector<BatchNormGradSums>(size_t(sh.c));  // (C)
    std::vector<BatchNormGradInput<T>> per_channel(size_t(sh.c));
    for (int64_t c = 0; c < sh.c; ++c) {
      const T invstd = batch_norm_invstd(v[c], T(eps));
      if (gw != nullptr) gw[c] = batch_norm_grad_weight(sums[size_t(c)], invstd);
      if (gb != nullptr) gb[c] = T(sums[size_t(c)].g);
      per_channel[size_t(c)] = batch_norm_grad_input(mu[c], invstd, w != nullptr ? w[c] : T(1), sums[size_t(c)],
                                                     sh.count());
    }
    if (gx == nullptr) return;
    for_each_plane(grad_out.device(), sh, [&](int64_t, int64_t c, int64_t at) {
      if (batch_stats) map_plane(per_channel[size_t(c)], g + at, xs + at, gx + at, sh.s);
      else map_plane(per_channel[size_t(c)], g + at, gx + at, sh.s);
    });
  });
}

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                        const Tensor& mean, const Tensor& rstd) {
  const int64_t rows = mean.numel(), d = rows > 0 ? x.numel() / rows : 0;
  MG_DISPATCH_FLOATING(x.dtype(), "layer_norm_forward", [&] {
    using T = scalar_t;
    layer_norm_forward_rows(x.device(), x.data<T>(), data_or_null<T>(weight), data_or_null<T>(bias), T(eps),
                            out.data<T>(), mean.data<T>(), rstd.data<T>(), rows, d);
  });
}

void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias) {
  const int64_t rows = mean.numel(), d = rows > 0 ? grad_out.numel() / rows : 0;
  MG_DISPATCH_FLOATING(grad_out.dtype(), "layer_norm_backward", [&] {
    using T = scalar_t;
    layer_norm_backward_rows(grad_out.device(), grad_out.data<T>(), x.data<T>(), mean.data<T>(), rstd.data<T>(),
                             data_or_null<T>(weight), data_or_null<T>(grad_x), data_or_null<T>(grad_weight),
                             data_or_null<T>(grad_bias), rows, d);
  });
}

}  // namespace mg::kernels::cpu
