// kernels/optim.cpp — kernels/optim.h: checks the contract of a fused optimizer update (one
// device, one shape, one floating dtype, contiguous buffers) and forwards to kernels/cpu/optim.cpp
// on a CPU device or kernels/cuda/optim.cu on a CUDA device (the device's current stream).
#include <initializer_list>
#include <utility>

#include "multigrad/kernels/optim.h"

#include "multigrad/kernels/device_dispatch.h"

namespace mg::kernels {
namespace {

// Every defined buffer of `named` matches the parameter (named[0]).
void check_update(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> named) {
  const Tensor& param = *named.begin()->second;
  MG_CHECK(param.dtype() == DType::Float32 || param.dtype() == DType::Float64, op,
           ": parameters must be Float32 or Float64, got ", param.dtype());
  for (const auto& [name, t] : named) {
    if (!t->defined()) continue;
    MG_CHECK(t->device() == param.device(), op, ": ", name, " is on ", t->device(), ", the parameter on ",
             param.device());
    MG_CHECK(t->shape() == param.shape(), op, ": ", name, " has shape ", t->shape(), ", the parameter ",
             param.shape());
    MG_CHECK(t->dtype() == param.dtype(), op, ": ", name, " has dtype ", t->dtype(), ", the parameter ",
             param.dtype());
    MG_CHECK(t->is_contiguous(), op, ": ", name, " must be contiguous, got strides ", t->strides());
  }
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& hyper) {
  MG_CHECK(grad.defined(), "sgd_update: the gradient is undefined");
  MG_CHECK(momentum_buffer.defined() == (hyper.momentum != 0), "sgd_update: a momentum buffer is needed exactly "
           "when momentum != 0 (momentum ", hyper.momentum, ")");
  check_update("sgd_update", {{"param", &param}, {"grad", &grad}, {"momentum_buffer", &momentum_buffer}});
  param.storage()->bump_version();  // changed in place: a backward that saved it would see other values
  if (param.device().is_cpu()) return cpu::sgd_update(param, grad, momentum_buffer, hyper);
#if MG_WITH_CUDA
  cuda::sgd_update(param, grad, momentum_buffer, hyper, stream_for(param.device()));
#else
  MG_ERROR("sgd_update: multigrad was built without CUDA (tensor on ", param.device(), ")");
#endif
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamHyper& hyper) {
  MG_CHECK(grad.defined() && exp_avg.defined() && exp_avg_sq.defined(),
           "adam_update: the gradient and both moments must be defined");
  MG_CHECK(hyper.step >= 1, "adam_update: steps count from 1, got ", hyper.step);
  check_update("adam_update", {{"param", &param}, {"grad", &grad}, {"exp_avg", &exp_avg},
                               {"exp_avg_sq", &exp_avg_sq}, {"max_exp_avg_sq", &max_exp_avg_sq}});
  param.storage()->bump_version();
  if (param.device().is_cpu()) return cpu::adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper);
#if MG_WITH_CUDA
  cuda::adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper,
                    stream_for(param.device()));
#else
  MG_ERROR("adam_update: multigrad was built without CUDA (tensor on ", param.device(), ")");
#endif
}

}  // namespace mg::kernels
