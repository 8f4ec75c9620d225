// autograd/autocast.cpp — autocast's per-thread state and round_to (see autocast.h).
#include "multigrad/autograd/autocast.h"

#include "multigrad/autograd/derivatives.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/core/error.h"
#include "multigrad/kernels/kernels.h"

namespace mg {
namespace {

thread_local Precision current = Precision::Float32;

// The names of round_to's nodes, by which values_of() knows their outputs.
constexpr const char* kRoundToBFloat16 = "round_to_bfloat16";
constexpr const char* kRoundToFloat16 = "round_to_float16";

// The dtype that holds `values`' values in two bytes.
DType storage_dtype(Precision values) { return values == Precision::BFloat16 ? DType::BFloat16 : DType::Float16; }

Tensor rounded(const Tensor& x, Precision precision) {
  Tensor out = Tensor::empty(x.shape(), x.options());
  if (out.numel() > 0)
    kernels::unary(precision == Precision::BFloat16 ? kernels::UnaryOp::RoundBFloat16 : kernels::UnaryOp::RoundFloat16,
                   x, out);
  return out;
}

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Float32: return "fp32";
    case Precision::BFloat16: return "bf16";
    case Precision::Float16: return "fp16";
  }
  return "precision";
}

Precision autocast_precision() { return current; }

AutocastGuard::AutocastGuard(Precision precision) : previous_(current) { current = precision; }
AutocastGuard::~AutocastGuard() { current = previous_; }

Tensor round_to(const Tensor& x, Precision precision) {
  if (precision == Precision::Float32 || !x.defined()) return x;
  MG_CHECK(x.dtype() == DType::Float32, "round_to(", precision_name(precision), "): expected a Float32 tensor, got ",
           x.dtype());
  return detail::differentiable(
      precision == Precision::BFloat16 ? kRoundToBFloat16 : kRoundToFloat16, {&x},
      [&] { return rounded(x, precision); },
      [&] { return [precision](const Tensor& g, const Tensor&) { return TensorList{round_to(g, precision)}; }; },
      Saves::None, true);
}

namespace detail {

kernels::GemmInputs gemm_inputs(Precision values) {
  switch (values) {
    case Precision::BFloat16: return kernels::GemmInputs::BFloat16;
    case Precision::Float16: return kernels::GemmInputs::Float16;
    case Precision::Float32: break;
  }
  return kernels::GemmInputs::Float32;
}

SavedOperand::SavedOperand(const Tensor& t, Precision values) : tensor_(t) {
  if (values == Precision::Float32 || !t.defined() || t.dtype() != DType::Float32 || !t.is_contiguous()) return;
  packed_ = contiguous_as(t.detach(), storage_dtype(values));  // exact: t holds such values
  tensor_ = shell_of(t);
}

SavedOperand SavedOperand::rounded(const Tensor& t, Precision values) {
  return SavedOperand(values == Precision::Float32 ? t : round_to(t.detach(), values), values);
}

Tensor SavedOperand::values() const { return packed_.defined() ? contiguous_as(packed_, DType::Float32) : tensor_; }

Precision values_of(const Tensor& t) {
  const auto& meta = t.defined() ? t.unsafe_impl()->autograd : nullptr;
  if (!meta || !meta->grad_fn) return Precision::Float32;
  const std::string& node = meta->grad_fn->name;
  if (node == kRoundToBFloat16) return Precision::BFloat16;
  if (node == kRoundToFloat16) return Precision::Float16;
  return Precision::Float32;
}

}  // namespace detail
}  // namespace mg
