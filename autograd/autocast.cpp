// autograd/autocast.cpp — autocast's per-thread state and round_to (see autocast.h).
#include "autograd/autocast.h"

#include "autograd/derivatives.h"
#include "core/error.h"
#include "kernels/kernels.h"

namespace mg {
namespace {

thread_local Precision current = Precision::Float32;

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
      precision == Precision::BFloat16 ? "round_to_bfloat16" : "round_to_float16", {&x},
      [&] { return rounded(x, precision); },
      [&] { return [precision](const Tensor& g, const Tensor&) { return TensorList{round_to(g, precision)}; }; },
      Saves::None);
}

}  // namespace mg
