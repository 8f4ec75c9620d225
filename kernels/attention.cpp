// kernels/attention.cpp — kernels/attention.h: checks the shapes, layouts, dtypes and that the
// tensors share one device, then forwards to kernels/cpu/attention.cpp or
// kernels/cuda/attention.cu (on the device's current stream). The backends rely on these checks.
#include "multigrad/kernels/attention.h"

#include "multigrad/kernels/device_dispatch.h"

namespace mg::kernels {
namespace {

// t is (B, H, rows, cols) of `dtype` with a unit stride along its last dim.
void check_operand(const Tensor& t, const char* what, int64_t batch, int64_t heads, int64_t rows, int64_t cols,
                   DType dtype, const char* op) {
  MG_CHECK(t.defined(), op, ": ", what, " is undefined");
  const Shape want{batch, heads, rows, cols};
  MG_CHECK(t.shape() == want && t.dtype() == dtype, op, ": ", what, " must be ", dtype, " ", want, ", got ",
           t.dtype(), " ", t.shape());
  MG_CHECK((cols <= 1 || t.strides()[3] == 1) && (rows <= 1 || t.strides()[2] >= cols), op, ": ", what,
           " must have a unit stride along its last dim and rows that do not overlap, got strides ", t.strides());
}

struct Sizes {
  int64_t batch, heads, queries, keys, qk_dim, v_dim;
};

Sizes check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse, GemmInputs inputs,
                   const char* op) {
  MG_CHECK(q.defined() && k.defined() && v.defined() && q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
           ": expected q, k and v of shape (B, H, rows, cols)");
  MG_CHECK(q.dtype() == DType::Float32 || q.dtype() == DType::Float64, op, ": expected Float32 or Float64, got ",
           q.dtype());
  MG_CHECK(inputs == GemmInputs::Float32 || q.dtype() == DType::Float32, op,
           ": bf16 or fp16 values come in Float32 tensors, got ", q.dtype());
  const Sizes s{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  check_operand(q, "q", s.batch, s.heads, s.queries, s.qk_dim, q.dtype(), op);
  check_operand(k, "k", s.batch, s.heads, s.keys, s.qk_dim, q.dtype(), op);
  check_operand(v, "v", s.batch, s.heads, s.keys, s.v_dim, q.dtype(), op);
  const Shape rows{s.batch, s.heads, s.queries};
  MG_CHECK(lse.defined() && lse.shape() == rows && lse.dtype() == q.dtype() && lse.is_contiguous(), op,
           ": lse must be contiguous ", q.dtype(), " ", rows);
  MG_CHECK(attention_fused_supports(q.device(), s.qk_dim, s.v_dim), op, ": head widths ", s.qk_dim, " and ", s.v_dim,
           " exceed the fused kernel's ", kAttentionMaxHeadDim, " on ", q.device());
  return s;
}

}  // namespace

bool attention_fused_supports(const Device& device, int64_t qk_dim, int64_t v_dim) {
  return device.is_cpu() || (qk_dim <= kAttentionMaxHeadDim && v_dim <= kAttentionMaxHeadDim);
}

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, const Tensor& out,
                   const Tensor& lse, GemmInputs inputs) {
  const char* op = "attention_fwd";
  const Device device = one_device(op, {&q, &k, &v, &out, &lse});
  const Sizes s = check_inputs(q, k, v, lse, inputs, op);
  check_operand(out, "out", s.batch, s.heads, s.queries, s.v_dim, q.dtype(), op);
  MG_RUN_ON_DEVICE(device, op, attention_fwd, q, k, v, causal, scale, out, lse, inputs);
}

void attention_bwd(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, bool causal, double scale, const Tensor& grad_q, const Tensor& grad_k,
                   const Tensor& grad_v, GemmInputs inputs) {
  const char* op = "attention_bwd";
  const Device device = one_device(op, {&grad_out, &q, &k, &v, &out, &lse, &grad_q, &grad_k, &grad_v});
  const Sizes s = check_inputs(q, k, v, lse, inputs, op);
  check_operand(out, "out", s.batch, s.heads, s.queries, s.v_dim, q.dtype(), op);
  check_operand(grad_out, "grad_out", s.batch, s.heads, s.queries, s.v_dim, q.dtype(), op);
  check_operand(grad_q, "grad_q", s.batch, s.heads, s.queries, s.qk_dim, q.dtype(), op);
  check_operand(grad_k, "grad_k", s.batch, s.heads, s.keys, s.qk_dim, q.dtype(), op);
  check_operand(grad_v, "grad_v", s.batch, s.heads, s.keys, s.v_dim, q.dtype(), op);
  MG_RUN_ON_DEVICE(device, op, attention_bwd, grad_out, q, k, v, out, lse, causal, scale, grad_q, grad_k, grad_v,
                   inputs);
}

}  // namespace mg::kernels
