// kernels/functors.h — elementwise math, written once for the CPU loop and the CUDA kernel.
//
// Each op is a stateless functor with an MG_HD call operator templated on the element type.
// kernels/cpu/elementwise.cpp and kernels/cuda/elementwise.cu apply the same functor, so the
// two backends cannot disagree about the math (only about rounding inside libm).
// Float-only ops (exp, log, sqrt, gelu, sigmoid, tanh, sin, cos, erf, expm1, log1p) are
// instantiated for float and double;
// the functional API converts integer inputs to Float32 before calling them, as PyTorch does.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "multigrad/core/dtype.h"
#include "multigrad/core/macros.h"
#include "multigrad/core/random.h"

namespace mg::kernels {

// ---- float/double overloads of libm that also compile in device code ----
// Qualified with :: so that mg::exp and friends (the Tensor ops of autograd/ops.h) never hide them.
MG_HD float m_exp(float x) { return ::expf(x); }
MG_HD double m_exp(double x) { return ::exp(x); }
MG_HD float m_log(float x) { return ::logf(x); }
MG_HD double m_log(double x) { return ::log(x); }
MG_HD float m_sqrt(float x) { return ::sqrtf(x); }
MG_HD double m_sqrt(double x) { return ::sqrt(x); }
MG_HD float m_tanh(float x) { return ::tanhf(x); }
MG_HD double m_tanh(double x) { return ::tanh(x); }
MG_HD float m_pow(float x, float y) { return ::powf(x, y); }
MG_HD double m_pow(double x, double y) { return ::pow(x, y); }
MG_HD float m_cos(float x) { return ::cosf(x); }
MG_HD double m_cos(double x) { return ::cos(x); }
MG_HD float m_sin(float x) { return ::sinf(x); }
MG_HD double m_sin(double x) { return ::sin(x); }
MG_HD float m_erf(float x) { return ::erff(x); }
MG_HD double m_erf(double x) { return ::erf(x); }
MG_HD float m_expm1(float x) { return ::expm1f(x); }
MG_HD double m_expm1(double x) { return ::expm1(x); }
MG_HD float m_log1p(float x) { return ::log1pf(x); }
MG_HD double m_log1p(double x) { return ::log1p(x); }
template <class T> MG_HD bool m_isnan(T x) { return x != x; }

// ---- unary ----
struct NegOp { template <class T> MG_HD T operator()(T x) const { return -x; } };
struct AbsOp { template <class T> MG_HD T operator()(T x) const { return x < T(0) ? -x : x; } };
// relu(NaN) = NaN, as in PyTorch.
struct ReluOp { template <class T> MG_HD T operator()(T x) const { return x < T(0) ? T(0) : x; } };
struct ExpOp { template <class T> MG_HD T operator()(T x) const { return m_exp(x); } };
struct LogOp { template <class T> MG_HD T operator()(T x) const { return m_log(x); } };
struct SqrtOp { template <class T> MG_HD T operator()(T x) const { return m_sqrt(x); } };
struct TanhOp { template <class T> MG_HD T operator()(T x) const { return m_tanh(x); } };
struct SinOp { template <class T> MG_HD T operator()(T x) const { return m_sin(x); } };
struct CosOp { template <class T> MG_HD T operator()(T x) const { return m_cos(x); } };
struct ErfOp { template <class T> MG_HD T operator()(T x) const { return m_erf(x); } };
// e^x - 1 and log(1 + x), exact near 0 where the plain forms cancel.
struct Expm1Op { template <class T> MG_HD T operator()(T x) const { return m_expm1(x); } };
struct Log1pOp { template <class T> MG_HD T operator()(T x) const { return m_log1p(x); } };
// 1 / (1 + e^-x), written to avoid overflow of e^-x for large negative x.
struct SigmoidOp {
  template <class T> MG_HD T operator()(T x) const {
    if (x >= T(0)) return T(1) / (T(1) + m_exp(-x));
    T e = m_exp(x);
    return e / (T(1) + e);
  }
};
// e^x for float without libm, branch-free so the CPU loop vectorises (libm's expf is a scalar
// call, ~20x slower per element than this in a SIMD loop). Cephes' expf scheme: n = round(x /
// ln 2), r = x - n ln 2 in [-ln2/2, ln2/2] (ln 2 split in two parts so n ln 2 is exact), a
// degree-6 polynomial for e^r (Cephes' minimax coefficients, ~1 ulp), times 2^n assembled in
// the exponent bits. Inputs are clamped to [-87.3, 88.7], where the result stays finite and
// normal; callers that need inf/0 beyond that use m_exp.
MG_HD float exp_poly(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  float n = (x * kLog2e + kRoundMagic) - kRoundMagic;
  float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  return p * bits_to_float(uint32_t(int32_t(n) + 127) << 23);  // 2^n: n in [-126, 128)
}

// ---- rounding to a lower precision (autograd/autocast.h emulates bf16 and fp16 with these) ----
// x rounded to the nearest bfloat16 value (ties to even, core/dtype.h's BFloat16), as a float.
struct RoundBFloat16Op {
  MG_HD float operator()(float x) const { return BFloat16::to_float(BFloat16::round_from_float(x)); }
};
// x rounded to the nearest IEEE binary16 value (ties to even, core/dtype.h's Float16), as a float.
struct RoundFloat16Op {
  MG_HD float operator()(float x) const { return Float16::round(x); }
};

// e^x for x <= 0 (a softmax row shifted by its max or its log-sum-exp), vectorisable: exp_poly,
// and 0 below its clamp (expf's result there is 1e-38 or less); NaN stays NaN.
struct ExpNonPositiveOp {
  MG_HD float operator()(float x) const { return x < -87.3f ? 0.0f : exp_poly(x); }
};

// GELU, tanh approximation (PyTorch approximate="tanh"):
//   0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
// computed as x / (1 + e^(-2u)), the same function (0.5 (1 + tanh u) = sigmoid(2u)) with one
// exp and no tanh. Float uses exp_poly (vectorisable); e^(-2u) clamps at e^88.7 for very
// negative x, where the result is x * 3e-39, i.e. 0 to float precision.
struct GeluOp {
  template <class T> MG_HD T operator()(T x) const {
    constexpr double kSqrt2OverPi = 0.7978845608028654;
    constexpr double kCubic = 0.044715;
    T u = T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x);
    if constexpr (std::is_same_v<T, float>) return x / (1.0f + exp_poly(-2.0f * u));
    else return x / (T(1) + m_exp(T(-2) * u));
  }
};

