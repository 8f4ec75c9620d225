// Philox draws (kernels/cpu/random.cpp): the element -> counter mapping recomputed here from
// philox4x32_10, statistics over 100k samples, determinism.
#include <cmath>

#include "multigrad/kernels/kernels.h"
#include "kernels/kernel_test_util.h"

using namespace mg;
using namespace mg::test;
namespace k = mg::kernels;

namespace {

constexpr int64_t kSamples = 100000;

template <class T>
std::vector<T> draw_uniform(int64_t n, PhiloxState state, double low = 0, double high = 1) {
  Tensor t = Tensor::empty({n}, {.dtype = dtype_v<T>});
  k::uniform(t, state, low, high);
  return read<T>(t);
}

template <class T>
std::vector<T> draw_normal(int64_t n, PhiloxState state, double mean = 0, double std = 1) {
  Tensor t = Tensor::empty({n}, {.dtype = dtype_v<T>});
  k::normal(t, state, mean, std);
  return read<T>(t);
}

template <class T>
std::pair<double, double> mean_var(const std::vector<T>& v) {
  double mean = 0, var = 0;
  for (T x : v) mean += double(x);
  mean /= double(v.size());
  for (T x : v) var += (double(x) - mean) * (double(x) - mean);
  return {mean, var / double(v.size())};
}

}  // namespace

TEST_CASE("float32 uniform element i reads word i%4 of block offset + i/4", "[kernels]") {
  const PhiloxState state{1234, 77};
  const std::vector<float> got = draw_uniform<float>(4099, state);  // crosses the parallel grain
  for (int64_t i = 0; i < 4099; ++i) {
    const Philox4 block = philox4x32_10(state.seed, state.offset + uint64_t(i) / 4);
    REQUIRE(got[size_t(i)] == uint_to_unit_float(block.x[i % 4]));
  }
}

TEST_CASE("float64 uniform element i reads words 2(i%2), 2(i%2)+1 of block offset + i/2", "[kernels]") {
  const PhiloxState state{99, 5};
  const std::vector<double> got = draw_uniform<double>(1001, state);
  for (int64_t i = 0; i < 1001; ++i) {
    const Philox4 block = philox4x32_10(state.seed, state.offset + uint64_t(i) / 2);
    const int w = int(i % 2) * 2;
    REQUIRE(got[size_t(i)] == uints_to_unit_double(block.x[w], block.x[w + 1]));
  }
}

TEST_CASE("float32 normal is Box-Muller on the block's word pairs", "[kernels]") {
  const PhiloxState state{7, 0};
  const std::vector<float> got = draw_normal<float>(1003, state);
  for (int64_t i = 0; i < 1003; ++i) {
    const Philox4 block = philox4x32_10(state.seed, uint64_t(i) / 4);
    const int pair = int(i % 4) / 2;
    const double u1 = 1.0 - double(uint_to_unit_float(block.x[2 * pair]));
    const double u2 = double(uint_to_unit_float(block.x[2 * pair + 1]));
    const double r = std::sqrt(-2 * std::log(u1)), a = 2 * M_PI * u2;
    const double want = i % 2 == 0 ? r * std::cos(a) : r * std::sin(a);
    REQUIRE(std::fabs(double(got[size_t(i)]) - want) <= 1e-4 * (1 + std::fabs(want)));
  }
}

TEST_CASE("uniform stays within low <= x < high with the right mean and variance", "[kernels]") {
  const std::vector<float> f = draw_uniform<float>(kSamples, {42, 0}, -2, 3);
  for (float x : f) REQUIRE((x >= -2.0f && x < 3.0f));
  auto [mean, var] = mean_var(f);
  REQUIRE(std::fabs(mean - 0.5) < 0.03);           // std of the mean: 5/sqrt(12 * 1e5) ~ 0.005
  REQUIRE(std::fabs(var - 25.0 / 12) < 0.05);
  const std::vector<double> d = draw_uniform<double>(kSamples, {43, 0});
  for (double x : d) REQUIRE((x >= 0.0 && x < 1.0));
  auto [dmean, dvar] = mean_var(d);
  REQUIRE(std::fabs(dmean - 0.5) < 0.005);
  REQUIRE(std::fabs(dvar - 1.0 / 12) < 0.003);
}

TEST_CASE("normal has the requested mean and standard deviation", "[kernels]") {
  const std::vector<float> f = draw_normal<float>(kSamples, {3, 10}, 1.5, 2.0);
  auto [mean, var] = mean_var(f);
  REQUIRE(std::fabs(mean - 1.5) < 0.03);  // std of the mean: 2/sqrt(1e5) ~ 0.006
  REQUIRE(std::fabs(var - 4.0) < 0.1);
  for (float x : f) REQUIRE(std::isfinite(x));
  const std::vector<double> d = draw_normal<double>(kSamples, {4, 0});
  auto [dmean, dvar] = mean_var(d);
  REQUIRE(std::fabs(dmean) < 0.02);
  REQUIRE(std::fabs(dvar - 1.0) < 0.03);
}

TEST_CASE("a draw depends only on seed and offset", "[kernels]") {
  REQUIRE(draw_uniform<float>(5000, {11, 3}) == draw_uniform<float>(5000, {11, 3}));
  REQUIRE(draw_normal<double>(5000, {11, 3}) == draw_normal<double>(5000, {11, 3}));
  REQUIRE(draw_uniform<float>(64, {11, 3}) != draw_uniform<float>(64, {11, 4}));
  REQUIRE(draw_uniform<float>(64, {11, 3}) != draw_uniform<float>(64, {12, 3}));
  // Offset + 1 skips exactly one block: the first 4 float32 numbers.
  const std::vector<float> a = draw_uniform<float>(12, {11, 3}), b = draw_uniform<float>(8, {11, 4});
  REQUIRE(std::vector<float>(a.begin() + 4, a.end()) == b);
}

TEST_CASE("random_blocks counts the blocks a draw reads", "[kernels]") {
  REQUIRE(k::random_blocks(0, DType::Float32, false) == 0);
  REQUIRE(k::random_blocks(1, DType::Float32, false) == 1);
  REQUIRE(k::random_blocks(4, DType::Float32, true) == 1);
  REQUIRE(k::random_blocks(5, DType::Float32, false) == 2);
  REQUIRE(k::random_blocks(5, DType::Float64, true) == 3);
  REQUIRE(k::random_blocks(6, DType::Float64, false) == 3);
  require_error([] { k::random_blocks(3, DType::Int64, false); }, {"uniform", "Int64"});
}

TEST_CASE("random draws reject integer and strided outputs", "[kernels]") {
  Tensor i = Tensor::empty({4}, {.dtype = DType::Int64});
  require_error([&] { k::uniform(i, {1, 0}, 0, 1); }, {"uniform", "Int64"});
  require_error([&] { k::normal(padded_view(2, 2, DType::Float32), {1, 0}, 0, 1); }, {"normal", "contiguous"});
}
