// tests/cuda/test_cuda_reduce.cpp — kernels/cuda/reduce.cu and softmax.cu against the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "cuda/cuda_test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// Sums are compared against the sum of magnitudes, not against the sum itself: the CPU adds
// Float32 in float64 and CUDA in float32 along a tree, and the two differ by up to about
// log2(n) eps32 sum|x| — which is large relative to a sum that cancels to near 0.
// `reduce` is sum or mean over the same dims on both devices.
void check_sum_like(const Op& reduce, const Tensor& x, double rel_to_magnitude) {
  Tensor want = reduce({x});
  Tensor got = reduce({x.to(gpu())});
  Tensor magnitude = reduce({abs(x)});
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  std::vector<double> g = values(got), w = values(want), m = values(magnitude);
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < w.size(); ++i) {
    bool ok = std::isnan(w[i]) ? std::isnan(g[i]) : std::abs(g[i] - w[i]) <= rel_to_magnitude * m[i] + 1e-12;
    if (!ok && bad++ == 0) first << "index " << i << ": got " << g[i] << ", want " << w[i];
  }
  INFO(bad << " of " << w.size() << " differ; first: " << first.str());
  REQUIRE(bad == 0);
}

constexpr double kFloat32SumTolerance = 1e-5;
constexpr double kFloat64SumTolerance = 1e-13;

}  // namespace

TEST_CASE("cuda: sum and mean of every element at odd sizes", "[cuda]") {
  for (int64_t n : odd_sizes()) {
    INFO("n = " << n);
    Tensor x = cpu_input({n}, DType::Float32, 40);
    check_sum_like([](const auto& in) { return sum(in[0]); }, x, kFloat32SumTolerance);
    check_sum_like([](const auto& in) { return mean(in[0]); }, x, kFloat32SumTolerance);
  }
}

TEST_CASE("cuda: sum and mean over dims of non-contiguous inputs, short and long rows", "[cuda]") {
  // (5, 3000, 7) permuted: reductions over the 3000-long dim take the block-per-row kernel,
  // the others the warp-per-row one.
  Tensor x = cpu_input({7, 3000, 5}, DType::Float32, 41);
  for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {-1}, {0, 2}, {1, 2}}) {
    // keepdim changes only the shape: tried on the two-dim reductions.
    for (bool keepdim : dims.size() == 2 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
      INFO("dims size " << dims.size() << " first " << dims[0] << " keepdim " << keepdim);
      check_sum_like([&](const auto& in) { return sum(in[0].permute({2, 1, 0}), dims, keepdim); }, x,
                     kFloat32SumTolerance);
      check_sum_like([&](const auto& in) { return mean(in[0].permute({2, 1, 0}), dims, keepdim); }, x,
                     kFloat32SumTolerance);
    }
  }
}

TEST_CASE("cuda: row reductions and softmax cover more rows than the grid has blocks", "[cuda]") {
  // The grids hold kBlocksPerSm = 8 blocks per SM (cuda_utils.cuh): 1056 on an H200, 32 on the
  // simulator. Short rows go 8 to a block, long rows one to a block: with these counts every
  // kernel loops over its rows, twice and a bit. (Before, a grid of unsigned(rows) blocks
  // covered each row once, and from 2^32 rows on only rows mod 2^32.)
  const int64_t blocks = int64_t(cuda_device_info(0).sm_count) * 8;
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{16 * blocks + 3, 3}, {2 * blocks + 3, 1100}}) {
    INFO("rows = " << rows << ", cols = " << cols);
    Tensor x = cpu_input({rows, cols}, DType::Float32, 51);
    check_sum_like([](const auto& in) { return sum(in[0], {1}); }, x, kFloat32SumTolerance);
    check_sum_like([](const auto& in) { return mean(in[0], {1}); }, x, kFloat32SumTolerance);
    check_exact([](const auto& in) { return max(in[0], {1}); }, {x});
    check_exact([](const auto& in) { return min(in[0], {1}); }, {x});
    check_exact([](const auto& in) { return argmax(in[0], 1); }, {x});
    check_matches_cpu([](const auto& in) { return softmax(in[0], 1); }, {x});
    check_matches_cpu([](const auto& in) { return log_softmax(in[0], 1); }, {x});
  }
}

TEST_CASE("cuda: rows longer than one part reduce in parts, max, min and NaN included", "[cuda]") {
  // kSplitCols = 32768: 100003 elements are three whole parts and a short one; 2 rows of them
  // make partials of two rows.
  for (const Shape& shape : std::vector<Shape>{{100003}, {2, 100003}}) {
    INFO("shape " << to_string(shape));
    Tensor x = cpu_input(shape, DType::Float32, 52);
    check_sum_like([](const auto& in) { return sum(in[0], {-1}); }, x, kFloat32SumTolerance);
    check_sum_like([](const auto& in) { return mean(in[0], {-1}); }, x, kFloat32SumTolerance);
    check_exact([](const auto& in) { return max(in[0], {-1}); }, {x});
    check_exact([](const auto& in) { return min(in[0], {-1}); }, {x});
    Tensor d = cpu_input(shape, DType::Float64, 53);
    check_sum_like([](const auto& in) { return sum(in[0], {-1}); }, d, kFloat64SumTolerance);
    Tensor i = cpu_input(shape, DType::Int64, 54, 1000.0);
    check_exact([](const auto& in) { return sum(in[0], {-1}); }, {i});
  }
  std::vector<double> v = values(cpu_input({100003}, DType::Float64, 55));
  v[100001] = std::numeric_limits<double>::quiet_NaN();  // in the short last part
  Tensor with_nan = tensor(v, {100003});
  check_exact([](const auto& in) { return max(in[0]); }, {with_nan});
  check_exact([](const auto& in) { return min(in[0]); }, {with_nan});
}