// ---- binary ----
struct AddOp { template <class T> MG_HD T operator()(T a, T b) const { return a + b; } };
struct SubOp { template <class T> MG_HD T operator()(T a, T b) const { return a - b; } };
struct MulOp { template <class T> MG_HD T operator()(T a, T b) const { return a * b; } };
// Integer division truncates toward zero and a zero divisor gives 0 (never a trap); the
// functional API only sends integers here for explicitly integral work.
struct DivOp {
  template <class T> MG_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return b == 0 ? T(0) : T(a / b);
    else return a / b;
  }
};
// Integer pow: repeated squaring; a negative exponent gives 0 except for bases 1 and -1.
struct PowOp {
  template <class T> MG_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b < 0) return a == 1 ? T(1) : (a == -1 ? ((b & 1) ? T(-1) : T(1)) : T(0));
      T result = 1;
      for (T base = a; b > 0; b >>= 1, base *= base)
        if (b & 1) result *= base;
      return result;
    } else {
      return m_pow(a, b);
    }
  }
};
// maximum/minimum propagate NaN from either side, as torch.maximum does.
struct MaximumOp {
  template <class T> MG_HD T operator()(T a, T b) const {
    if (m_isnan(a)) return a;
    if (m_isnan(b)) return b;
    return a > b ? a : b;
  }
};
struct MinimumOp {
  template <class T> MG_HD T operator()(T a, T b) const {
    if (m_isnan(a)) return a;
    if (m_isnan(b)) return b;
    return a < b ? a : b;
  }
};
// relu's gradient g where its output y is positive, else 0 (a NaN output passes no gradient).
struct ReluBackwardOp {
  template <class T> MG_HD T operator()(T g, T y) const { return y > T(0) ? g : T(0); }
};
// GELU's (tanh form) gradient from its input, g gelu'(x), in one pass. With s = sigmoid(2u) =
// 0.5 (1 + tanh u) (GeluOp's identity) and 1 - tanh^2 u = 4 s (1 - s):
//   gelu'(x) = s + 2 x s (1 - s) u'(x),  u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
// Float computes e^(-2u) with exp_poly, as GeluOp; far out, s saturates to 0 or 1 and the
// second term to 0. Integral T is never dispatched (kernels/dispatch.cpp admits floating only).
struct GeluBackwardOp {
  template <class T> MG_HD T operator()(T g, T x) const {
    if constexpr (std::is_integral_v<T>) {
      return T(0);
    } else {
      constexpr double kSqrt2OverPi = 0.7978845608028654;
      constexpr double kCubic = 0.044715;
      const T x2 = x * x;
      const T u = T(kSqrt2OverPi) * (x + T(kCubic) * x2 * x);
      T e;
      if constexpr (std::is_same_v<T, float>) e = exp_poly(-2.0f * u);
      else e = m_exp(T(-2) * u);
      const T s = T(1) / (T(1) + e);
      const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * x2);
      return g * (s + T(2) * x * s * (T(1) - s) * du);
    }
  }
};
struct EqOp { template <class T> MG_HD bool operator()(T a, T b) const { return a == b; } };
struct NeOp { template <class T> MG_HD bool operator()(T a, T b) const { return a != b; } };
struct LtOp { template <class T> MG_HD bool operator()(T a, T b) const { return a < b; } };
struct LeOp { template <class T> MG_HD bool operator()(T a, T b) const { return a <= b; } };
struct GtOp { template <class T> MG_HD bool operator()(T a, T b) const { return a > b; } };
struct GeOp { template <class T> MG_HD bool operator()(T a, T b) const { return a >= b; } };

