// kernels/cuda/pool.cu — 2-d max and average pooling on CUDA, forward and backward, handwritten.
//
// What it computes: the functions of kernels/pool_functors.h, the same code the CPU runs, so
// the two backends agree bit for bit (plain adds and one correctly rounded division: nothing for
// nvcc to contract into an FMA).
//   forward:  out[p, y, x] = max / mean of window (y, x) of plane p; max also writes
//             indices[p, y, x] = h * W + w of the element it chose.
//   backward: grad_input[p, h, w] = sum of grad_out over the outputs whose windows contain
//             (h, w) — those that chose it (max), or all of them / (kH * kW) (avg).
// Work split: a grid-stride loop with one thread per output element (forward) or per input
// element (backward); neighbouring threads take neighbouring elements of a row, so their
// writes coalesce. Backward gathers instead of scattering with atomics: no two threads write one
// element, and each sum has a fixed order, so results are deterministic.
// Preconditions (asserted in the launchers): contiguous tensors (N, C, ...) of one floating
// dtype, indices Int64. Every output element is assigned (=).
#include <cuda_runtime.h>

#include <cstdint>

#include "multigrad/core/cuda_check.h"
#include "multigrad/core/stream.h"
#include "multigrad/kernels/conv.h"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/pool_functors.h"

namespace mg::kernels::cuda {
namespace {

// ============================== kernels ==============================

template <class T>
__global__ void max_pool2d_fwd_kernel(const T* __restrict__ x,      // (N*C, H, W)
                                      T* __restrict__ y,            // (N*C, oH, oW)
                                      int64_t* __restrict__ indices,  // (N*C, oH, oW)
                                      PoolGeometry g, int64_t total) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const int64_t plane = i / (g.oH * g.oW), r = i % (g.oH * g.oW);
    y[i] = max_pool_window(x + plane * g.H * g.W, g, r / g.oW, r % g.oW, &indices[i]);
  }
}

template <class T>
__global__ void max_pool2d_bwd_kernel(const T* __restrict__ grad_out,       // (N*C, oH, oW)
                                      const int64_t* __restrict__ indices,  // (N*C, oH, oW)
                                      T* __restrict__ grad_in,              // (N*C, H, W)
                                      PoolGeometry g, int64_t total) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const int64_t plane = i / (g.H * g.W), r = i % (g.H * g.W);
    const int64_t o = plane * g.oH * g.oW;
    grad_in[i] = max_pool_input_grad(grad_out + o, indices + o, g, r / g.W, r % g.W);
  }
}

template <class T>
__global__ void avg_pool2d_fwd_kernel(const T* __restrict__ x,  // (N*C, H, W)
                                      T* __restrict__ y,        // (N*C, oH, oW)
                                      PoolGeometry g, int64_t total) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const int64_t plane = i / (g.oH * g.oW), r = i % (g.oH * g.oW);
    y[i] = avg_pool_window(x + plane * g.H * g.W, g, r / g.oW, r % g.oW);
  }
}

template <class T>
__global__ void avg_pool2d_bwd_kernel(const T* __restrict__ grad_out,  // (N*C, oH, oW)
                                      T* __restrict__ grad_in,         // (N*C, H, W)
                                      PoolGeometry g, int64_t total) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const int64_t plane = i / (g.H * g.W), r = i % (g.H * g.W);
    grad_in[i] = avg_pool_input_grad(grad_out + plane * g.oH * g.oW, g, r / g.W, r % g.W);
  }
}

// ============================== helpers ==============================

void check_contiguous(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    MG_CHECK(t->is_contiguous(), op, " (CUDA): expected contiguous tensors, got shape ", t->shape(),
             " with strides ", t->strides());
}

// input (N, C, H, W) and output (N, C, oH, oW) of one pooling.
PoolGeometry geometry(const Tensor& input, const Tensor& output, const Pool2dParams& p) {
  return {input.size(2), input.size(3), output.size(2), output.size(3), p.kernel[0], p.kernel[1],
          p.stride[0],   p.stride[1],   p.padding[0],   p.padding[1]};
}

}  // namespace

// ============================== launchers ==============================