TEST_CASE("cuda: float64 and Int64 sums", "[cuda]") {
  Tensor d = cpu_input({13, 2049}, DType::Float64, 42);
  check_sum_like([](const auto& in) { return sum(in[0], {1}); }, d, kFloat64SumTolerance);
  check_sum_like([](const auto& in) { return mean(in[0], {0}); }, d, kFloat64SumTolerance);
  Tensor i = cpu_input({13, 2049}, DType::Int64, 43, 1000.0);
  check_exact([](const auto& in) { return sum(in[0], {1}); }, {i});
  check_exact([](const auto& in) { return sum(in[0]); }, {i});
}

TEST_CASE("cuda: max and min are exact, and NaN wins", "[cuda]") {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
    INFO(dtype);
    Tensor x = cpu_input({9, 1500}, dtype, 44);
    for (int64_t dim : {0, 1}) {
      check_exact([dim](const auto& in) { return max(in[0], {dim}); }, {x});
      check_exact([dim](const auto& in) { return min(in[0], {dim}, true); }, {x});
    }
    check_exact([](const auto& in) { return max(in[0]); }, {x});
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor with_nan = tensor({1.0, nan, 3.0, -1.0, -2.0, -3.0}, {2, 3});
  check_exact([](const auto& in) { return max(in[0], {1}); }, {with_nan});
  check_exact([](const auto& in) { return min(in[0], {1}); }, {with_nan});
}

TEST_CASE("cuda: argmax takes the first maximum, NaN counting as the maximum", "[cuda]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor ties = tensor({1.0, 5.0, 5.0, 2.0, /**/ 7.0, 7.0, 7.0, 7.0, /**/ 0.0, nan, 9.0, nan}, {3, 4});
  Tensor got = check_matches_cpu([](const auto& in) { return argmax(in[0], 1); }, {ties}, 0, 0);
  REQUIRE(got.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  for (int64_t cols : {1, 7, 1024, 1025, 5000}) {  // warp-per-row up to 1024, block-per-row after
    INFO("cols = " << cols);
    Tensor x = cpu_input({11, cols}, DType::Float32, 45);
    check_exact([](const auto& in) { return argmax(in[0], 1); }, {x});
    check_exact([](const auto& in) { return argmax(in[0], 0, true); }, {x});
    Tensor i = cpu_input({11, cols}, DType::Int64, 46);  // many ties
    check_exact([](const auto& in) { return argmax(in[0], -1); }, {i});
  }
}

TEST_CASE("cuda: softmax and log_softmax", "[cuda]") {
  // CUDA's expf/logf differ from libm's in the last ulp: still within 1e-5 relative.
  for (int64_t cols : {1, 7, 33, 1023, 5000}) {
    INFO("cols = " << cols);
    Tensor x = cpu_input({6, cols}, DType::Float32, 47, 5.0);
    check_matches_cpu([](const auto& in) { return softmax(in[0], 1); }, {x});
    check_matches_cpu([](const auto& in) { return log_softmax(in[0], -1); }, {x});
    check_matches_cpu([](const auto& in) { return softmax(in[0], 0); }, {x});
  }
  // Large logits: the row max is subtracted, so nothing overflows.
  Tensor big = cpu_input({4, 100}, DType::Float32, 48, 500.0);
  Tensor s = check_matches_cpu([](const auto& in) { return softmax(in[0], 1); }, {big});
  for (double v : values(s)) REQUIRE(std::isfinite(v));
  check_matches_cpu([](const auto& in) { return log_softmax(in[0], 1); }, {big});
  Tensor d = cpu_input({5, 777}, DType::Float64, 49, 5.0);
  check_matches_cpu([](const auto& in) { return softmax(in[0], 1); }, {d}, 1e-12, 1e-15);
  check_matches_cpu([](const auto& in) { return log_softmax(in[0].transpose(0, 1), 0); }, {d}, 1e-12, 1e-15);
}

TEST_CASE("cuda: reductions of empty tensors", "[cuda]") {
  Tensor e = cpu_input({0, 5}, DType::Float32, 50);
  check_exact([](const auto& in) { return sum(in[0], {0}); }, {e});   // zeros (5)
  check_exact([](const auto& in) { return mean(in[0], {0}); }, {e});  // NaN (5)
  check_exact([](const auto& in) { return sum(in[0], {1}); }, {e});   // shape (0)
  check_exact([](const auto& in) { return sum(in[0]); }, {e});
  check_exact([](const auto& in) { return softmax(in[0], 1); }, {e});
}
