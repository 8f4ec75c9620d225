// autograd/elementwise_ops.cpp — elementwise ops: arithmetic, math functions, comparisons,
// clamp, where and the operators, with PyTorch's broadcasting and type promotion.
//
// The dtype an op computes in is decided here and only here:
//   tensor-tensor   promote_types(a, b) (Bool < Int64 < Float32 < Float64);
//   tensor-scalar   the tensor's dtype, except that an integral tensor (Int64, Bool) with a
//                   fractional or non-finite scalar computes in Float32;
//   div, and exp/log/sqrt/gelu/sigmoid/tanh: integral inputs compute in Float32;
//   Bool            arithmetic on Bool computes in Int64 (PyTorch keeps Bool for add and mul;
//                   here true + true is 2);
//   comparisons     compute in the dtype above and return Bool.
// Operands are cast to the compute dtype before they are broadcast, so a cast copies the
// small operand, never its expansion.
//
// Derivatives sit beside each forward (the pattern is in autograd/derivatives.h): an operand's
// gradient is computed only when it requires grad, at the broadcast shape, then summed back to
// the operand's shape (sum_to) and cast to its dtype by the tape.
#include <cmath>

#include "multigrad/autograd/autocast.h"
#include "multigrad/autograd/derivatives.h"
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/kernels/kernels.h"

namespace mg {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

DType arithmetic(DType t) { return t == DType::Bool ? DType::Int64 : t; }
DType floating(DType t) { return is_floating(t) ? t : DType::Float32; }
bool is_integral_value(double s) { return std::isfinite(s) && std::trunc(s) == s; }

DType scalar_compute_dtype(DType t, double s) {
  if (is_floating(t)) return t;
  return is_integral_value(s) ? DType::Int64 : DType::Float32;
}

Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = kernels::op_name(op);
  detail::check_defined(a, name);
  detail::check_defined(b, name);
  detail::check_same_device(a, b, name);
  const DType promoted = promote_types(a.dtype(), b.dtype(), name);
  const DType compute = op == BinaryOp::Div ? floating(promoted) : arithmetic(promoted);
  check_arithmetic_dtype(compute, name);
  const Shape shape = a.shape() == b.shape() ? a.shape() : broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, {kernels::is_comparison(op) ? DType::Bool : compute, a.device()});
  if (out.numel() > 0)
    kernels::binary(op, detail::broadcast_to(to(a, compute), shape),
                    detail::broadcast_to(to(b, compute), shape), out);
  return out;
}

Tensor scalar_op(BinaryOp op, const Tensor& a, double s, bool scalar_first = false) {
  const char* name = kernels::op_name(op);
  detail::check_defined(a, name);
  const DType scalar_dtype = scalar_compute_dtype(a.dtype(), s);
  const DType compute = op == BinaryOp::Div ? floating(scalar_dtype) : scalar_dtype;
  check_arithmetic_dtype(compute, name);
  Tensor out = Tensor::empty(a.shape(), {kernels::is_comparison(op) ? DType::Bool : compute, a.device()});
  if (out.numel() > 0) kernels::binary_scalar(op, to(a, compute), s, scalar_first, out);
  return out;
}

// float_math: the op is only defined on floating types (exp, log, ...).
Tensor unary_op(UnaryOp op, const Tensor& x, bool float_math) {
  const char* name = kernels::op_name(op);
  detail::check_defined(x, name);
  const DType compute = float_math ? floating(x.dtype()) : arithmetic(x.dtype());
  check_arithmetic_dtype(compute, name);
  Tensor out = Tensor::empty(x.shape(), {compute, x.device()});
  if (out.numel() > 0) kernels::unary(op, to(x, compute), out);
  return out;
}

// A 0-d zero of g's dtype and device, the "else" branch of a masked gradient.
Tensor zero_of(const Tensor& g) { return zeros({}, {.dtype = g.dtype(), .device = g.device()}); }

// g where the mask holds, else 0.
Tensor masked(const Tensor& mask, const Tensor& g) { return where(mask, g, zero_of(g)); }

// sign(x) in x's dtype: -1, 0 or 1 (0 at 0, as PyTorch's abs backward).
Tensor sign(const Tensor& x) { return sub(to(gt(x, 0.0), x.dtype()), to(lt(x, 0.0), x.dtype())); }

