// kernels/conv.h — 2-d convolution and pooling kernels (NCHW), no autograd: the seam between
// autograd/conv_ops.cpp and the per-device implementations (kernels/cpu/conv.cpp, pool.cpp;
// kernels/cuda/conv.cu with cuDNN, pool.cu handwritten). kernels/conv.cpp dispatches on device.
//
// Contract (as kernels/kernels.h): the caller has checked shapes, dtypes and devices, and has
// allocated every output. All tensors are contiguous, on one device, of one floating dtype
// (Float32 or Float64) — except `indices`, which is Int64. Every output is assigned (=), never
// accumulated: a backward kernel writes the whole gradient, zeros included.
//
// Sizes: input (N, C, H, W); convolution weight (O, C / groups, kH, kW), output (N, O, oH, oW):
//   oH = (H + 2 pH - dH (kH - 1) - 1) / sH + 1      (floor division; likewise oW)
//   out[n, o, y, x] = bias[o] + sum_{c in o's group, i, j}
//                     w[o, c - g C/groups, i, j] * in[n, c, y sH - pH + i dH, x sW - pW + j dW]
// where a position outside the input reads 0. Pooling keeps (N, C) and takes
//   oH = (H + 2 pH - kH) / sH + 1 over windows of kH x kW at stride sH x sW (no dilation).
#pragma once

#include <array>
#include <cstdint>

#include "multigrad/core/tensor.h"

#if MG_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mg::kernels {

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

struct Pool2dParams {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{2, 2};  // explicit here; the functional API resolves PyTorch's default
  std::array<int64_t, 2> padding{0, 0};
};

// out (N, O, oH, oW) = conv(input, weight) + bias; bias (O) may be undefined (no bias).
void conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dParams& p);
// grad_input (N, C, H, W) = d(sum out * grad_out) / d input: the transposed convolution of
// grad_out (N, O, oH, oW) with weight. Input positions no window reaches get 0.
void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_input,
                           const Conv2dParams& p);
// grad_weight (O, C / groups, kH, kW) = sum over n, y, x of grad_out[n, o, y, x] times the input
// value that met w[o, c, i, j] there. (The bias gradient is grad_out summed over N, oH, oW.)
void conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& grad_weight,
                            const Conv2dParams& p);

// out (N, C, oH, oW) = max over each window, padding counting as -inf; indices (N, C, oH, oW)
// Int64 = h * W + w of the element chosen within its (n, c) plane: the first maximum in
// row-major window order, or the last NaN (NaN propagates, as in PyTorch).
void max_pool2d_forward(const Tensor& input, const Tensor& out, const Tensor& indices, const Pool2dParams& p);
// grad_input (N, C, H, W): each input element receives the sum of grad_out over the outputs that
// chose it (indices), in increasing output order; elements no output chose get 0.
void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_input,
                         const Pool2dParams& p);
// out = the mean of each window, padding counting as zeros in a divisor of kH * kW
// (count_include_pad; in floor mode no window reaches past the padding, so the divisor is
// always the full window).
void avg_pool2d_forward(const Tensor& input, const Tensor& out, const Pool2dParams& p);
// grad_input[n, c, h, w] = sum over the windows containing (h, w) of grad_out / (kH * kW).
void avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_input, const Pool2dParams& p);

namespace cpu {
void conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dParams& p);
void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_input,
                           const Conv2dParams& p);
void conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& grad_weight,
                            const Conv2dParams& p);
void max_pool2d_forward(const Tensor& input, const Tensor& out, const Tensor& indices, const Pool2dParams& p);
void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_input,
                         const Pool2dParams& p);
void avg_pool2d_forward(const Tensor& input, const Tensor& out, const Pool2dParams& p);
void avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_input, const Pool2dParams& p);
}  // namespace cpu

#if MG_WITH_CUDA
// The CUDA launchers: same contracts, enqueued on `stream` (conv through cuDNN, pooling
// handwritten).
namespace cuda {
// Whether this build has cuDNN (CMake's MG_CUDNN): without it the conv2d launchers throw, naming it.
bool has_cudnn();
void conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dParams& p, cudaStream_t stream);
void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_input,
                           const Conv2dParams& p, cudaStream_t stream);
void conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& grad_weight,
                            const Conv2dParams& p, cudaStream_t stream);
void max_pool2d_forward(const Tensor& input, const Tensor& out, const Tensor& indices, const Pool2dParams& p,
                        cudaStream_t stream);
void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_input,
                         const Pool2dParams& p, cudaStream_t stream);
void avg_pool2d_forward(const Tensor& input, const Tensor& out, const Pool2dParams& p, cudaStream_t stream);
void avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_input, const Pool2dParams& p,
                         cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace mg::kernels