void max_pool2d_forward(const Tensor& input, const Tensor& out, const Tensor& indices, const Pool2dParams& p,
                        cudaStream_t stream) {
  check_contiguous("max_pool2d", {&input, &out, &indices});
  MG_CHECK(indices.dtype() == DType::Int64, "max_pool2d (CUDA): indices must be Int64, got ", indices.dtype());
  set_cuda_device(out.device());
  const int64_t total = out.numel();
  if (total == 0) return;
  const PoolGeometry g = geometry(input, out, p);
  MG_DISPATCH_FLOATING(input.dtype(), "max_pool2d", [&] {
    const LaunchCost cost =
        launch_cost(double(input.numel()) * sizeof(scalar_t) + double(total) * (sizeof(scalar_t) + 8),
                    double(total) * double(g.kH * g.kW));
    MG_LAUNCH(max_pool2d_fwd_kernel<scalar_t>, grid_for(total, kElementwiseBlock), kElementwiseBlock, stream, cost,
              input.data<scalar_t>(), out.data<scalar_t>(), indices.data<int64_t>(), g, total);
  });
  MG_CUDA_CHECK_LAUNCH(stream);
}

void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_input,
                         const Pool2dParams& p, cudaStream_t stream) {
  check_contiguous("max_pool2d_backward", {&grad_out, &indices, &grad_input});
  MG_CHECK(indices.dtype() == DType::Int64, "max_pool2d_backward (CUDA): indices must be Int64, got ",
           indices.dtype());
  set_cuda_device(grad_input.device());
  const int64_t total = grad_input.numel();
  if (total == 0) return;
  const PoolGeometry g = geometry(grad_input, grad_out, p);
  MG_DISPATCH_FLOATING(grad_out.dtype(), "max_pool2d_backward", [&] {
    const LaunchCost cost = launch_cost(
        double(total) * (sizeof(scalar_t) + 8) + double(grad_input.numel()) * sizeof(scalar_t), double(total));
    MG_LAUNCH(max_pool2d_bwd_kernel<scalar_t>, grid_for(total, kElementwiseBlock), kElementwiseBlock, stream, cost,
              grad_out.data<scalar_t>(), indices.data<int64_t>(), grad_input.data<scalar_t>(), g, total);
  });
  MG_CUDA_CHECK_LAUNCH(stream);
}

void avg_pool2d_forward(const Tensor& input, const Tensor& out, const Pool2dParams& p, cudaStream_t stream) {
  check_contiguous("avg_pool2d", {&input, &out});
  set_cuda_device(out.device());
  const int64_t total = out.numel();
  if (total == 0) return;
  const PoolGeometry g = geometry(input, out, p);
  MG_DISPATCH_FLOATING(input.dtype(), "avg_pool2d", [&] {
    const LaunchCost cost = launch_cost(double(input.numel() + total) * sizeof(scalar_t),
                                        double(total) * double(g.kH * g.kW + 1));
    MG_LAUNCH(avg_pool2d_fwd_kernel<scalar_t>, grid_for(total, kElementwiseBlock), kElementwiseBlock, stream, cost,
              input.data<scalar_t>(), out.data<scalar_t>(), g, total);
  });
  MG_CUDA_CHECK_LAUNCH(stream);
}

void avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_input, const Pool2dParams& p,
                         cudaStream_t stream) {
  check_contiguous("avg_pool2d_backward", {&grad_out, &grad_input});
  set_cuda_device(grad_input.device());
  const int64_t total = grad_input.numel();
  if (total == 0) return;
  const PoolGeometry g = geometry(grad_input, grad_out, p);
  MG_DISPATCH_FLOATING(grad_out.dtype(), "avg_pool2d_backward", [&] {
    const LaunchCost cost = launch_cost(double(grad_input.numel() + total) * sizeof(scalar_t),
                                        double(total) * double(g.kH * g.kW + 1));
    MG_LAUNCH(avg_pool2d_bwd_kernel<scalar_t>, grid_for(total, kElementwiseBlock), kElementwiseBlock, stream, cost,
              grad_out.data<scalar_t>(), grad_input.data<scalar_t>(), g, total);
  });
  MG_CUDA_CHECK_LAUNCH(stream);
}

}  // namespace mg::kernels::cuda