// A binary op of two tensors whose backward is backward(g, a, b, out) -> {ga, gb} at the
// broadcast shape; the gradients are summed back to each operand's shape.
// `saves`: what the backward reads (detail::differentiable).
// `twice`: backward is differentiable in a, b and g (detail::differentiable).
template <class Backward>
Tensor binary_differentiable(BinaryOp op, const Tensor& a, const Tensor& b, Backward backward,
                             Saves saves = Saves::InputsAndOutputs, bool twice = false) {
  return detail::differentiable(
      kernels::op_name(op), {&a, &b}, [&] { return binary_op(op, a, b); },
      [&] {
        return [a = detail::kept_input(a, saves), b = detail::kept_input(b, saves), backward](
                   const Tensor& g, const Tensor& out) -> TensorList {
          TensorList grads = backward(g, a, b, out);
          return {a.requires_grad() ? detail::sum_to(grads[0], a.shape()) : Tensor(),
                  b.requires_grad() ? detail::sum_to(grads[1], b.shape()) : Tensor()};
        };
      },
      saves, twice);
}

// A unary op whose backward is backward(g, x, out) -> gx. An input that holds autocast's bf16
// (fp16) values is kept in bf16 (fp16): detail::SavedOperand.
// `twice` holds unless the saved input is autocast's rounded copy (not x itself).
template <class Forward, class Backward>
Tensor unary_differentiable(const char* name, const Tensor& x, Forward forward, Backward backward,
                            Saves saves = Saves::InputsAndOutputs, bool twice = false) {
  const bool exact_input = !reads_inputs(saves) || detail::values_of(x) == Precision::Float32;
  return detail::differentiable(
      name, {&x}, forward,
      [&] {
        const Precision values = reads_inputs(saves) ? detail::values_of(x) : Precision::Float32;
        return [x = detail::SavedOperand(detail::kept_input(x, saves), values), backward](
                   const Tensor& g, const Tensor& out) -> TensorList { return {backward(g, x.values(), out)}; };
      },
      saves, twice && exact_input);
}

Tensor unary_differentiable(UnaryOp op, const Tensor& x, bool float_math,
                            Tensor (*backward)(const Tensor& g, const Tensor& x, const Tensor& out),
                            Saves saves = Saves::InputsAndOutputs, bool twice = false) {
  return unary_differentiable(kernels::op_name(op), x, [&] { return unary_op(op, x, float_math); }, backward, saves,
                              twice);
}

// tensor-scalar ops: op(a, s), or op(s, a) when scalar_first; backward(g, a, out) -> ga.
template <class Backward>
Tensor scalar_differentiable(BinaryOp op, const Tensor& a, double s, bool scalar_first, Backward backward,
                             Saves saves = Saves::InputsAndOutputs, bool twice = false) {
  return unary_differentiable(kernels::op_name(op), a, [&] { return scalar_op(op, a, s, scalar_first); },
                              backward, saves, twice);
}

