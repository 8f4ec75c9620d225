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
#include <cmath>

#include "autograd/op_common.h"
#include "autograd/ops.h"
#include "kernels/kernels.h"

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

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Pow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Minimum, a, b); }
Tensor add(const Tensor& a, double s) { return scalar_op(BinaryOp::Add, a, s); }
Tensor sub(const Tensor& a, double s) { return scalar_op(BinaryOp::Sub, a, s); }
Tensor mul(const Tensor& a, double s) { return scalar_op(BinaryOp::Mul, a, s); }
Tensor div(const Tensor& a, double s) { return scalar_op(BinaryOp::Div, a, s); }

Tensor pow(const Tensor& a, double exponent) {
  detail::check_defined(a, "pow");
  MG_CHECK(is_floating(a.dtype()) || !is_integral_value(exponent) || exponent >= 0,
           "pow: integers to negative integer powers are not allowed (", a.dtype(), " tensor, exponent ",
           exponent, ")");
  return scalar_op(BinaryOp::Pow, a, exponent);
}

Tensor neg(const Tensor& x) { return unary_op(UnaryOp::Neg, x, false); }
Tensor abs(const Tensor& x) { return unary_op(UnaryOp::Abs, x, false); }
Tensor relu(const Tensor& x) { return unary_op(UnaryOp::Relu, x, false); }
Tensor exp(const Tensor& x) { return unary_op(UnaryOp::Exp, x, true); }
Tensor log(const Tensor& x) { return unary_op(UnaryOp::Log, x, true); }
Tensor sqrt(const Tensor& x) { return unary_op(UnaryOp::Sqrt, x, true); }
Tensor gelu(const Tensor& x) { return unary_op(UnaryOp::Gelu, x, true); }
Tensor sigmoid(const Tensor& x) { return unary_op(UnaryOp::Sigmoid, x, true); }
Tensor tanh(const Tensor& x) { return unary_op(UnaryOp::Tanh, x, true); }

Tensor clamp(const Tensor& x, double lo, double hi) {
  detail::check_defined(x, "clamp");
  DType compute = x.dtype();
  if (!is_floating(compute))
    compute = is_integral_value(lo) && is_integral_value(hi) ? DType::Int64 : DType::Float32;
  check_arithmetic_dtype(compute, "clamp");
  Tensor out = Tensor::empty(x.shape(), {compute, x.device()});
  if (out.numel() > 0) kernels::clamp(to(x, compute), lo, hi, out);
  return out;
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
Tensor operator-(double s, const Tensor& a) { return scalar_op(BinaryOp::Sub, a, s, true); }
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
Tensor operator/(double s, const Tensor& a) { return scalar_op(BinaryOp::Div, a, s, true); }

}  // namespace mg
