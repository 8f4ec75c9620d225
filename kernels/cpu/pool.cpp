// kernels/cpu/pool.cpp — 2-d max and average pooling on the CPU, forward and backward.
//
// The math is kernels/pool_functors.h (shared with CUDA): forward computes each output from its
// window; backward computes each input element's gradient by gathering over the outputs whose
// windows contain it (max pooling scatters instead, adding in the same order: see there). Every
// output is assigned (=).
// Work split: the N * C planes are independent; parallel_for gives each thread a contiguous
// range of planes (at least kGrain window reads per thread), within the device's budget.
// Preconditions (checked): contiguous tensors, floating dtype, indices Int64.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>

#include "multigrad/kernels/conv.h"
#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/pool_functors.h"

namespace mg::kernels::cpu {
namespace {

void check_contiguous(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    MG_CHECK(t->is_contiguous(), op, ": expected contiguous tensors, got shape ", t->shape(), " with strides ",
             t->strides());
}

// input (N, C, H, W) and output (N, C, oH, oW) of one pooling.
PoolGeometry geometry(const Tensor& input, const Tensor& output, const Pool2dParams& p) {
  return {input.size(2), input.size(3), output.size(2), output.size(3), p.kernel[0], p.kernel[1],
          p.stride[0],   p.stride[1],   p.padding[0],   p.padding[1]};
}

// Planes per thread so that a thread does at least kGrain units of `per_plane` work.
int64_t plane_grain(int64_t per_plane) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, per_plane)); }

// The backward gathers: an input element visits about (kH / sH) * (kW / sW) outputs; count it as
// one unit at least.
int64_t backward_plane_grain(const PoolGeometry& g) {
  return plane_grain(g.H * g.W * std::max<int64_t>(1, (g.kH / g.sH) * (g.kW / g.sW)));
}

// max_pool_window for outputs [x_begin, x_end) of row y, whose windows lie inside the plane
// horizontally, turned inside out: the window's elements in its row-major order on the outside,
// the outputs on the inside. Each output still sees its elements in max_pool_window's order with
// its rule (strictly greater, or NaN), so values and indices are the same. What differs is the
// select: GCC compiles max_pool_window's `if` (and even `?:` on floats) into branches, which
// random data mispredicts about once per window; here it is written with bit masks, so there is
// no branch to mispredict. Measured on the CNN's first pool, (128, 32, 28, 28) on 2 threads:
// 16.4 ms with the functor per output, 2-3.5 ms with this. The stride is a template constant
// where it is 1 or 2 (SW = 0 reads it from g), so the compiler can strength-reduce the loads.
template <int64_t SW, class T>
void max_pool_row(const T* in, const PoolGeometry& g, int64_t y, int64_t x_begin, int64_t x_end, T* out,
                  int64_t* index) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const int64_t sW = SW > 0 ? SW : g.sW;
  const int64_t h0 = y * g.sH - g.pH;
  const int64_t h_begin = std::max<int64_t>(h0, 0), h_end = std::min(h0 + g.kH, g.H);
  const int64_t W = g.W, pW = g.pW, kW = g.kW;  // locals: the stores below could alias g
  for (int64_t x = x_begin; x < x_end; ++x) {    // the window's first element
    index[x] = h_begin * W + x * sW - pW;
    out[x] = in[index[x]];
  }
  for (int64_t h = h_begin; h < h_end; ++h)
    for (int64_t j = 0; j < kW; ++j) {
      const int64_t first = h * W - pW + j;  // element (h, x sW - pW + j) is in[first + x sW]
      for (int64_t x = x_begin; x < x_end; ++x) {
        const T v = in[first + x * sW];
        const bool takes = (v > out[x]) | (v != v);  // greater, or NaN: max_pool_window's rule
        const Bits mask = Bits(0) - Bits(takes);     // all ones where v takes over, else zero
        const uint64_t index_mask = uint64_t(0) - uint64_t(takes);
        out[x] = std::bit_cast<T>((std::bit_cast<Bits>(v) & mask) | (std::bit_cast<Bits>(out[x]) & ~mask));
        index[x] = int64_t((uint64_t(first + x * sW) & index_mask) | (uint64_t(index[x]) & ~index_mask));
      }
    }
}

}  // namespace

