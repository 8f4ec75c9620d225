// kernels/optim.h — fused optimizer updates: one pass over a parameter applies the whole
// update (weight decay, moments, bias correction, the step) instead of one kernel per term.
// The math is in kernels/optim_functors.h; optim/ builds the hyper-parameters per step.
//
// Contract (checked by kernels/optim.cpp before dispatching): param, grad and every defined
// state buffer are contiguous, of one shape, one floating dtype (Float32 or Float64) and on one
// device. param and the state buffers are updated in place; grad is only read.
#pragma once

#include <cstdint>
#include <vector>

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

// Multi-tensor updates: every item's update, with the bits of sgd_update / adam_update applied
// to each in turn (each element's update depends on its own item alone). On CUDA the items of one
// device and dtype share launches, up to kMultiTensorItems a launch, where one launch per
// parameter made a GPT-2 step's optimizer 148 launches; on the CPU they run one after another.
struct SgdItem {
  Tensor param, grad, momentum_buffer;
  SgdHyper hyper;
};
struct AdamItem {
  Tensor param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq;
  AdamHyper hyper;
};
inline constexpr int kMultiTensorItems = 24;  // what fits a launch's 4 KB of arguments, in Float64
void sgd_update_many(const std::vector<SgdItem>& items);
void adam_update_many(const std::vector<AdamItem>& items);

namespace cpu {
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& hyper);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamHyper& hyper);
}  // namespace cpu

#if MG_WITH_CUDA
namespace cuda {
// At most kMultiTensorItems items, all on one CUDA device, of one dtype: one launch.
void sgd_update_many(const SgdItem* items, int count, cudaStream_t stream);
void adam_update_many(const AdamItem* items, int count, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace mg::kernels
