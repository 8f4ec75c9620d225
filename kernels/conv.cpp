// kernels/conv.cpp — kernels/conv.h: each convolution and pooling kernel checks that its tensors
// share one device and forwards to that device's implementation: kernels/cpu (synchronous) or
// kernels/cuda (enqueued on the calling thread's current stream of the device). A build without
// CUDA has no CUDA devices, so the CUDA branch only throws there.
#include "multigrad/kernels/conv.h"
#include "multigrad/kernels/device_dispatch.h"


namespace mg::kernels {

void conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dParams& p) {
  const Device d = one_device("conv2d", {&input, &weight, &bias, &out});
  MG_RUN_ON_DEVICE(d, "conv2d", conv2d_forward, input, weight, bias, out, p);
}

void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_input,
                           const Conv2dParams& p) {
  const Device d = one_device("conv2d_backward_input", {&grad_out, &weight, &grad_input});
  MG_RUN_ON_DEVICE(d, "conv2d_backward_input", conv2d_backward_input, grad_out, weight, grad_input, p);
}

void conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& grad_weight,
                            const Conv2dParams& p) {
  const Device d = one_device("conv2d_backward_weight", {&grad_out, &input, &grad_weight});
  MG_RUN_ON_DEVICE(d, "conv2d_backward_weight", conv2d_backward_weight, grad_out, input, grad_weight, p);
}

void max_pool2d_forward(const Tensor& input, const Tensor& out, const Tensor& indices, const Pool2dParams& p) {
  const Device d = one_device("max_pool2d", {&input, &out, &indices});
  MG_RUN_ON_DEVICE(d, "max_pool2d", max_pool2d_forward, input, out, indices, p);
}

void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_input,
                         const Pool2dParams& p) {
  const Device d = one_device("max_pool2d_backward", {&grad_out, &indices, &grad_input});
  MG_RUN_ON_DEVICE(d, "max_pool2d_backward", max_pool2d_backward, grad_out, indices, grad_input, p);
}

void avg_pool2d_forward(const Tensor& input, const Tensor& out, const Pool2dParams& p) {
  const Device d = one_device("avg_pool2d", {&input, &out});
  MG_RUN_ON_DEVICE(d, "avg_pool2d", avg_pool2d_forward, input, out, p);
}

void avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_input, const Pool2dParams& p) {
  const Device d = one_device("avg_pool2d_backward", {&grad_out, &grad_input});
  MG_RUN_ON_DEVICE(d, "avg_pool2d_backward", avg_pool2d_backward, grad_out, grad_input, p);
}

}  // namespace mg::kernels