void max_pool2d_forward(const Tensor& input, const Tensor& out, const Tensor& indices, const Pool2dParams& p) {
  check_contiguous("max_pool2d", {&input, &out, &indices});
  MG_CHECK(indices.dtype() == DType::Int64, "max_pool2d: indices must be Int64, got ", indices.dtype());
  const PoolGeometry g = geometry(input, out, p);
  const int64_t planes = input.size(0) * input.size(1);
  MG_DISPATCH_FLOATING(input.dtype(), "max_pool2d", [&] {
    using T = scalar_t;
    const T* x = input.data<T>();              // (N*C, H, W)
    T* y = out.data<T>();                      // (N*C, oH, oW)
    int64_t* idx = indices.data<int64_t>();    // (N*C, oH, oW)
    // Outputs [x_lo, x_hi) of a row have windows inside the plane horizontally (max_pool_row).
    const int64_t x_lo = std::min(g.oW, (g.pW + g.sW - 1) / g.sW);
    const int64_t x_hi = g.W + g.pW < g.kW ? x_lo : std::clamp((g.W + g.pW - g.kW) / g.sW + 1, x_lo, g.oW);
    parallel_for(input.device(), planes, plane_grain(g.oH * g.oW * g.kH * g.kW), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* in = x + plane * g.H * g.W;
        for (int64_t oy = 0; oy < g.oH; ++oy) {
          const int64_t o = plane * g.oH * g.oW + oy * g.oW;
          for (int64_t ox = 0; ox < x_lo; ++ox) y[o + ox] = max_pool_window(in, g, oy, ox, &idx[o + ox]);
          if (g.sW == 2) max_pool_row<2>(in, g, oy, x_lo, x_hi, y + o, idx + o);  // the usual 2x2 pool
          else if (g.sW == 1) max_pool_row<1>(in, g, oy, x_lo, x_hi, y + o, idx + o);
          else max_pool_row<0>(in, g, oy, x_lo, x_hi, y + o, idx + o);
          for (int64_t ox = x_hi; ox < g.oW; ++ox) y[o + ox] = max_pool_window(in, g, oy, ox, &idx[o + ox]);
        }
      }
    });
  });
}

void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_input,
                         const Pool2dParams& p) {
  check_contiguous("max_pool2d_backward", {&grad_out, &indices, &grad_input});
  MG_CHECK(indices.dtype() == DType::Int64, "max_pool2d_backward: indices must be Int64, got ", indices.dtype());
  const PoolGeometry g = geometry(grad_input, grad_out, p);
  const int64_t planes = grad_input.size(0) * grad_input.size(1);
  MG_DISPATCH_FLOATING(grad_out.dtype(), "max_pool2d_backward", [&] {
    using T = scalar_t;
    const T* gy = grad_out.data<T>();                // (N*C, oH, oW)
    const int64_t* idx = indices.data<int64_t>();    // (N*C, oH, oW)
    T* gx = grad_input.data<T>();                    // (N*C, H, W)
    // A scatter over each plane's outputs in order: every input element receives 0 and then
    // the gradients of the outputs that chose it in ascending output order, the very additions
    // max_pool_input_grad's gather makes (CUDA's kernel), without its per-element divisions.
    const int64_t plane_in = g.H * g.W, plane_out = g.oH * g.oW;
    parallel_for(grad_input.device(), planes, plane_grain(plane_in + plane_out), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        T* gx_plane = gx + plane * plane_in;
        std::fill(gx_plane, gx_plane + plane_in, T(0));
        for (int64_t o = plane * plane_out; o < (plane + 1) * plane_out; ++o) gx_plane[idx[o]] += gy[o];
      }
    });
  });
}

void avg_pool2d_forward(const Tensor& input, const Tensor& out, const Pool2dParams& p) {
  check_contiguous("avg_pool2d", {&input, &out});
  const PoolGeometry g = geometry(input, out, p);
  const int64_t planes = input.size(0) * input.size(1);
  MG_DISPATCH_FLOATING(input.dtype(), "avg_pool2d", [&] {
    using T = scalar_t;
    const T* x = input.data<T>();  // (N*C, H, W)
    T* y = out.data<T>();          // (N*C, oH, oW)
    parallel_for(input.device(), planes, plane_grain(g.oH * g.oW * g.kH * g.kW), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane)
        for (int64_t oy = 0; oy < g.oH; ++oy)
          for (int64_t ox = 0; ox < g.oW; ++ox)
            y[plane * g.oH * g.oW + oy * g.oW + ox] = avg_pool_window(x + plane * g.H * g.W, g, oy, ox);
    });
  });
}

void avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_input, const Pool2dParams& p) {
  check_contiguous("avg_pool2d_backward", {&grad_out, &grad_input});
  const PoolGeometry g = geometry(grad_input, grad_out, p);
  const int64_t planes = grad_input.size(0) * grad_input.size(1);
  MG_DISPATCH_FLOATING(grad_out.dtype(), "avg_pool2d_backward", [&] {
    using T = scalar_t;
    const T* gy = grad_out.data<T>();  // (N*C, oH, oW)
    T* gx = grad_input.data<T>();      // (N*C, H, W)
    parallel_for(grad_input.device(), planes, backward_plane_grain(g), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane)
        for (int64_t h = 0; h < g.H; ++h)
          for (int64_t w = 0; w < g.W; ++w)
            gx[plane * g.H * g.W + h * g.W + w] = avg_pool_input_grad(gy + plane * g.oH * g.oW, g, h, w);
    });
  });
}

}  // namespace mg::kernels::cpu
