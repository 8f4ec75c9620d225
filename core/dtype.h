// core/dtype.h — element types.
//
// Float32, Float64 and Int64 support every op. Bool is what comparisons return (1 byte, 0 or 1).
// BFloat16 is storage only: tensors can hold it and convert to and from it with .to(DType);
// arithmetic on it is an error that says to convert first.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>

#include "core/error.h"
#include "core/macros.h"

namespace mg {

enum class DType : uint8_t { Float32, Float64, Int64, BFloat16, Bool };

// A float's IEEE bits and back (host and device).
MG_HD uint32_t float_to_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
MG_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
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

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "Float32", ...
inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64 || t == DType::BFloat16; }
// The dtype both operands of a binary op are computed in: Bool < Int64 < Float32 < Float64.
// BFloat16 takes part in no arithmetic; this throws naming the op and both dtypes.
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
      MG_DTYPE_CASE(Bool, bool, __VA_ARGS__)                                                \
    }                                                                                       \
    MG_ERROR(op_name, ": unknown dtype");                                                   \
  }()
