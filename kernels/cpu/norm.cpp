// kernels/cpu/norm.cpp — fused batch norm on the CPU (formulas in kernels/norm.h).
//
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
#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/norm.h"
#include "kernels/norm_functors.h"

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

}  // namespace mg::kernels::cpu
