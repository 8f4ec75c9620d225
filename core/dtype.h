// core/dtype.h — element types.
//
// Float32, Float64 and Int64 support every op. Bool is what comparisons return (1 byte, 0 or 1).
// BFloat16 and Float16 (IEEE binary16) are storage only: tensors can hold them and convert to and
// from them with .to(DType); arithmetic on them is an error that says to convert first.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>

#include "multigrad/core/error.h"
#include "multigrad/core/macros.h"

namespace mg {

enum class DType : uint8_t { Float32, Float64, Int64, BFloat16, Bool, Float16 };

// A float's IEEE bits and back (host and device).
MG_HD uint32_t float_to_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(uint32_t, x);  // std::bit_cast's builtin (GCC and Clang: nvcc's host compilers)
#endif
}
MG_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// bfloat16: the top 16 bits of an IEEE float32. Conversion rounds to nearest even; NaN stays NaN.
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  MG_HD explicit BFloat16(float f) : bits(round_from_float(f)) {}
  MG_HD operator float() const { return to_float(bits); }

  MG_HD static uint16_t round_from_float(float f) {
    uint32_t u = float_to_bits(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);  // ties go to the even neighbour
    return uint16_t((u + rounding_bias) >> 16);
  }
  MG_HD static float to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }

};
static_assert(sizeof(BFloat16) == 2);

// IEEE binary16 ("half"): 1 sign, 5 exponent (bias 15) and 10 significand bits. Conversions give
// the bits of x86's F16C instructions (VCVTPS2PH rounding to nearest even, VCVTPH2PS), which the
// CPU's vector casts use: a NaN comes out quiet with the top bits of its payload.
struct Float16 {
  uint16_t bits = 0;

  Float16() = default;
  MG_HD explicit Float16(float f) : bits(round_from_float(f)) {}
  MG_HD operator float() const { return to_float(bits); }

  // f rounded to the nearest binary16 value, as a float (autocast's fp16 rounding). binary16 keeps
  // 11 significant bits down to its smallest normal number 2^-14, below that a fixed step of 2^-24
  // (its subnormals), and overflows to infinity from 65520 (halfway between its largest value
  // 65504 and 2^16; the tie goes to the even 2^16, which is infinity). NaN stays as it is.
  MG_HD static float round(float f) {
    constexpr uint32_t kSign = 0x80000000u;
    constexpr uint32_t kOverflow = 0x477ff000u;  // 65520.0f
    constexpr float kHalf = 0.5f;  // its float neighbours are 2^-24 apart: adding it rounds to that step
    const uint32_t u = float_to_bits(f), sign = u & kSign, magnitude = u ^ sign;
    if (magnitude >= kFloatInfinity) return f;
    if (magnitude >= kOverflow) return bits_to_float(sign | kFloatInfinity);
    if (magnitude < kSmallestNormal) {
      const float rounded = (bits_to_float(magnitude) + kHalf) - kHalf;  // a multiple of 2^-24
      return bits_to_float(float_to_bits(rounded) | sign);
    }
    // Drop the 13 low significand bits, rounding half to even; a carry moves into the exponent.
    const uint32_t kept = (magnitude + 0xfffu + ((magnitude >> 13) & 1u)) & ~0x1fffu;
    return bits_to_float(kept | sign);
  }
  // The bits of round(f): the exponent rebased from 127 to 15 and the top 10 of the 23 mantissa
  // bits; below 2^-14 a subnormal, its multiple of 2^-24 in the mantissa; a NaN quiet, with the top
  // 10 bits of its payload.
  MG_HD static uint16_t round_from_float(float f) {
    const uint32_t u = float_to_bits(round(f)), magnitude = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
    if (magnitude > kFloatInfinity) return uint16_t(sign | kQuietNaN | ((magnitude >> 13) & 0x3ffu));
    if (magnitude == kFloatInfinity) return uint16_t(sign | kInfinity);
    if (magnitude < kSmallestNormal) return uint16_t(sign | uint32_t(bits_to_float(magnitude) * 0x1p24f));
    return uint16_t(sign | ((magnitude >> 13) - (kExponentRebase << 10)));
  }
  MG_HD static float to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    // mantissa 2^-24 (or 0) as (0.5 + mantissa 2^-24) - 0.5, exact, computed on every lane and
    // picked by a mask: a select lets the compiler branch around it, and the branch keeps loops over
    // this from vectorising.
    constexpr uint32_t kOneHalf = 0x3f000000u;  // 0.5f: its float neighbours are 2^-24 apart
    const uint32_t subnormal = float_to_bits(bits_to_float(kOneHalf | mantissa) - 0.5f);
    const uint32_t special = mantissa == 0 ? kFloatInfinity : kFloatQuietNaN | (mantissa << 13);  // Inf or NaN
    const uint32_t normal = ((exponent + kExponentRebase) << 23) | (mantissa << 13);
    const uint32_t is_subnormal = 0u - uint32_t(exponent == 0);
    return bits_to_float(sign | (subnormal & is_subnormal) | ((exponent == 0x1f ? special : normal) & ~is_subnormal));
  }

 private:
  static constexpr uint32_t kInfinity = 0x7c00u, kQuietNaN = 0x7e00u;               // binary16's bits
  static constexpr uint32_t kFloatInfinity = 0x7f800000u, kFloatQuietNaN = 0x7fc00000u;  // float32's
  static constexpr uint32_t kSmallestNormal = 0x38800000u;  // 2^-14 as a float
  static constexpr uint32_t kExponentRebase = 127u - 15u;   // float32's exponent bias less binary16's
};
static_assert(sizeof(Float16) == 2);

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "Float32", ...
inline bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::BFloat16 || t == DType::Float16;
}
// The dtype both operands of a binary op are computed in: Bool < Int64 < Float32 < Float64.
// BFloat16 and Float16 take part in no arithmetic; this throws naming the op and both dtypes.
DType promote_types(DType a, DType b, const char* op);
// Throws "<op>: dtype BFloat16 is storage-only; convert with .to(DType::Float32) first" and similar.
void check_arithmetic_dtype(DType t, const char* op);

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// C++ type <-> DType.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<Float16> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace mg

