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
