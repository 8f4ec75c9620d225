// kernels/cpu/elementwise.cpp — elementwise ops on the CPU: unary, clamp, where, fill, arange
// (binary and tensor-scalar ops: binary.cpp; copy and cast: copy.cpp).
//
// Every op is out[i] = f(in_0[i], in_1[i], ...) with f a functor of kernels/functors.h, applied
// by elementwise_map.h's one loop (contiguous operands in vectorised loops picked by instruction
// set, the others by the layout's odometer; a chunk per thread). Outputs may be strided views.
// Inputs and output have one shape (the functional API expands broadcast inputs before calling).
#include "multigrad/kernels/cpu/cpu_kernels.h"
#include "multigrad/kernels/cpu/elementwise_map.h"
#include "multigrad/kernels/functors.h"
#include "multigrad/kernels/op_functors.h"

namespace mg::kernels::cpu {
namespace {

using detail::check_same_dtype;
using detail::map;

// out = f(in) for a functor defined on every arithmetic dtype (or only the floating ones).
template <class F>
void unary_arith(F f, const char* name, const Tensor& in, const Tensor& out) {
  MG_DISPATCH_ARITH(in.dtype(), name, [&] { map<scalar_t, scalar_t>(f, out, in); });
}
template <class F>
void unary_floating(F f, const char* name, const Tensor& in, const Tensor& out) {
  MG_DISPATCH_FLOATING(in.dtype(), name, [&] { map<scalar_t, scalar_t>(f, out, in); });
}

template <class F>
void unary_float32(F f, const char* name, const Tensor& in, const Tensor& out) {
  MG_CHECK(in.dtype() == DType::Float32, name, ": expected a Float32 tensor, got ", in.dtype());
  map<float, float>(f, out, in);
}

}  // namespace

void unary(UnaryOp op, const Tensor& in, const Tensor& out) {
  const char* name = op_name(op);
  check_same_dtype(name, in, out);
  switch (op) {
    case UnaryOp::Neg: return unary_arith(NegOp{}, name, in, out);
    case UnaryOp::Abs: return unary_arith(AbsOp{}, name, in, out);
    case UnaryOp::Relu: return unary_arith(ReluOp{}, name, in, out);
    case UnaryOp::Exp: return unary_floating(ExpOp{}, name, in, out);
    case UnaryOp::Log: return unary_floating(LogOp{}, name, in, out);
    case UnaryOp::Sqrt: return unary_floating(SqrtOp{}, name, in, out);
    case UnaryOp::Gelu: return unary_floating(GeluOp{}, name, in, out);
    case UnaryOp::Sigmoid: return unary_floating(SigmoidOp{}, name, in, out);
    case UnaryOp::Tanh: return unary_floating(TanhOp{}, name, in, out);
    case UnaryOp::Sin: return unary_floating(SinOp{}, name, in, out);
    case UnaryOp::Cos: return unary_floating(CosOp{}, name, in, out);
    case UnaryOp::Erf: return unary_floating(ErfOp{}, name, in, out);
    case UnaryOp::Expm1: return unary_floating(Expm1Op{}, name, in, out);
    case UnaryOp::Log1p: return unary_floating(Log1pOp{}, name, in, out);
    case UnaryOp::RoundBFloat16: return unary_float32(RoundBFloat16Op{}, name, in, out);
    case UnaryOp::RoundFloat16: return unary_float32(RoundFloat16Op{}, name, in, out);
  }
  MG_ERROR("unary: unknown op ", int(op));
}

void clamp(const Tensor& in, double lo, double hi, const Tensor& out) {
  check_same_dtype("clamp", in, out);
  MG_DISPATCH_ARITH(in.dtype(), "clamp", [&] {
    map<scalar_t, scalar_t>(ClampOp<scalar_t>{convert<scalar_t>(lo), convert<scalar_t>(hi)}, out, in);
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  MG_CHECK(cond.dtype() == DType::Bool, "where: condition must be Bool, got ", cond.dtype());
  check_same_dtype("where", a, b);
  check_same_dtype("where", a, out);
  MG_DISPATCH_ALL(out.dtype(), "where", [&] {
    map<scalar_t, bool, scalar_t, scalar_t>(SelectOp<scalar_t>{}, out, cond, a, b);
  });
}

void fill(const Tensor& out, double value) {
  MG_DISPATCH_ALL(out.dtype(), "fill", [&] { map<scalar_t>(ConstantOp<scalar_t>{convert<scalar_t>(value)}, out); });
}

void arange(const Tensor& out, double start, double step) {
  MG_CHECK(out.dim() == 1 && out.is_contiguous(), "arange: output must be contiguous 1-d, got shape ",
           out.shape(), " strides ", out.strides());
  MG_DISPATCH_ARITH(out.dtype(), "arange", [&] {
    scalar_t* o = out.data<scalar_t>();
    parallel_for(out.device(), out.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = convert<scalar_t>(start + double(i) * step);
    });
  });
}

}  // namespace mg::kernels::cpu
