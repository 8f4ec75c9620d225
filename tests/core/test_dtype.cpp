// tests/core/test_dtype.cpp — dtype sizes, names, promotion, the arithmetic check, and bfloat16
// conversion (round to nearest even, NaN, infinities) against an independent reference.
#include <cmath>
#include <cstring>
#include <limits>

#include "test_util.h"

using mg::BFloat16;
using mg::DType;
using mg::test::require_error;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Nearest bfloat16 of a finite float, by comparing the distances to the two bfloat16 values
// around it in double precision; ties go to the even bit pattern.
uint16_t reference_round(float f) {
  uint16_t below = uint16_t(bits_of(f) >> 16);  // truncation: the neighbour toward zero
  uint16_t above = uint16_t(below + 1);         // the neighbour away from zero
  double d_below = std::abs(double(f) - double(BFloat16::to_float(below)));
  double d_above = std::abs(double(f) - double(BFloat16::to_float(above)));
  if (d_below < d_above) return below;
  if (d_above < d_below) return above;
  return (below & 1) == 0 ? below : above;
}

}  // namespace

TEST_CASE("dtype sizes and names", "[core][dtype]") {
  CHECK(mg::dtype_size(DType::Float32) == 4);
  CHECK(mg::dtype_size(DType::Float64) == 8);
  CHECK(mg::dtype_size(DType::Int64) == 8);
  CHECK(mg::dtype_size(DType::BFloat16) == 2);
  CHECK(mg::dtype_size(DType::Bool) == 1);
  CHECK(std::string(mg::dtype_name(DType::Float32)) == "Float32");
  CHECK(std::string(mg::dtype_name(DType::Float64)) == "Float64");
  CHECK(std::string(mg::dtype_name(DType::Int64)) == "Int64");
  CHECK(std::string(mg::dtype_name(DType::BFloat16)) == "BFloat16");
  CHECK(std::string(mg::dtype_name(DType::Bool)) == "Bool");
  std::ostringstream os;
  os << DType::Int64;
  CHECK(os.str() == "Int64");
  CHECK(mg::is_floating(DType::BFloat16));
  CHECK_FALSE(mg::is_floating(DType::Int64));
  CHECK(mg::dtype_v<float> == DType::Float32);
  CHECK(mg::dtype_v<int64_t> == DType::Int64);
  CHECK(mg::dtype_v<bool> == DType::Bool);
}

TEST_CASE("promote_types follows Bool < Int64 < Float32 < Float64", "[core][dtype]") {
  const DType order[] = {DType::Bool, DType::Int64, DType::Float32, DType::Float64};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      INFO(order[i] << " with " << order[j]);
      CHECK(mg::promote_types(order[i], order[j], "add") == order[std::max(i, j)]);
    }
  }
}

TEST_CASE("promote_types refuses BFloat16, naming the op and both dtypes", "[core][dtype]") {
  require_error([] { mg::promote_types(DType::Float32, DType::BFloat16, "mul"); },
                {"mul", "Float32", "BFloat16", "storage-only", ".to(DType::Float32)"});
  require_error([] { mg::promote_types(DType::BFloat16, DType::BFloat16, "add"); }, {"add:", "BFloat16"});
}

TEST_CASE("check_arithmetic_dtype accepts numbers and explains BFloat16 and Bool", "[core][dtype]") {
  mg::check_arithmetic_dtype(DType::Float32, "relu");
  mg::check_arithmetic_dtype(DType::Float64, "relu");
  mg::check_arithmetic_dtype(DType::Int64, "relu");
  require_error([] { mg::check_arithmetic_dtype(DType::BFloat16, "relu"); },
                {"relu: dtype BFloat16 is storage-only; convert with .to(DType::Float32) first"});
  require_error([] { mg::check_arithmetic_dtype(DType::Bool, "exp"); }, {"exp:", "numeric dtype", "Bool"});
}

TEST_CASE("BFloat16 keeps exactly representable values", "[core][dtype][bf16]") {
  for (float f : {0.0f, 1.0f, -2.0f, 0.5f, 3.0f, 1.5f, -0.15625f, 65536.0f, 1.0f / 1024}) {
    INFO(f);
    CHECK(float(BFloat16(f)) == f);
  }
  CHECK(BFloat16(1.0f).bits == 0x3F80);
  CHECK(BFloat16(-2.0f).bits == 0xC000);
  CHECK(BFloat16(-0.0f).bits == 0x8000);
}

TEST_CASE("BFloat16 rounds to nearest, ties to even", "[core][dtype][bf16]") {
  CHECK(BFloat16(float_of(0x3F808000u)).bits == 0x3F80);  // halfway, even neighbour below
  CHECK(BFloat16(float_of(0x3F818000u)).bits == 0x3F82);  // halfway, even neighbour above
  CHECK(BFloat16(float_of(0x3F808001u)).bits == 0x3F81);  // just above halfway
  CHECK(BFloat16(float_of(0x3F807FFFu)).bits == 0x3F80);  // just below halfway
  CHECK(BFloat16(float_of(0xBF818000u)).bits == 0xBF82);  // negative: symmetric
  CHECK(BFloat16(float_of(0x3FFF8000u)).bits == 0x4000);  // rounding carries into the exponent
  CHECK(BFloat16(std::numeric_limits<float>::max()).bits == 0x7F80);  // beyond the largest bf16: inf
}