// The gradient of maximum/minimum for one operand: it goes to the winning operand and is split
// in half on ties (PyTorch's rule); `loses` marks where this operand is the smaller (maximum) or
// the larger (minimum) one.
Tensor tie_split(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& loses) {
  return where(loses, zero_of(g), where(eq(a, b), mul(g, 0.5), g));
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary_differentiable(
      BinaryOp::Add, a, b, [](const Tensor& g, const Tensor&, const Tensor&, const Tensor&) { return TensorList{g, g}; },
      Saves::None, true);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary_differentiable(
      BinaryOp::Sub, a, b,
      [](const Tensor& g, const Tensor&, const Tensor&, const Tensor&) { return TensorList{g, neg(g)}; }, Saves::None, true);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_differentiable(BinaryOp::Mul, a, b, [](const Tensor& g, const Tensor& a, const Tensor& b,
                                                       const Tensor&) {
    return TensorList{a.requires_grad() ? mul(g, b) : Tensor(), b.requires_grad() ? mul(g, a) : Tensor()};
  }, Saves::Inputs, true);
}
// d(a/b)/da = 1/b, d(a/b)/db = -a/b^2 = -out/b.
Tensor div(const Tensor& a, const Tensor& b) {
  return binary_differentiable(BinaryOp::Div, a, b, [](const Tensor& g, const Tensor& a, const Tensor& b,
                                                       const Tensor& out) {
    return TensorList{a.requires_grad() ? div(g, b) : Tensor(),
                      b.requires_grad() ? neg(div(mul(g, out), b)) : Tensor()};
  }, Saves::InputsAndOutputs, true);
}
// d(a^b)/da = b a^(b-1) (0 where b == 0), d(a^b)/db = a^b ln a (0 where a == 0 and b >= 0):
// PyTorch's conventions at the points where the formulas are 0 * inf.
Tensor pow(const Tensor& a, const Tensor& b) {
  return binary_differentiable(BinaryOp::Pow, a, b, [](const Tensor& g, const Tensor& a, const Tensor& b,
                                                       const Tensor& out) {
    Tensor ga, gb;
    if (a.requires_grad()) ga = masked(ne(b, 0.0), mul(g, mul(b, pow(a, sub(b, 1.0)))));
    if (b.requires_grad()) {
      gb = mul(g, mul(out, log(a)));
      gb = where(eq(a, 0.0), masked(lt(b, 0.0), gb), gb);
    }
    return TensorList{ga, gb};
  }, Saves::InputsAndOutputs, true);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary_differentiable(BinaryOp::Maximum, a, b, [](const Tensor& g, const Tensor& a, const Tensor& b,
                                                           const Tensor&) {
    return TensorList{a.requires_grad() ? tie_split(g, a, b, lt(a, b)) : Tensor(),
                      b.requires_grad() ? tie_split(g, a, b, gt(a, b)) : Tensor()};
  }, Saves::Inputs, true);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary_differentiable(BinaryOp::Minimum, a, b, [](const Tensor& g, const Tensor& a, const Tensor& b,
                                                           const Tensor&) {
    return TensorList{a.requires_grad() ? tie_split(g, a, b, gt(a, b)) : Tensor(),
                      b.requires_grad() ? tie_split(g, a, b, lt(a, b)) : Tensor()};
  }, Saves::Inputs, true);
}

Tensor add(const Tensor& a, double s) {
  return scalar_differentiable(
      BinaryOp::Add, a, s, false, [](const Tensor& g, const Tensor&, const Tensor&) { return g; }, Saves::None, true);
}
Tensor sub(const Tensor& a, double s) {
  return scalar_differentiable(
      BinaryOp::Sub, a, s, false, [](const Tensor& g, const Tensor&, const Tensor&) { return g; }, Saves::None, true);
}
Tensor mul(const Tensor& a, double s) {
  return scalar_differentiable(
      BinaryOp::Mul, a, s, false, [s](const Tensor& g, const Tensor&, const Tensor&) { return mul(g, s); },
      Saves::None, true);
}
Tensor div(const Tensor& a, double s) {
  return scalar_differentiable(
      BinaryOp::Div, a, s, false, [s](const Tensor& g, const Tensor&, const Tensor&) { return div(g, s); },
      Saves::None, true);
}

Tensor pow(const Tensor& a, double exponent) {
  detail::check_defined(a, "pow");
  MG_CHECK(is_floating(a.dtype()) || !is_integral_value(exponent) || exponent >= 0,
           "pow: integers to negative integer powers are not allowed (", a.dtype(), " tensor, exponent ",
           exponent, ")");
  // d(a^s)/da = s a^(s-1); exactly 0 for s == 0 (PyTorch), also where a^(s-1) is inf.
  return scalar_differentiable(BinaryOp::Pow, a, exponent, false,
                               [exponent](const Tensor& g, const Tensor& a, const Tensor&) {
                                 if (exponent == 0) return Tensor();
                                 return mul(g, mul(pow(a, exponent - 1), exponent));
                               }, Saves::Inputs, true);
}

