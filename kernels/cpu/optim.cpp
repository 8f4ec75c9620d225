// kernels/cpu/optim.cpp — fused SGD and Adam/AdamW updates on the CPU.
//
// What it computes: for every element i of a parameter, the update of kernels/optim_functors.h
// (SgdUpdate / AdamUpdate), writing the parameter and its state buffers in place (=).
// Work split: [0, numel) cut into one contiguous chunk per thread (cpu/parallel.h); elements are
// independent, so the result does not depend on the thread count.
// Preconditions (kernels/optim.cpp): contiguous buffers of one shape and floating dtype.
#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/optim.h"
#include "multigrad/kernels/optim_functors.h"

namespace mg::kernels::cpu {
namespace {

// Per element an update reads and writes a few buffers and does ~15 flops: about the cost of
// four simple elementwise ops, so a quarter of their grain.
constexpr int64_t kUpdateGrain = kGrain / 4;

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& hyper) {
  MG_DISPATCH_FLOATING(param.dtype(), "sgd_update", [&] {
    using T = scalar_t;
    const SgdUpdate<T> update = make_sgd_update<T>(hyper);
    T* p = param.data<T>();                  // (numel)
    const T* g = grad.data<T>();             // (numel)
    T* buf = data_or_null<T>(momentum_buffer);  // (numel) or null
    parallel_for(param.device(), param.numel(), kUpdateGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) update(p, g, buf, i);
    });
  });
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamHyper& hyper) {
  MG_DISPATCH_FLOATING(param.dtype(), "adam_update", [&] {
    using T = scalar_t;
    const AdamUpdate<T> update = make_adam_update<T>(hyper);
    T* p = param.data<T>();                     // (numel)
    const T* g = grad.data<T>();                // (numel)
    T* m = exp_avg.data<T>();                   // (numel)
    T* v = exp_avg_sq.data<T>();                // (numel)
    T* v_max = data_or_null<T>(max_exp_avg_sq);  // (numel) or null
    parallel_for(param.device(), param.numel(), kUpdateGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) update(p, g, m, v, v_max, i);
    });
  });
}

}  // namespace mg::kernels::cpu
