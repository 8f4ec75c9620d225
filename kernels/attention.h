// kernels/attention.h — fused scaled dot-product attention, forward and backward, in the style
// of FlashAttention (Dao et al. 2022; its backward as FlashAttention-2's): no (L, S) matrix of
// scores or probabilities is kept between the passes, only one log-sum-exp per query row, and the
// backward recomputes the probabilities from it.
//
// For one (batch, head), q (L, E), k (S, E), v (S, F), query i seeing the keys j in V(i) (all S,
// or j <= i when causal: the mask aligned top-left, as PyTorch's is_causal):
//   s_ij = scale * q_i . k_j                      j in V(i)
//   lse_i = log sum_{j in V(i)} exp(s_ij)         (-inf when V(i) is empty: S = 0)
//   p_ij = exp(s_ij - lse_i)
//   out_i = sum_j p_ij v_j                        (0 when V(i) is empty)
// Backward, g = dL/dout:
//   D_i = g_i . out_i                             (= sum_j p_ij (g_i . v_j))
//   dp_ij = g_i . v_j,   ds_ij = p_ij (dp_ij - D_i)
//   grad_q_i = scale * sum_j ds_ij k_j
//   grad_k_j = scale * sum_i ds_ij q_i,   grad_v_j = sum_i p_ij g_i
//
// Contract (checked by kernels/attention.cpp, which forwards to kernels/cpu/attention.cpp or
// kernels/cuda/attention.cu on the device's current stream):
//   q, out, grad_out, grad_q  (B, H, L, E or F)   any strides, the last dim's 1 and a row
//   k, v, grad_k, grad_v      (B, H, S, E or F)   stride >= cols (rows do not overlap)
//   lse                       (B, H, L)           contiguous
// All of one floating dtype (Float32 or Float64) on one device. Every output is assigned (=).
//
// Lower precision (autocast's bf16 and fp16 attention, autograd/autocast.h): `inputs` says that
// Float32 q, k, v and grad_out hold values of that precision (kernels.h's GemmInputs), and the
// kernels then compute as a bf16 or fp16 FlashAttention kernel does (PyTorch's CPU one, for
// instance): every product sums in float32, and the probabilities and dS are rounded to the
// precision before they are multiplied. In the forward that is e_ij = exp(s_ij - m_i), m_i a max
// of the scores seen so far (the row's, or the online softmax's running one), so
//   out_i = sum_j round(e_ij) v_j / l_i,     l_i = sum_j e_ij (unrounded)
// and in the backward round(p_ij) g_i for grad_v and round(ds_ij) for grad_q and grad_k, where ds
// itself comes from the unrounded p (and D from the out it is given: autocast passes the output
// rounded, as a bf16 kernel's output is). On a CPU with bf16 GEMMs (cpu/matmul_bf16.h) these products
// run in bf16; elsewhere they are float32 products of the rounded values (the same up to the
// order of the sums).
// Each output element is computed by one thread in a fixed order that depends only on the
// shapes, so results do not depend on the thread count (or the block schedule on CUDA), and one
// (batch, head) gives the same bits whatever B and H are around it.
#pragma once

#include "multigrad/core/tensor.h"
#include "multigrad/kernels/kernels.h"

#if MG_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mg::kernels {

// Whether the fused kernels take these head widths on `device`: always on the CPU; on CUDA
// E and F up to kAttentionMaxHeadDim (one thread holds a row of each in registers).
inline constexpr int64_t kAttentionMaxHeadDim = 128;
bool attention_fused_supports(const Device& device, int64_t qk_dim, int64_t v_dim);

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, const Tensor& out,
                   const Tensor& lse, GemmInputs inputs = GemmInputs::Float32);
void attention_bwd(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, bool causal, double scale, const Tensor& grad_q, const Tensor& grad_k,
                   const Tensor& grad_v, GemmInputs inputs = GemmInputs::Float32);

namespace cpu {
void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, const Tensor& out,
                   const Tensor& lse, GemmInputs inputs);
void attention_bwd(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, bool causal, double scale, const Tensor& grad_q, const Tensor& grad_k,
                   const Tensor& grad_v, GemmInputs inputs);
}  // namespace cpu

#if MG_WITH_CUDA
namespace cuda {
void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, const Tensor& out,
                   const Tensor& lse, GemmInputs inputs, cudaStream_t stream);
void attention_bwd(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, bool causal, double scale, const Tensor& grad_q, const Tensor& grad_k,
                   const Tensor& grad_v, GemmInputs inputs, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace mg::kernels
