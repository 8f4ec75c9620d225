// kernels/cuda/optim.cu — fused SGD and Adam/AdamW updates on CUDA.
//
// What it computes: for every element i of a parameter, the update of kernels/optim_functors.h
// (SgdUpdate / AdamUpdate, the functors the CPU loop applies), writing the parameter and its
// state buffers in place (=). One pass replaces the 5-10 elementwise kernels an unfused update
// would need, each a full pass over memory: the update is bandwidth-bound. And one launch updates
// up to kMultiTensorItems parameters (kernels/optim.h): their pointers and per-step constants
// travel as the kernel's arguments, and their elements are one index space.
// Work split: a 1-d grid-stride loop over that space, one element per thread per iteration; a
// thread finds its parameter by walking the items' ends (at most 24 comparisons).
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

// Up to kMultiTensorItems parameters' updates in one launch, passed by value (the kernel's
// arguments): item t holds the elements [end[t - 1], end[t]) of the launch's index space.
template <class T, class Update>
struct Batch {
  int count = 0;
  int64_t end[kMultiTensorItems] = {};
  T* param[kMultiTensorItems] = {};
  const T* grad[kMultiTensorItems] = {};
  T* state[3][kMultiTensorItems] = {};  // SGD: the momentum buffer; Adam: m, v, v_max (null when unused)
  Update update[kMultiTensorItems] = {};
};

// The item that holds element i of the launch, and i's index inside it.
template <class B>
__device__ __forceinline__ int item_of(const B& batch, int64_t i, int64_t& local) {
  int t = 0;
  while (i >= batch.end[t]) ++t;
  local = i - (t == 0 ? 0 : batch.end[t - 1]);
  return t;
}

template <class T>
__global__ void sgd_update_kernel(Batch<T, SgdUpdate<T>> batch) {
  for (int64_t i = global_thread_index(); i < batch.end[batch.count - 1]; i += grid_stride()) {
    int64_t local = 0;
    const int t = item_of(batch, i, local);
    batch.update[t](batch.param[t], batch.grad[t], batch.state[0][t], local);
  }
}

template <class T>
__global__ void adam_update_kernel(Batch<T, AdamUpdate<T>> batch) {
  for (int64_t i = global_thread_index(); i < batch.end[batch.count - 1]; i += grid_stride()) {
    int64_t local = 0;
    const int t = item_of(batch, i, local);
    batch.update[t](batch.param[t], batch.grad[t], batch.state[0][t], batch.state[1][t], batch.state[2][t], local);
  }
}

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// The batch of `items` (the empty ones left out), and the bytes it moves: each element of the
// parameter, the gradient and every state buffer read, and the parameter and the buffers written.
template <class T, class Update, class Item, class Fill>
Batch<T, Update> batch_of(const Item* items, int count, double& bytes, Fill fill) {
  MG_CHECK(count >= 1 && count <= kMultiTensorItems, "optimizer update (CUDA): ", count, " items for one launch (1 to ",
           kMultiTensorItems, ")");
  Batch<T, Update> batch;
  int64_t total = 0;
  for (int k = 0; k < count; ++k) {
    const Item& item = items[k];
    MG_CHECK(item.param.device() == items[0].param.device() && item.param.dtype() == items[0].param.dtype(),
             "optimizer update (CUDA): one launch's parameters are on ", items[0].param.device(), " and ",
             item.param.device());
    const int64_t n = item.param.numel();
    if (n == 0) continue;
    const int t = batch.count++;
    total += n;
    batch.end[t] = total;
    batch.param[t] = item.param.template data<T>();
    batch.grad[t] = item.grad.template data<T>();
    const int buffers = fill(item, batch.state, batch.update[t], t);
    bytes += double(n) * (2 * buffers + 3) * sizeof(T);
  }
  return batch;
}

}  // namespace

// ============================== launchers ==============================

void sgd_update_many(const SgdItem* items, int count, cudaStream_t stream) {
  set_cuda_device(items[0].param.device());
  MG_DISPATCH_FLOATING(items[0].param.dtype(), "sgd_update", [&] {
    using T = scalar_t;
    double bytes = 0;
    const auto batch = batch_of<T, SgdUpdate<T>>(items, count, bytes, [](const SgdItem& item, auto& state, auto& update,
                                                                         int t) {
      state[0][t] = data_or_null<T>(item.momentum_buffer);
      update = make_sgd_update<T>(item.hyper);
      return item.momentum_buffer.defined() ? 1 : 0;
    });
    if (batch.count == 0) return;
    const int64_t total = batch.end[batch.count - 1];
    MG_LAUNCH(sgd_update_kernel<T>, grid_for(total, kElementwiseBlock), kElementwiseBlock, stream,
              launch_cost(bytes, 5.0 * double(total)), batch);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

void adam_update_many(const AdamItem* items, int count, cudaStream_t stream) {
  set_cuda_device(items[0].param.device());
  MG_DISPATCH_FLOATING(items[0].param.dtype(), "adam_update", [&] {
    using T = scalar_t;
    double bytes = 0;
    const auto batch = batch_of<T, AdamUpdate<T>>(items, count, bytes, [](const AdamItem& item, auto& state,
                                                                          auto& update, int t) {
      state[0][t] = item.exp_avg.data<T>();
      state[1][t] = item.exp_avg_sq.data<T>();
      state[2][t] = data_or_null<T>(item.max_exp_avg_sq);
      update = make_adam_update<T>(item.hyper);
      return item.max_exp_avg_sq.defined() ? 3 : 2;
    });
    if (batch.count == 0) return;
    const int64_t total = batch.end[batch.count - 1];
    MG_LAUNCH(adam_update_kernel<T>, grid_for(total, kElementwiseBlock), kElementwiseBlock, stream,
              launch_cost(bytes, 15.0 * double(total)), batch);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

}  // namespace mg::kernels::cuda