Tensor neg(const Tensor& x) {
  return unary_differentiable(
      UnaryOp::Neg, x, false, [](const Tensor& g, const Tensor&, const Tensor&) { return neg(g); }, Saves::None, true);
}
Tensor abs(const Tensor& x) {
  return unary_differentiable(UnaryOp::Abs, x, false,
                              [](const Tensor& g, const Tensor& x, const Tensor&) { return mul(g, sign(x)); },
                              Saves::Inputs, true);
}
// relu'(x) = 1 where the output is positive (0 at x = 0, as PyTorch's threshold_backward). Under
// create_graph (grad mode on in a backward) the same mask as a differentiable where.
Tensor relu(const Tensor& x) {
  return unary_differentiable(UnaryOp::Relu, x, false, [](const Tensor& g, const Tensor&, const Tensor& out) {
    return is_grad_enabled() ? masked(gt(out, 0.0), g) : binary_op(BinaryOp::ReluBackward, g, out);
  }, Saves::Outputs, true);
}
Tensor exp(const Tensor& x) {
  return unary_differentiable(
      UnaryOp::Exp, x, true, [](const Tensor& g, const Tensor&, const Tensor& out) { return mul(g, out); },
      Saves::Outputs, true);
}
Tensor log(const Tensor& x) {
  return unary_differentiable(
      UnaryOp::Log, x, true, [](const Tensor& g, const Tensor& x, const Tensor&) { return div(g, x); }, Saves::Inputs, true);
}
// sqrt'(x) = 1 / (2 sqrt(x)): inf at 0.
Tensor sqrt(const Tensor& x) {
  return unary_differentiable(UnaryOp::Sqrt, x, true, [](const Tensor& g, const Tensor&, const Tensor& out) {
    return div(g, mul(out, 2.0));
  }, Saves::Outputs, true);
}
// gelu'(x) in one fused pass (kernels/functors.h's GeluBackwardOp has the formula): composed
// from ops it took a dozen passes and libm's scalar tanh, a tenth of the GPT's step
// (benchmarks/NOTES.md, 2026-12-03). Under create_graph, composed: with gelu(x) = x s,
// s = sigmoid(2u), u = c (x + a x^3), gelu'(x) = s + x s (1 - s) 2c (1 + 3a x^2).
Tensor gelu(const Tensor& x) {
  return unary_differentiable(UnaryOp::Gelu, x, true, [](const Tensor& g, const Tensor& x, const Tensor&) {
    if (!is_grad_enabled()) return binary_op(BinaryOp::GeluBackward, g, x);
    constexpr double kSqrt2OverPi = 0.7978845608028654, kCubic = 0.044715;
    const Tensor x2 = mul(x, x);
    const Tensor s = sigmoid(mul(mul(x, mul(x2, kCubic) + 1.0), 2.0 * kSqrt2OverPi));
    const Tensor du = mul(x2, 3.0 * kCubic) + 1.0;
    return mul(g, s + mul(mul(x, mul(s, 1.0 - s)), mul(du, 2.0 * kSqrt2OverPi)));
  }, Saves::Inputs, true);
}
Tensor sigmoid(const Tensor& x) {
  return unary_differentiable(UnaryOp::Sigmoid, x, true, [](const Tensor& g, const Tensor&, const Tensor& out) {
    return mul(g, mul(out, 1.0 - out));
  }, Saves::Outputs, true);
}
Tensor tanh(const Tensor& x) {
  return unary_differentiable(UnaryOp::Tanh, x, true, [](const Tensor& g, const Tensor&, const Tensor& out) {
    return mul(g, 1.0 - mul(out, out));
  }, Saves::Outputs, true);
}

Tensor sin(const Tensor& x) {
  return unary_differentiable(
      UnaryOp::Sin, x, true, [](const Tensor& g, const Tensor& x, const Tensor&) { return mul(g, cos(x)); },
      Saves::Inputs, true);
}
Tensor cos(const Tensor& x) {
  return unary_differentiable(
      UnaryOp::Cos, x, true, [](const Tensor& g, const Tensor& x, const Tensor&) { return mul(g, neg(sin(x))); },
      Saves::Inputs, true);
}
// erf'(x) = 2 / sqrt(pi) e^(-x^2).
Tensor erf(const Tensor& x) {
  return unary_differentiable(UnaryOp::Erf, x, true, [](const Tensor& g, const Tensor& x, const Tensor&) {
    constexpr double kTwoOverSqrtPi = 1.1283791670955126;
    return mul(g, mul(exp(neg(mul(x, x))), kTwoOverSqrtPi));
  }, Saves::Inputs, true);
}
// expm1'(x) = e^x = expm1(x) + 1.
Tensor expm1(const Tensor& x) {
  return unary_differentiable(
      UnaryOp::Expm1, x, true, [](const Tensor& g, const Tensor&, const Tensor& out) { return mul(g, out + 1.0); },
      Saves::Outputs, true);
}
Tensor log1p(const Tensor& x) {
  return unary_differentiable(
      UnaryOp::Log1p, x, true, [](const Tensor& g, const Tensor& x, const Tensor&) { return div(g, x + 1.0); },
      Saves::Inputs, true);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  detail::check_defined(x, "masked_fill");
  detail::check_defined(mask, "masked_fill");
  MG_CHECK(mask.dtype() == DType::Bool, "masked_fill: the mask must be Bool, got ", mask.dtype());
  MG_CHECK(broadcast_shapes(mask.shape(), x.shape(), "masked_fill") == x.shape(), "masked_fill: a mask of shape ",
           mask.shape(), " does not broadcast to the input's shape ", x.shape());
  return where(mask, full({}, value, {.dtype = x.dtype(), .device = x.device()}), x);
}

