// tests/cuda/test_cuda_random.cpp — kernels/cuda/random.cu: the same Philox draws as the CPU.
#include <catch2/catch.hpp>

#include <vector>

#include "cuda/cuda_test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// Draws the same shape on the CPU and on cuda:0 from the same seed.
template <class Draw>
std::pair<Tensor, Tensor> draw_both(Draw draw, uint64_t seed) {
  manual_seed(seed);
  Tensor on_cpu = draw(Device("cpu"));
  manual_seed(seed);
  Tensor on_gpu = draw(gpu());
  REQUIRE(on_gpu.device() == gpu());
  return {on_gpu, on_cpu};
}

// randn goes through logf/sinf/cosf, whose CUDA versions differ from libm's in the last ulp or
// two; where cos crosses 0 that is a relative error without bound but an absolute one of a few
// 1e-7 times the radius (< 6 for 24-bit uniforms), hence the absolute 1e-5.
constexpr double kNormalRtol = 1e-5, kNormalAtol = 1e-5;

}  // namespace

TEST_CASE("cuda: rand equals the CPU draw bit for bit", "[cuda]") {
  for (int64_t n : odd_sizes()) {
    INFO("n = " << n);
    for (DType dtype : {DType::Float32, DType::Float64}) {
      INFO(dtype);
      auto [got, want] = draw_both([&](Device d) { return rand({n}, {.dtype = dtype, .device = d}); }, 7);
      expect_equal(got, want);
    }
  }
}

// A slice's draw (core/random.h's DrawWindow in the kernel): rows of the whole draw a stride apart.
// A kernel that ignored the window would give the whole draw's first elements.
TEST_CASE("cuda: a slice of a draw equals the CPU's slice bit for bit", "[cuda]") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    INFO(dtype);
    for (int dim : {0, 1, 2}) {
      INFO("dim " << dim);
      const Shape whole{3, 37, 5};
      Shape shape = whole;
      shape[size_t(dim)] = 2;
      const DrawSlice slice{dim, 1, whole[size_t(dim)]};
      auto [got, want] = draw_both([&](Device d) { return rand(shape, {.dtype = dtype, .device = d}, slice); }, 9);
      expect_equal(got, want);
      manual_seed(9);
      expect_equal(got, rand(whole, {.dtype = dtype}).slice(dim, 1, 3).contiguous());
      auto [got_n, want_n] = draw_both(
          [&](Device d) {
            DrawSliceScope scope(slice, 2);
            return randn(shape, {.dtype = dtype, .device = d});
          },
          10);
      expect_close(got_n, want_n, kNormalRtol, kNormalAtol);
    }
  }
}

TEST_CASE("cuda: randn equals the CPU draw up to the math library", "[cuda]") {
  for (int64_t n : odd_sizes()) {
    INFO("n = " << n);
    auto [got, want] = draw_both([&](Device d) { return randn({n}, {.device = d}); }, 11);
    expect_close(got, want, kNormalRtol, kNormalAtol);
    auto [got64, want64] = draw_both([&](Device d) { return randn({n}, {.dtype = DType::Float64, .device = d}); }, 12);
    expect_close(got64, want64, 1e-12, 1e-12);
  }
}

TEST_CASE("cuda: successive draws advance the generator as on the CPU", "[cuda]") {
  auto draws = [](Device d) {
    Tensor a = rand({5, 7}, {.device = d});
    Tensor b = randn({3}, {.dtype = DType::Float64, .device = d});
    Tensor c = rand({1}, {.device = d});
    return cat({a.flatten(), b.to(DType::Float32), c});
  };
  auto [got, want] = draw_both(draws, 123);
  expect_close(got, want, kNormalRtol, kNormalAtol);
  // Mixing devices does not disturb the sequence: each draw takes the next counter blocks.
  manual_seed(5);
  Tensor first = rand({10});
  Tensor second = rand({10}, {.device = gpu()});
  manual_seed(5);
  Tensor first_again = rand({10}, {.device = gpu()});
  Tensor second_again = rand({10});
  expect_equal(first_again, first.to(gpu()));
  expect_equal(second_again, second.to(Device("cpu")));
}

TEST_CASE("cuda: rand lies in 0..1 and randn has unit moments", "[cuda]") {
  manual_seed(3);
  Tensor u = rand({1 << 20}, {.device = gpu()});
  REQUIRE(min(u).item<double>() >= 0.0);
  REQUIRE(max(u).item<double>() < 1.0);
  Tensor z = randn({1 << 20}, {.device = gpu()});
  REQUIRE(std::abs(mean(z).item<double>()) < 0.01);
  REQUIRE(std::abs(mean(z * z).item<double>() - 1.0) < 0.01);
}