// Runs the lambda body with `scalar_t` bound to the C++ type of `dtype`.
//   MG_DISPATCH_ALL(t.dtype(), "relu", [&] { loop<scalar_t>(...); });
// The _ALL form covers every dtype (copies, casts, fills); _ARITH the three arithmetic ones.
#define MG_DTYPE_CASE(enum_value, type, ...) \
  case ::mg::DType::enum_value: {            \
    using scalar_t = type;                   \
    return __VA_ARGS__();                    \
  }

#define MG_DISPATCH_ARITH(dtype, op_name, ...)                                              \
  [&] {                                                                                     \
    switch (dtype) {                                                                        \
      MG_DTYPE_CASE(Float32, float, __VA_ARGS__)                                            \
      MG_DTYPE_CASE(Float64, double, __VA_ARGS__)                                           \
      MG_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)                                            \
      default: ::mg::check_arithmetic_dtype(dtype, op_name); MG_ERROR(op_name, ": unsupported dtype ", dtype); \
    }                                                                                       \
  }()

#define MG_DISPATCH_FLOATING(dtype, op_name, ...)                                           \
  [&] {                                                                                     \
    switch (dtype) {                                                                        \
      MG_DTYPE_CASE(Float32, float, __VA_ARGS__)                                            \
      MG_DTYPE_CASE(Float64, double, __VA_ARGS__)                                           \
      default: MG_ERROR(op_name, ": expected a Float32 or Float64 tensor, got ", dtype);    \
    }                                                                                       \
  }()

#define MG_DISPATCH_ALL(dtype, op_name, ...)                                                \
  [&] {                                                                                     \
    switch (dtype) {                                                                        \
      MG_DTYPE_CASE(Float32, float, __VA_ARGS__)                                            \
      MG_DTYPE_CASE(Float64, double, __VA_ARGS__)                                           \
      MG_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)                                            \
      MG_DTYPE_CASE(BFloat16, ::mg::BFloat16, __VA_ARGS__)                                  \
      MG_DTYPE_CASE(Float16, ::mg::Float16, __VA_ARGS__)                                    \
      MG_DTYPE_CASE(Bool, bool, __VA_ARGS__)                                                \
    }                                                                                       \
    MG_ERROR(op_name, ": unknown dtype");                                                   \
  }()
