// kernels/cuda/random.cu — uniform and normal draws from the counter-based Philox generator.
//
// What it computes, for every element i of a contiguous Float32/Float64 output, element j =
// window(i) of its draw (core/random.h's DrawWindow: j = i unless out is a slice of a larger draw):
//   uniform: out[i] = low + (high - low) * u_j,      u_j = philox_uniform<T>(state, j)  in [0, 1)
//   normal:  out[i] = mean + std * z_j,              z_j = philox_normal<T>(state, j)   (Box-Muller)
// philox_uniform / philox_normal (kernels/functors.h) fix which counter block and word element i
// reads, so the bits do not depend on the thread that draws them: the CPU loop and this kernel
// produce the same uniforms bit for bit, and the same normals up to the last-ulp differences of
// CUDA's logf/sinf/cosf against libm. The affine step uses non-contracting intrinsics so that it
// rounds like the CPU's separate multiply and add.
//
// Work split: one element per thread of a grid-stride loop; neighbouring threads write
// neighbouring elements (coalesced stores). Each thread evaluates the Philox block of its own
// element: Philox4x32-10 is twenty 32-bit multiplies, cheaper than sharing a block's four words
// across threads through shared memory at this size.
// Preconditions (asserted below): out contiguous, Float32 or Float64, on a CUDA device.
#include <cuda_runtime.h>

#include "multigrad/core/cuda_check.h"
#include "multigrad/core/stream.h"
#include "multigrad/kernels/cuda/cuda_kernels.h"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/functors.h"

namespace mg::kernels::cuda {
namespace {

// ============================== kernels ==============================

template <class T>
__global__ void uniform_kernel(int64_t n, PhiloxState state, DrawWindow window, T low, T range,
                               T* out) {  // out (n)
  for (int64_t i = global_thread_index(); i < n; i += grid_stride())
    out[i] = add_rn(low, mul_rn(range, philox_uniform<T>(state, window(i))));
}

template <class T>
__global__ void normal_kernel(int64_t n, PhiloxState state, DrawWindow window, T mean, T std,
                              T* out) {  // out (n)
  for (int64_t i = global_thread_index(); i < n; i += grid_stride())
    out[i] = add_rn(mean, mul_rn(std, philox_normal<T>(state, window(i))));
}

// ============================== launchers ==============================

void check_random_output(const Tensor& out, const char* op) {
  MG_CHECK(out.is_contiguous(), op, ": expected a contiguous output, got strides ", out.strides());
  MG_CHECK(out.device().is_cuda(), op, " (CUDA): output is on ", out.device());
}

}  // namespace

void uniform(const Tensor& out, PhiloxState state, double low, double high, DrawWindow window, cudaStream_t stream) {
  check_random_output(out, "uniform");
  set_cuda_device(out.device());
  int64_t n = out.numel();
  if (n == 0) return;
  MG_DISPATCH_FLOATING(out.dtype(), "uniform", [&] {
    using T = scalar_t;
    // Philox's rounds, shared by 4 values
    MG_LAUNCH(uniform_kernel<T>, grid_for(n, kElementwiseBlock), kElementwiseBlock, stream,
              per_element(n, 0, 1, sizeof(T), 10), n, state, window, T(low), T(high - low), out.data<T>());
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

void normal(const Tensor& out, PhiloxState state, double mean, double std, DrawWindow window, cudaStream_t stream) {
  check_random_output(out, "normal");
  set_cuda_device(out.device());
  int64_t n = out.numel();
  if (n == 0) return;
  MG_DISPATCH_FLOATING(out.dtype(), "normal", [&] {
    using T = scalar_t;
    // Philox, then Box-Muller's log, sqrt, sin and cos
    MG_LAUNCH(normal_kernel<T>, grid_for(n, kElementwiseBlock), kElementwiseBlock, stream,
              per_element(n, 0, 1, sizeof(T), 20), n, state, window, T(mean), T(std), out.data<T>());
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

}  // namespace mg::kernels::cuda
