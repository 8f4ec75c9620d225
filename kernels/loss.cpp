// kernels/loss.cpp — kernels/loss.h: checks the layouts and that the cross-entropy tensors share
// one device, then forwards to kernels/cpu/loss.cpp or kernels/cuda/loss.cu (on the device's
// current stream). The backends rely on these checks and do not repeat them.
#include "multigrad/kernels/loss.h"

#include "multigrad/kernels/device_dispatch.h"

namespace mg::kernels {
namespace {

void check_layout(const Tensor& logits, const Tensor& targets, const Tensor& lse, const char* name) {
  MG_CHECK(logits.dim() == 2 && logits.is_contiguous(), name, ": logits must be contiguous (N, C), got shape ",
           logits.shape(), " strides ", logits.strides());
  const int64_t n = logits.size(0);
  MG_CHECK(targets.dtype() == DType::Int64 && targets.is_contiguous() && targets.shape() == Shape{n}, name,
           ": targets must be contiguous Int64 [", n, "], got ", targets.shape(), " ", targets.dtype());
  MG_CHECK(lse.dtype() == logits.dtype() && lse.is_contiguous() && lse.shape() == Shape{n}, name,
           ": lse must be contiguous ", logits.dtype(), " [", n, "], got ", lse.shape(), " ", lse.dtype());
}

}  // namespace

void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse) {
  const Device device = one_device("cross_entropy", {&logits, &targets, &losses, &lse});
  check_layout(logits, targets, lse, "cross_entropy");
  MG_CHECK(losses.dtype() == logits.dtype() && losses.is_contiguous() && losses.shape() == lse.shape(),
           "cross_entropy: losses must be contiguous ", logits.dtype(), " ", lse.shape(), ", got ", losses.shape(),
           " ", losses.dtype());
  if (device.is_cpu()) return cpu::cross_entropy_fwd(logits, targets, losses, lse);
#if MG_WITH_CUDA
  cuda::cross_entropy_fwd(logits, targets, losses, lse, stream_for(device));
#else
  MG_ERROR("cross_entropy: multigrad was built without CUDA (tensor on ", device, ")");
#endif
}

void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_loss,
                       const Tensor& grad_logits) {
  const Device device = one_device("cross_entropy backward", {&logits, &targets, &lse, &grad_loss, &grad_logits});
  check_layout(logits, targets, lse, "cross_entropy backward");
  MG_CHECK(grad_logits.dtype() == logits.dtype() && grad_logits.is_contiguous() &&
               grad_logits.shape() == logits.shape(),
           "cross_entropy backward: grad_logits must be contiguous ", logits.dtype(), " ", logits.shape(), ", got ",
           grad_logits.shape(), " ", grad_logits.dtype());
  MG_CHECK(grad_loss.numel() == 1 && grad_loss.dtype() == logits.dtype(),
           "cross_entropy backward: expected a one-element ", logits.dtype(), " loss gradient, got ",
           grad_loss.shape(), " ", grad_loss.dtype());
  if (device.is_cpu()) return cpu::cross_entropy_bwd(logits, targets, lse, grad_loss, grad_logits);
#if MG_WITH_CUDA
  cuda::cross_entropy_bwd(logits, targets, lse, grad_loss, grad_logits,
                          stream_for(device));
#else
  MG_ERROR("cross_entropy backward: multigrad was built without CUDA (tensor on ", device, ")");
#endif
}

}  // namespace mg::kernels