TEST_CASE("BFloat16 matches a distance-based rounding reference", "[core][dtype][bf16]") {
  uint64_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t u = uint32_t(state >> 32);
    float f = float_of(u);
    // Finite values whose neighbour away from zero is still finite.
    if (!std::isfinite(f) || (u & 0x7FFF0000u) == 0x7F7F0000u) continue;
    INFO("bits 0x" << std::hex << u);
    REQUIRE(BFloat16(f).bits == reference_round(f));
  }
}

TEST_CASE("BFloat16 keeps infinities and NaN", "[core][dtype][bf16]") {
  float inf = std::numeric_limits<float>::infinity();
  CHECK(BFloat16(inf).bits == 0x7F80);
  CHECK(BFloat16(-inf).bits == 0xFF80);
  CHECK(std::isnan(float(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low 16 bits must not truncate to infinity.
  CHECK(std::isnan(float(BFloat16(float_of(0x7F800001u)))));
  CHECK(std::isnan(float(BFloat16(float_of(0xFF800001u)))));
  CHECK(std::isnan(float(BFloat16(float_of(0x7FFFFFFFu)))));
}

TEST_CASE("BFloat16 round-trips every non-NaN bit pattern", "[core][dtype][bf16]") {
  int checked = 0;
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    float f = BFloat16::to_float(uint16_t(b));
    CHECK(bits_of(f) == b << 16);  // widening is exact: the low half is zero
    if (std::isnan(f)) continue;
    if (BFloat16(f).bits != b) {
      FAIL_CHECK("pattern 0x" << std::hex << b << " came back as 0x" << BFloat16(f).bits);
    }
    ++checked;
  }
  CHECK(checked == 65536 - 2 * 127);  // 2 signs x (2^7 - 1) non-zero mantissas with exponent 0xFF
}

// kernels::copy's Float32 -> BFloat16 cast (Tensor::to) rounds as BFloat16 does, element by element,
// on the contiguous path (the vector pass) and the strided one, NaN, infinities and ties included.
TEST_CASE("Tensor to(BFloat16) rounds every element as BFloat16 does, contiguous or strided", "[core][dtype][bf16]") {
  std::vector<float> values;
  uint64_t state = 777;
  for (int i = 0; i < 4099; ++i) {  // an odd count: a vector loop's tail
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    values.push_back(float_of(uint32_t(state >> 32)));
  }
  for (uint32_t u : {0x3F808000u, 0x3F818000u, 0x7F800001u, 0xFF800000u, 0x7F7FFFFFu, 0x80000000u})
    values.push_back(float_of(u));
  const mg::Tensor x = mg::tensor(values, {int64_t(values.size())});
  const auto bits_of_cast = [](const mg::Tensor& t) {
    const mg::Tensor b = t.to(DType::BFloat16).contiguous();
    const BFloat16* p = b.data<BFloat16>();
    std::vector<uint16_t> out;
    for (int64_t i = 0; i < b.numel(); ++i) out.push_back(p[i].bits);
    return out;
  };
  const auto want = [](const std::vector<float>& v) {
    std::vector<uint16_t> out;
    for (float f : v) out.push_back(BFloat16(f).bits);
    return out;
  };
  CHECK(bits_of_cast(x) == want(values));
  std::vector<float> every_other;
  for (size_t i = 0; i < values.size(); i += 2) every_other.push_back(values[i]);
  CHECK(bits_of_cast(x.slice(0, 0, x.size(0), 2)) == want(every_other));
}

// ---- Float16 (IEEE binary16) ----

namespace {

using mg::Float16;

// A binary16 pattern's value from its fields, in double: (-1)^s 2^(e-15) 1.m, or 2^-14 0.m when e = 0.
double reference_value(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  const double magnitude = exponent == 0 ? std::ldexp(double(mantissa), -24)
                                         : std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  return sign ? -magnitude : magnitude;
}

// Nearest binary16 of a float below 65520 in magnitude: the two finite patterns around it (the
// positive ones are ordered as their values), the nearer by distance in double, ties to the even one.
uint16_t reference_round_half(float f) {
  const double magnitude = std::abs(double(f));
  uint16_t below = 0;  // the largest positive pattern <= magnitude, by bisection over 0 .. 0x7BFF
  for (uint16_t step = 0x4000; step > 0; step >>= 1)
    if (below + step <= 0x7BFF && reference_value(uint16_t(below + step)) <= magnitude) below = uint16_t(below + step);
  const uint16_t above = below == 0x7BFF ? below : uint16_t(below + 1);
  const double d_below = magnitude - reference_value(below), d_above = reference_value(above) - magnitude;
  uint16_t nearest = d_below < d_above ? below : d_above < d_below ? above : (below & 1) == 0 ? below : above;
  if (below == 0x7BFF) nearest = below;  // 65504 <= |f| < 65520
  return uint16_t(nearest | (std::signbit(f) ? 0x8000 : 0));
}

}  // namespace

TEST_CASE("Float16 has its size, name and storage-only errors", "[core][dtype][fp16]") {
  CHECK(mg::dtype_size(DType::Float16) == 2);
  CHECK(std::string(mg::dtype_name(DType::Float16)) == "Float16");
  CHECK(mg::is_floating(DType::Float16));
  CHECK(mg::dtype_v<Float16> == DType::Float16);
  require_error([] { mg::promote_types(DType::Float16, DType::Float32, "sub"); },
                {"sub", "Float16", "Float32", "Float16 is storage-only", ".to(DType::Float32)"});
  require_error([] { mg::promote_types(DType::BFloat16, DType::Float16, "add"); }, {"add:", "BFloat16", "Float16"});
  require_error([] { mg::check_arithmetic_dtype(DType::Float16, "exp"); },
                {"exp: dtype Float16 is storage-only; convert with .to(DType::Float32) first"});
}

TEST_CASE("Float16 widens every pattern to its value and round-trips every non-NaN one", "[core][dtype][fp16]") {
  int nans = 0;
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = Float16::to_float(uint16_t(h));
    INFO("pattern 0x" << std::hex << h);
    if (((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF) != 0) {  // NaN: comes back quiet, payload and sign kept
      ++nans;
      REQUIRE(std::isnan(f));
      REQUIRE(Float16(f).bits == (h | 0x200));
      continue;
    }
    if (((h >> 10) & 0x1F) == 0x1F) REQUIRE(f == ((h & 0x8000) ? -INFINITY : INFINITY));
    else REQUIRE(double(f) == reference_value(uint16_t(h)));
    REQUIRE(std::signbit(f) == bool(h & 0x8000));
    REQUIRE(Float16(f).bits == h);
  }
  CHECK(nans == 2 * 1023);
}

TEST_CASE("Float16 rounds to nearest, ties to even, subnormals and overflow included", "[core][dtype][fp16]") {
  CHECK(Float16(1.0f).bits == 0x3C00);
  CHECK(Float16(-2.0f).bits == 0xC000);
  CHECK(Float16(-0.0f).bits == 0x8000);
  CHECK(Float16(65504.0f).bits == 0x7BFF);
  CHECK(Float16(65519.99f).bits == 0x7BFF);         // below the midpoint to 2^16: the largest value
  CHECK(Float16(65520.0f).bits == 0x7C00);          // the midpoint: the even neighbour, 2^16, is infinity
  CHECK(Float16(-1e9f).bits == 0xFC00);
  CHECK(Float16(std::ldexp(1.0f, -24)).bits == 0x0001);  // the smallest subnormal
  CHECK(Float16(std::ldexp(1.0f, -25)).bits == 0x0000);  // half of it: the tie goes to even, zero
  CHECK(Float16(std::ldexp(3.0f, -26)).bits == 0x0001);  // three quarters of it
  CHECK(Float16(std::ldexp(3.0f, -25)).bits == 0x0002);  // 1.5 steps: the tie goes to the even 2
  CHECK(Float16(1.0f + std::ldexp(1.0f, -11)).bits == 0x3C00);  // halfway above 1: even, 1
  CHECK(Float16(1.0f + std::ldexp(3.0f, -11)).bits == 0x3C02);  // halfway above 1 + 2^-10: even, 1 + 2^-9
  CHECK(Float16(std::ldexp(2047.0f, -25)).bits == 0x0400);  // the largest subnormal's upper half: 2^-14
  CHECK(Float16(INFINITY).bits == 0x7C00);
  CHECK(Float16(-INFINITY).bits == 0xFC00);
  CHECK(Float16(float_of(0x7F800001u)).bits == 0x7E00);  // a NaN with its payload only in the low bits stays NaN
  CHECK(Float16(float_of(0xFFC02000u)).bits == 0xFE01);  // quiet, the payload's top 10 bits and the sign kept
}

TEST_CASE("Float16 matches a distance-based rounding reference at every tie and at random", "[core][dtype][fp16]") {
  // Every midpoint between neighbouring finite binary16 values (float holds it exactly), and the
  // floats just below and above it.
  for (uint16_t h = 0; h < 0x7BFF; ++h) {
    const float mid = float((reference_value(h) + reference_value(uint16_t(h + 1))) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), -mid}) {
      INFO("float bits 0x" << std::hex << bits_of(f));
      REQUIRE(Float16(f).bits == reference_round_half(f));
    }
  }
  uint64_t state = 2024;
  for (int i = 0; i < 200000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    // Exponents from 2^-30 to 2^16: the subnormal, normal and overflowing ranges.
    const uint32_t u = (uint32_t(state >> 32) & 0x807FFFFFu) | (uint32_t(97 + (state >> 20) % 47) << 23);
    const float f = float_of(u);
    INFO("float bits 0x" << std::hex << u);
    if (std::abs(f) >= 65520.0f) REQUIRE(Float16(f).bits == (std::signbit(f) ? 0xFC00 : 0x7C00));
    else REQUIRE(Float16(f).bits == reference_round_half(f));
  }
}
