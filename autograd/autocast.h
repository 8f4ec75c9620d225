// autograd/autocast.h — mixed precision in the manner of torch.autocast, emulated in Float32.
//
// Inside an AutocastGuard(Precision::BFloat16) or (Precision::Float16), the ops of PyTorch's
// autocast lower-precision list that multigrad has — matmul, linear, conv2d and
// scaled_dot_product_attention — round their Float32 operands to that precision, compute with
// Float32 accumulation, and round their result to it: the arithmetic of a bf16 or fp16 GEMM that
// accumulates in float32 (what oneDNN and cuBLAS do). Every other op computes in Float32 as it
// always does: PyTorch's float32 list (norms, softmax, losses, reductions) by rule; the elementwise
// ops between (GELU, the residual adds), which in PyTorch keep a lower-precision input's dtype,
// give the same values here wherever an autocast op rounds their output next.
//
// The rounded values flow between ops in Float32 tensors, but what a backward keeps of them is
// stored in BFloat16 or Float16 (SavedOperand below): the operands of matmul, linear and attention,
// the attention's output (rounded, as a bf16 kernel's output is: its backward reads it), and a
// rounded input that another op saves (GELU's, between two linears). So the activations saved for
// backward take two bytes a value where PyTorch's would. bf16 matmuls and linears multiply in bf16 with float32
// accumulation (kernels::GemmInputs::BFloat16: oneDNN where the CPU has AVX-512 BF16, cuBLAS on
// CUDA), fp16 ones in fp16 on CUDA (cuBLAS, GemmInputs::Float16). The fused attention computes
// as a bf16 or fp16 attention kernel does, rounding its probabilities and dS before it multiplies
// them (kernels/attention.h), in bf16 on such a CPU. Everything else is emulated: Float32
// arithmetic on the rounded values, the numerics of mixed precision at Float32's speed.
// Parameters stay Float32 (the "master weights"), and so do their gradients and the optimizer.
//
// Backward: round_to's gradient is the incoming gradient rounded to the same precision (in
// PyTorch the gradient of a bf16 tensor is a bf16 tensor), so an autocast op's backward multiplies
// rounded gradients by rounded operands, and a parameter's gradient is the Float32 sum of those.
// fp16's range is small (largest 65504, smallest subnormal 2^-24): gradients underflow to zero
// unless the loss is scaled first (optim/grad_scaler.h).
//
// The state is per thread, as PyTorch's: DataParallel's replicas, a pipeline's stage threads and
// checkpoint()'s recomputation inherit the precision of the thread that started them.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "multigrad/core/tensor.h"

namespace mg {
namespace kernels {
enum class GemmInputs : uint8_t;  // kernels/kernels.h
}

enum class Precision : uint8_t { Float32, BFloat16, Float16 };
const char* precision_name(Precision p);  // "fp32", "bf16", "fp16"

// The precision this thread's autocast ops compute in (Float32: autocast off).
Precision autocast_precision();

// Autocast to `precision` in this scope (Precision::Float32 turns it off).
class AutocastGuard {
 public:
  explicit AutocastGuard(Precision precision);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  Precision previous_;
};

// x's values rounded to the nearest value of `precision` (ties to even; fp16 overflows to
// infinity beyond 65504), still Float32; differentiable (the gradient is rounded likewise).
// x itself when precision is Float32 or x is undefined; x must be Float32 otherwise.
Tensor round_to(const Tensor& x, Precision precision);

namespace detail {

// For an autocast op: when this thread autocasts and every defined operand is Float32, the
// result of op(precision, operands rounded to it) with autocast off, rounded; nullopt otherwise
// (the op runs as is). The precision tells the op that its operands, and the gradients its
// backward receives, hold its values: for kernels that compute in it (matmul and linear: bf16
// GEMMs), and for what its backward keeps (SavedOperand).
template <class Op, class... Ts>
std::optional<Tensor> autocast_lower(Op&& op, const Ts&... operands) {
  const Precision precision = autocast_precision();
  if (precision == Precision::Float32) return std::nullopt;
  if (!((!operands.defined() || operands.dtype() == DType::Float32) && ...)) return std::nullopt;
  AutocastGuard off(Precision::Float32);
  return round_to(std::forward<Op>(op)(precision, round_to(operands, precision)...), precision);
}

// What kernels take for operands that hold `values`' values (matmul's and attention's GEMMs).
kernels::GemmInputs gemm_inputs(Precision values);

// What a backward keeps of an operand it reads. Under bf16 autocast an op's operands hold
// bfloat16 values (round_to's), so SavedOperand(t, Precision::BFloat16) keeps a contiguous
// Float32 t as a BFloat16 tensor: half the memory, as PyTorch's autocast keeps a bf16 op's inputs
// in bf16, and the same values exactly when the backward reads them back as Float32. Likewise
// fp16 values as a Float16 tensor. Otherwise (Float32, or t not contiguous) it keeps t itself.
class SavedOperand {
 public:
  SavedOperand(const Tensor& t, Precision values);
  // t's values rounded to `values` (a Float32 t), kept as above: what an op keeps of its own
  // output where it is rounded next (the attention's, read back as a bf16 kernel's output is).
  static SavedOperand rounded(const Tensor& t, Precision values);
  // t, or when its values are packed a shell of it (shape, dtype and autograd state: enough for
  // requires_grad() and grad_destination()).
  const Tensor& tensor() const { return tensor_; }
  // t's values: t itself, or a new Float32 tensor unpacked from the two-byte copy.
  Tensor values() const;

 private:
  Tensor tensor_;
  Tensor packed_;  // t's values as BFloat16 or Float16 (t's shape, contiguous), or undefined
};

// The precision whose values t holds, as far as the graph tells: BFloat16 (Float16) when t is the
// output of round_to(., Precision::BFloat16) (Float16), as every autocast op's result is, else
// Float32. An op outside autocast's list that saves such a tensor (GELU between two linears)
// keeps it in two bytes.
Precision values_of(const Tensor& t);

}  // namespace detail
}  // namespace mg
