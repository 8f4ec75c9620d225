// kernels/optim.h — fused optimizer updates: one pass over a parameter applies the whole
// update (weight decay, moments, bias correction, the step) instead of one kernel per term.
// The math is in kernels/optim_functors.h; optim/ builds the hyper-parameters per step.
//
// Contract (checked by kernels/optim.cpp before dispatching): param, grad and every defined
// state buffer are contiguous, of one shape, one floating dtype (Float32 or Float64) and on one
// device. param and the state buffers are updated in place; grad is only read.
#pragma once

#include <cstdint>

#include "multigrad/core/tensor.h"

#if MG_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mg::kernels {

struct SgdHyper {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer has no value yet: it becomes the gradient
};

struct AdamHyper {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;  // AdamW's decay p *= 1 - lr * weight_decay instead of g += wd * p
  int64_t step = 1;        // this update's step number, counted from 1 (bias correction)
};

// SGD (SgdUpdate): momentum_buffer undefined when momentum == 0.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& hyper);
// Adam / AdamW (AdamUpdate): max_exp_avg_sq undefined unless amsgrad.
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamHyper& hyper);

namespace cpu {
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& hyper);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamHyper& hyper);
}  // namespace cpu

#if MG_WITH_CUDA
namespace cuda {
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& hyper,
                cudaStream_t stream);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamHyper& hyper, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace mg::kernels
