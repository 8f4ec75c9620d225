// kernels/loss.h — fused softmax cross-entropy (log-softmax + negative log-likelihood) on rows.
//
// For logits x (N, C) and targets t (N), row n:
//   lse[n]    = log sum_c exp(x[n, c])                 (computed as m + log sum exp(x - m),
//                                                        m the row max: nothing overflows)
//   losses[n] = lse[n] - x[n, t[n]]
//   grad_logits[n, c] = (exp(x[n, c] - lse[n]) - [c == t[n]]) * g / N
// where g is the gradient of the mean loss. The forward saves lse so the backward needs one
// pass over the logits and no second max/sum.
//
// Contract (the functional API in autograd/loss_ops.cpp checks shapes and devices):
//   logits and grad_logits contiguous (N, C), Float32 or Float64; targets contiguous Int64 (N);
//   losses and lse contiguous (N) of the logits' dtype; grad_loss one element of that dtype on
//   the same device. Outputs are assigned (=). The per-element math is in loss_functors.h.
//   A target outside [0, C) is an mg::Error naming the first such target and C, on the CPU and
//   on CUDA (where it costs a device-to-host copy and a stream synchronisation; see
//   kernels/cuda/loss.cu). The backward does not re-check: its targets passed the forward.
#pragma once

#include "multigrad/core/tensor.h"

#if MG_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mg::kernels {

void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse);
void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_loss,
                       const Tensor& grad_logits);

namespace cpu {
void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse);
void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_loss,
                       const Tensor& grad_logits);
}  // namespace cpu

#if MG_WITH_CUDA
namespace cuda {
void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse,
                       cudaStream_t stream);
void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_loss,
                       const Tensor& grad_logits, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace mg::kernels
