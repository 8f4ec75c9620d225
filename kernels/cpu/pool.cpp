// kernels/cpu/pool.cpp — 2-d max and average pooling on the CPU, forward and backward.
//
// The math is kernels/pool_functors.h (shared with CUDA): forward computes each output from its
// window; backward computes each input element's gradient by gathering over the outputs whose
// windows contain it. Every output is assigned (=).
// Work split: the N * C planes are independent; parallel_for gives each thread a contiguous
// range of planes (at least kGrain window reads per thread), within the device's budget.
// Preconditions (checked): contiguous tensors, floating dtype, indices Int64.
#include <algorithm>

#include "kernels/conv.h"
#include "kernels/cpu/parallel.h"
#include "kernels/pool_functors.h"

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
    parallel_for(input.device(), planes, plane_grain(g.oH * g.oW * g.kH * g.kW), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* in = x + plane * g.H * g.W;
        for (int64_t oy = 0; oy < g.oH; ++oy)
          for (int64_t ox = 0; ox < g.oW; ++ox) {
            const int64_t o = plane * g.oH * g.oW + oy * g.oW + ox;
            y[o] = max_pool_window(in, g, oy, ox, &idx[o]);
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
    parallel_for(grad_input.device(), planes, backward_plane_grain(g), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const int64_t o = plane * g.oH * g.oW;
        for (int64_t h = 0; h < g.H; ++h)
          for (int64_t w = 0; w < g.W; ++w)
            gx[plane * g.H * g.W + h * g.W + w] = max_pool_input_grad(gy + o, idx + o, g, h, w);
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