// The gradient passes where lo <= x <= hi, boundaries included (PyTorch's clamp_backward).
Tensor clamp(const Tensor& x, double lo, double hi) {
  auto forward = [&] {
    detail::check_defined(x, "clamp");
    DType compute = x.dtype();
    if (!is_floating(compute))
      compute = is_integral_value(lo) && is_integral_value(hi) ? DType::Int64 : DType::Float32;
    check_arithmetic_dtype(compute, "clamp");
    Tensor out = Tensor::empty(x.shape(), {compute, x.device()});
    if (out.numel() > 0) kernels::clamp(to(x, compute), lo, hi, out);
    return out;
  };
  return unary_differentiable("clamp", x, forward, [lo, hi](const Tensor& g, const Tensor& x, const Tensor&) {
    return masked(ge(x, lo), masked(le(x, hi), g));
  }, Saves::Inputs, true);
}

Tensor eq(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Ge, a, b); }
Tensor eq(const Tensor& a, double s) { return scalar_op(BinaryOp::Eq, a, s); }
Tensor ne(const Tensor& a, double s) { return scalar_op(BinaryOp::Ne, a, s); }
Tensor lt(const Tensor& a, double s) { return scalar_op(BinaryOp::Lt, a, s); }
Tensor le(const Tensor& a, double s) { return scalar_op(BinaryOp::Le, a, s); }
Tensor gt(const Tensor& a, double s) { return scalar_op(BinaryOp::Gt, a, s); }
Tensor ge(const Tensor& a, double s) { return scalar_op(BinaryOp::Ge, a, s); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  auto forward = [&] {
    detail::check_defined(cond, "where");
    detail::check_defined(a, "where");
    detail::check_defined(b, "where");
    detail::check_same_device(cond, a, "where");
    detail::check_same_device(a, b, "where");
    MG_CHECK(cond.dtype() == DType::Bool, "where: expected a Bool condition, got ", cond.dtype());
    const DType dtype = a.dtype() == b.dtype() ? a.dtype() : promote_types(a.dtype(), b.dtype(), "where");
    const Shape shape =
        broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
    Tensor out = Tensor::empty(shape, {dtype, a.device()});
    if (out.numel() > 0)
      kernels::where(detail::broadcast_to(cond, shape), detail::broadcast_to(to(a, dtype), shape),
                     detail::broadcast_to(to(b, dtype), shape), out);
    return out;
  };
  // The gradient goes to a where cond holds and to b elsewhere: their values are not read.
  return detail::differentiable("where", {&a, &b}, forward, [&] {
    return [cond, a = detail::kept_input(a, Saves::None), b = detail::kept_input(b, Saves::None)](
               const Tensor& g, const Tensor&) -> TensorList {
      return {a.requires_grad() ? detail::sum_to(masked(cond, g), a.shape()) : Tensor(),
              b.requires_grad() ? detail::sum_to(where(cond, zero_of(g), g), b.shape()) : Tensor()};
    };
  }, Saves::None, true);
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double s) { return add(a, s); }
Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
Tensor operator/(const Tensor& a, double s) { return div(a, s); }
Tensor operator+(double s, const Tensor& a) { return add(a, s); }
Tensor operator-(double s, const Tensor& a) {
  return scalar_differentiable(BinaryOp::Sub, a, s, true,
                               [](const Tensor& g, const Tensor&, const Tensor&) { return neg(g); }, Saves::None, true);
}
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
// d(s/a)/da = -s/a^2 = -out/a.
Tensor operator/(double s, const Tensor& a) {
  return scalar_differentiable(BinaryOp::Div, a, s, true, [](const Tensor& g, const Tensor& a, const Tensor& out) {
    return neg(div(mul(g, out), a));
  }, Saves::InputsAndOutputs, true);
}

}  // namespace mg
