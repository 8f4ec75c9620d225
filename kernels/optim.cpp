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

void check(const SgdItem& item) {
  MG_CHECK(item.grad.defined(), "sgd_update: the gradient is undefined");
  MG_CHECK(item.momentum_buffer.defined() == (item.hyper.momentum != 0), "sgd_update: a momentum buffer is needed ",
           "exactly when momentum != 0 (momentum ", item.hyper.momentum, ")");
  check_update("sgd_update",
               {{"param", &item.param}, {"grad", &item.grad}, {"momentum_buffer", &item.momentum_buffer}});
}

void check(const AdamItem& item) {
  MG_CHECK(item.grad.defined() && item.exp_avg.defined() && item.exp_avg_sq.defined(),
           "adam_update: the gradient and both moments must be defined");
  MG_CHECK(item.hyper.step >= 1, "adam_update: steps count from 1, got ", item.hyper.step);
  check_update("adam_update", {{"param", &item.param}, {"grad", &item.grad}, {"exp_avg", &item.exp_avg},
                               {"exp_avg_sq", &item.exp_avg_sq}, {"max_exp_avg_sq", &item.max_exp_avg_sq}});
}

void run_on_cpu(const SgdItem& i) { cpu::sgd_update(i.param, i.grad, i.momentum_buffer, i.hyper); }
void run_on_cpu(const AdamItem& i) {
  cpu::adam_update(i.param, i.grad, i.exp_avg, i.exp_avg_sq, i.max_exp_avg_sq, i.hyper);
}
#if MG_WITH_CUDA
void run_on_cuda(const SgdItem* items, int count, cudaStream_t s) { cuda::sgd_update_many(items, count, s); }
void run_on_cuda(const AdamItem* items, int count, cudaStream_t s) { cuda::adam_update_many(items, count, s); }
#endif

// Checks every item first (a bad one changes nothing), then runs them: CPU items one by one,
// runs of CUDA items with one device and dtype in launches of up to kMultiTensorItems.
template <class Item>
void update_many(const std::vector<Item>& items, const char* op) {
  for (const Item& item : items) check(item);
  for (size_t first = 0; first < items.size();) {
    const Tensor& param = items[first].param;
    param.storage()->bump_version();  // changed in place: a backward that saved it would see other values
    if (param.device().is_cpu()) {
      run_on_cpu(items[first++]);
      continue;
    }
    size_t last = first + 1;
    while (last < items.size() && last - first < size_t(kMultiTensorItems) &&
           items[last].param.device() == param.device() && items[last].param.dtype() == param.dtype()) {
      items[last].param.storage()->bump_version();
      ++last;
    }
#if MG_WITH_CUDA
    run_on_cuda(items.data() + first, int(last - first), stream_for(param.device()));
#else
    MG_ERROR(op, ": multigrad was built without CUDA (tensor on ", param.device(), ")");
#endif
    first = last;
  }
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& hyper) {
  sgd_update_many({{param, grad, momentum_buffer, hyper}});
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamHyper& hyper) {
  adam_update_many({{param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper}});
}

void sgd_update_many(const std::vector<SgdItem>& items) { update_many(items, "sgd_update"); }

void adam_update_many(const std::vector<AdamItem>& items) { update_many(items, "adam_update"); }

}  // namespace mg::kernels