// A binary functor with one operand bound to a scalar: op(x, s), or op(s, x) when Flip.
template <class Op, class T, bool Flip>
struct BindScalar {
  T s;
  MG_HD auto operator()(T x) const { return Flip ? Op{}(s, x) : Op{}(x, s); }
};

// min(max(x, lo), hi) with NaN passing through.
template <class T>
struct ClampOp {
  T lo, hi;
  MG_HD T operator()(T x) const {
    if (m_isnan(x)) return x;
    return x < lo ? lo : (x > hi ? hi : x);
  }
};

// Element conversion used by copy/cast (bool from anything non-zero, bfloat16 via float).
template <class To, class From>
MG_HD To convert(From x) {
  if constexpr (std::is_same_v<To, bool>) return x != From(0);
  else return To(x);
}
template <class To, class From>
struct ConvertOp {
  MG_HD To operator()(From x) const { return convert<To, From>(x); }
};

// where(cond, a, b).
template <class T>
struct SelectOp {
  MG_HD T operator()(bool c, T a, T b) const { return c ? a : b; }
};

// fill: no inputs, one value.
template <class T>
struct ConstantOp {
  T value;
  MG_HD T operator()() const { return value; }
};

// ---- Philox draws: which counter block and word element i reads ----
// Float32 uniform: block i/4, word i%4 (4 numbers per block).
// Float64 uniform: block i/2, words 2(i%2) and 2(i%2)+1.
// Normals use Box-Muller on two uniforms u1 in (0, 1], u2 in [0, 1):
//   z0 = sqrt(-2 ln u1) cos(2 pi u2), z1 = sqrt(-2 ln u1) sin(2 pi u2).
// Float32: block i/4 gives (u0,u1)->(z0,z1) for words 0,1 and (u2,u3)->(z2,z3) for words 2,3.
// Float64: block i/2 gives one (u1, u2) pair -> (z0, z1) for elements 2k and 2k+1.
template <class T>
MG_HD T philox_uniform(PhiloxState st, int64_t i) {
  if constexpr (std::is_same_v<T, float>) {
    Philox4 r = philox4x32_10(st.seed, st.offset + uint64_t(i) / 4);
    return uint_to_unit_float(r.x[i % 4]);
  } else {
    Philox4 r = philox4x32_10(st.seed, st.offset + uint64_t(i) / 2);
    int w = int(i % 2) * 2;
    return uints_to_unit_double(r.x[w], r.x[w + 1]);
  }
}

template <class T>
MG_HD T philox_normal(PhiloxState st, int64_t i) {
  constexpr double kTwoPi = 6.283185307179586;
  T u1, u2;
  int which;  // 0: cos branch, 1: sin branch
  if constexpr (std::is_same_v<T, float>) {
    Philox4 r = philox4x32_10(st.seed, st.offset + uint64_t(i) / 4);
    int pair = int(i % 4) / 2;
    u1 = T(1) - uint_to_unit_float(r.x[2 * pair]);  // (0, 1]: log is finite
    u2 = uint_to_unit_float(r.x[2 * pair + 1]);
    which = int(i % 2);
  } else {
    Philox4 r = philox4x32_10(st.seed, st.offset + uint64_t(i) / 2);
    u1 = T(1) - uints_to_unit_double(r.x[0], r.x[1]);
    u2 = uints_to_unit_double(r.x[2], r.x[3]);
    which = int(i % 2);
  }
  T radius = m_sqrt(T(-2) * m_log(u1));
  T angle = T(kTwoPi) * u2;
  return radius * (which == 0 ? m_cos(angle) : m_sin(angle));
}

}  // namespace mg::kernels
