// kernels/cuda/optim.cu — fused SGD and Adam/AdamW updates on CUDA.
//
// What it computes: for every element i of a parameter, the update of kernels/optim_functors.h
// (SgdUpdate / AdamUpdate, the functors the CPU loop applies), writing the parameter and its
// state buffers in place (=). One launch per parameter replaces the 5-10 elementwise kernels an
// unfused update would need, each a full pass over memory: the update is bandwidth-bound.
// Work split: a 1-d grid-stride loop, one element per thread per iteration.
// Preconditions (kernels/optim.cpp): contiguous buffers of one shape and floating dtype on
// one CUDA device.
#include <cuda_runtime.h>

#include <cstdint>

#include "multigrad/core/cuda_check.h"
#include "multigrad/core/stream.h"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/optim.h"
#include "multigrad/kernels/optim_functors.h"

namespace mg::kernels::cuda {
namespace {

// ============================== kernels ==============================

// p, g, buf: (n); buf null when momentum == 0.
template <class T>
__global__ void sgd_update_kernel(int64_t n, SgdUpdate<T> update, T* p, const T* g, T* buf) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) update(p, g, buf, i);
}

// p, g, m, v, v_max: (n); v_max null unless amsgrad.
template <class T>
__global__ void adam_update_kernel(int64_t n, AdamUpdate<T> update, T* p, const T* g, T* m, T* v, T* v_max) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) update(p, g, m, v, v_max, i);
}

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

// ============================== launchers ==============================

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& hyper,
                cudaStream_t stream) {
  MG_CHECK(param.device().is_cuda(), "sgd_update (CUDA): parameter on ", param.device());
  const int64_t n = param.numel();
  if (n == 0) return;
  set_cuda_device(param.device());
  MG_DISPATCH_FLOATING(param.dtype(), "sgd_update", [&] {
    using T = scalar_t;
    // reads param, grad (and the momentum buffer), writes param (and the buffer)
    const int buffers = momentum_buffer.defined() ? 1 : 0;
    MG_LAUNCH(sgd_update_kernel<T>, grid_for(n, kElementwiseBlock), kElementwiseBlock, stream,
              per_element(n, 2 + buffers, 1 + buffers, sizeof(T), 5), n,
              make_sgd_update<T>(hyper), param.data<T>(), grad.data<T>(), data_or_null<T>(momentum_buffer));
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamHyper& hyper, cudaStream_t stream) {
  MG_CHECK(param.device().is_cuda(), "adam_update (CUDA): parameter on ", param.device());
  const int64_t n = param.numel();
  if (n == 0) return;
  set_cuda_device(param.device());
  MG_DISPATCH_FLOATING(param.dtype(), "adam_update", [&] {
    using T = scalar_t;
    // reads param, grad, both moments (and the max); writes param and the moments (and the max)
    const int buffers = max_exp_avg_sq.defined() ? 3 : 2;
    MG_LAUNCH(adam_update_kernel<T>, grid_for(n, kElementwiseBlock), kElementwiseBlock, stream,
              per_element(n, 2 + buffers, 1 + buffers, sizeof(T), 15), n,
              make_adam_update<T>(hyper), param.data<T>(), grad.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(),
              data_or_null<T>(max_exp_avg_sq));
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

}  // namespace mg::kernels::cuda
