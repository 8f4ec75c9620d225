// Factories (autograd/factory.cpp): values and dtypes, ranges, Philox draws (determinism and
// statistics), options (device, requires_grad) and their errors.
#include <cmath>

#include "core/cpu_devices_guard.h"
#include "reference.h"

using namespace mg;
using namespace mg::test;

namespace {

struct Moments {
  double mean = 0, std = 0, min = 0, max = 0;
};

Moments moments(const std::vector<double>& v) {
  Moments m{0, 0, v[0], v[0]};
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= double(v.size());
  for (double x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / double(v.size()));
  return m;
}

}  // namespace

TEST_CASE("tensor() keeps values in row-major order and converts to the dtype", "[ops]") {
  Tensor f = tensor(std::vector<float>{1.5f, 2.5f, -3.0f, 4.0f}, {2, 2});
  REQUIRE(f.dtype() == DType::Float32);
  REQUIRE(f.shape() == Shape{2, 2});
  REQUIRE(f.to_vector<float>() == std::vector<float>{1.5f, 2.5f, -3.0f, 4.0f});
  Tensor d = tensor(std::vector<double>{0.1, 0.2}, {2}, {.dtype = DType::Float64});
  REQUIRE(d.to_vector<double>() == std::vector<double>{0.1, 0.2});
  Tensor i = tensor(std::vector<int64_t>{5, -6}, {2}, {.dtype = DType::Int64});
  REQUIRE(i.to_vector<int64_t>() == std::vector<int64_t>{5, -6});
  Tensor cast = tensor(std::vector<double>{2.75, -1.5}, {2}, {.dtype = DType::Int64});
  REQUIRE(cast.to_vector<int64_t>() == std::vector<int64_t>{2, -1});
  REQUIRE(tensor({7}, {}, {.dtype = DType::Int64}).dim() == 0);
}

TEST_CASE("tensor() from braced lists", "[ops]") {
  Tensor f = tensor({1.0, 2.0, 3.0}, {3});
  REQUIRE(f.dtype() == DType::Float32);
  Tensor i = tensor({1, 2, 3, 4}, {2, 2}, {.dtype = DType::Int64});
  REQUIRE(i.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4});
  Tensor b = tensor({0, 3}, {2}, {.dtype = DType::Bool});
  REQUIRE(b.dtype() == DType::Bool);
  REQUIRE(b.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
}

TEST_CASE("tensor() infers Int64 from integers and Float32 from floating values unless a dtype is given", "[ops]") {
  CHECK(tensor({1, 2}, {2}).dtype() == DType::Int64);
  CHECK(tensor(std::vector<int64_t>{1, 2}, {2}).dtype() == DType::Int64);
  CHECK(tensor({1, 2}, {2}, {.requires_grad = false}).dtype() == DType::Int64);  // options without a dtype
  CHECK(tensor({1, 2}, {2}, {.dtype = DType::Float32}).dtype() == DType::Float32);
  CHECK(tensor({1.0, 2.0}, {2}).dtype() == DType::Float32);
  CHECK(tensor(std::vector<float>{1.0f}, {1}).dtype() == DType::Float32);
  const TensorOptions given{.dtype = DType::Float64};
  CHECK(given.dtype.given());
  CHECK_FALSE(TensorOptions{}.dtype.given());
  CHECK(TensorOptions{}.dtype == DType::Float32);
}

TEST_CASE("tensor() with a value count that does not fill the shape names both", "[ops]") {
  require_error([] { tensor({1.0, 2.0, 3.0, 4.0, 5.0}, {2, 3}); }, {"tensor", "5 values", "[2, 3]", "6"});
  require_error([] { tensor({1.0}, {0}); }, {"tensor", "[0]"});
  REQUIRE(tensor(std::vector<float>{}, {0, 4}).shape() == Shape{0, 4});
}

TEST_CASE("zeros, ones and full in every dtype", "[ops]") {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
    INFO("dtype " << dtype);
    REQUIRE(zeros({2, 3}, {.dtype = dtype}).dtype() == dtype);
    require_close(zeros({2, 3}, {.dtype = dtype}), std::vector<double>(6, 0.0), 0, 0);
    require_close(ones({5}, {.dtype = dtype}), std::vector<double>(5, 1.0), 0, 0);
    require_close(full({3, 1}, -4.0, {.dtype = dtype}), std::vector<double>(3, -4.0), 0, 0);
  }
  REQUIRE(full({2}, 1.0, {.dtype = DType::Bool}).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  REQUIRE(ones({2}, {.dtype = DType::BFloat16}).to_vector<float>() == std::vector<float>{1, 1});
  REQUIRE(full({}, 0.25).item<float>() == 0.25f);
  REQUIRE(zeros({4, 0}).numel() == 0);
  REQUIRE(empty({2, 5}, {.dtype = DType::Float64}).shape() == Shape{2, 5});
}

TEST_CASE("zeros_like and ones_like copy shape, dtype and device", "[ops]") {
  CpuDevicesGuard devices(2);
  Tensor t = full({2, 3}, 5.0, {.dtype = DType::Int64, .device = Device("cpu:1")});
  Tensor z = zeros_like(t), o = ones_like(t.transpose(0, 1));
  REQUIRE(z.shape() == Shape{2, 3});
  REQUIRE(z.dtype() == DType::Int64);
  REQUIRE(z.device() == Device("cpu:1"));
  REQUIRE(z.to_vector<int64_t>() == std::vector<int64_t>(6, 0));
  REQUIRE(o.shape() == Shape{3, 2});
  REQUIRE(o.to_vector<int64_t>() == std::vector<int64_t>(6, 1));
}

TEST_CASE("arange(n) counts from zero", "[ops]") {
  REQUIRE(arange(5).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
  REQUIRE(arange(4, {.dtype = DType::Int64}).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  REQUIRE(arange(0).shape() == Shape{0});
  require_error([] { arange(-1); }, {"arange", "-1"});
}

TEST_CASE("arange(start, end, step) has ceil((end - start) / step) elements", "[ops]") {
  require_close(arange(1.0, 2.0, 0.25, {.dtype = DType::Float64}), {1.0, 1.25, 1.5, 1.75}, 0, 0);
  require_close(arange(0.0, 1.0, 0.3, {.dtype = DType::Float64}), {0.0, 0.3, 0.6, 0.9}, 1e-15, 1e-15);
  require_close(arange(5.0, 0.0, -2.0), {5.0, 3.0, 1.0}, 0, 0);
  REQUIRE(arange(3.0, 3.0, 1.0).shape() == Shape{0});
  REQUIRE(arange(-3.0, 4.0, 3.0, {.dtype = DType::Int64}).to_vector<int64_t>() ==
          std::vector<int64_t>{-3, 0, 3});
  require_error([] { arange(0.0, 1.0, 0.0); }, {"arange", "step", "nonzero"});
  require_error([] { arange(0.0, 5.0, -1.0); }, {"arange", "5", "-1"});
}

TEST_CASE("rand and randn repeat under manual_seed and differ between draws", "[ops]") {
  manual_seed(1234);
  auto u1 = rand({100}).to_vector<float>();
  auto n1 = randn({7, 3}, {.dtype = DType::Float64}).to_vector<double>();
  manual_seed(1234);
  auto u2 = rand({100}).to_vector<float>();
  auto n2 = randn({7, 3}, {.dtype = DType::Float64}).to_vector<double>();
  REQUIRE(u1 == u2);
  REQUIRE(n1 == n2);
  auto u3 = rand({100}).to_vector<float>();
  REQUIRE(u3 != u1);
  manual_seed(99);
  REQUIRE(rand({100}).to_vector<float>() != u1);
}

TEST_CASE("rand draws the same numbers on cpu:0 and cpu:1", "[ops]") {
  CpuDevicesGuard devices(2);
  manual_seed(5);
  auto a = randn({33}).to_vector<float>();
  manual_seed(5);
  Tensor b = randn({33}, {.device = Device("cpu:1")});
  REQUIRE(b.device() == Device("cpu:1"));
  REQUIRE(b.to_vector<float>() == a);
}

// A slice's draw against the whole draw's numbers at the slice's positions, for every dim of an
// odd-sized shape, both dtypes, both distributions (a scope's slice for randn), and the generator
// left where the whole draw leaves it.
TEST_CASE("a draw of a slice has the whole draw's numbers there and advances as the whole", "[ops]") {
  const Shape whole{3, 5, 7};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int dim = 0; dim < 3; ++dim) {
      for (const auto& [start, size] : {std::pair<int64_t, int64_t>{0, 1}, {1, 2}, {2, 1}, {0, 3}}) {
        INFO(dtype << ", dim " << dim << ", positions [" << start << ", " << start + size << ")");
        manual_seed(31);
        const Tensor all_u = rand(whole, {.dtype = dtype});
        const Tensor all_z = randn(whole, {.dtype = dtype});
        const PhiloxState after = get_rng_state();
        Shape shape = whole;
        shape[size_t(dim)] = size;
        const DrawSlice slice{dim, start, whole[size_t(dim)]};
        manual_seed(31);
        const Tensor u = rand(shape, {.dtype = dtype}, slice);
        Tensor z;
        {
          DrawSliceScope scope(slice, size);
          z = randn(shape, {.dtype = dtype});
        }
        CHECK(get_rng_state().offset == after.offset);
        CHECK(values(u) == values(all_u.slice(dim, start, start + size).contiguous()));
        CHECK(values(z) == values(all_z.slice(dim, start, start + size).contiguous()));
      }
    }
  }
}

TEST_CASE("a slice outside the whole draw, or a draw that is not the scope's slice, is an error", "[ops]") {
  require_error([] { rand({2, 3}, {}, DrawSlice{1, 2, 4}); }, {"rand", "[2, 5)", "dim 1", "[0, 4)"});
  require_error([] { rand({2, 3}, {}, DrawSlice{2, 0, 4}); }, {"rand", "dim 2", "[2, 3]"});
  DrawSliceScope rows({0, 2, 8}, 3);
  require_error([] { randn({4, 3}); }, {"randn", "[4, 3]", "3 positions along dim 0", "batch of 8"});
  require_error([] { rand({3, 2}, {}, DrawSlice{1, 0, 4}); }, {"rand", "slice along dim 1", "along dim 0"});
  require_error([] { DrawSliceScope bad({0, 6, 8}, 3); }, {"DrawSliceScope", "[6, 9)", "[0, 8)"});
}

TEST_CASE("rand is uniform with 0 <= x < 1", "[ops]") {
  manual_seed(7);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    INFO("dtype " << dtype);
    Tensor u = rand({20001}, {.dtype = dtype});
    REQUIRE(u.dtype() == dtype);
    Moments m = moments(values(u));
    REQUIRE(m.min >= 0.0);
    REQUIRE(m.max < 1.0);
    REQUIRE(std::abs(m.mean - 0.5) < 0.01);
    REQUIRE(std::abs(m.std - std::sqrt(1.0 / 12.0)) < 0.01);
  }
}

TEST_CASE("randn is standard normal", "[ops]") {
  manual_seed(8);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    INFO("dtype " << dtype);
    Moments m = moments(values(randn({20001}, {.dtype = dtype})));
    REQUIRE(std::abs(m.mean) < 0.03);
    REQUIRE(std::abs(m.std - 1.0) < 0.03);
    REQUIRE(m.max > 3.0);
    REQUIRE(m.min < -3.0);
  }
  REQUIRE(randn({0}).numel() == 0);
}

TEST_CASE("rand and randn accept only Float32 and Float64", "[ops]") {
  require_error([] { rand({2}, {.dtype = DType::Int64}); }, {"rand", "Int64"});
  require_error([] { randn({2}, {.dtype = DType::BFloat16}); }, {"randn", "BFloat16"});
  require_error([] { rand({2}, {.dtype = DType::Float16}); }, {"rand", "Float16"});
}

TEST_CASE("requires_grad is stored and only allowed on floating dtypes", "[ops]") {
  REQUIRE(zeros({2}, {.requires_grad = true}).requires_grad());
  REQUIRE_FALSE(zeros({2}).requires_grad());
  REQUIRE(tensor({1.0}, {1}, {.dtype = DType::Float64, .requires_grad = true}).requires_grad());
  REQUIRE(randn({3}, {.requires_grad = true}).requires_grad());
  require_error([] { zeros({2}, {.dtype = DType::Int64, .requires_grad = true}); },
                {"zeros", "floating", "Int64"});
  require_error([] { tensor({1}, {1}, {.dtype = DType::Int64, .requires_grad = true}); },
                {"tensor", "Int64"});
}

TEST_CASE("a factory on a missing device names it", "[ops]") {
  require_error([] { zeros({2}, {.device = Device("cuda:7")}); }, {"cuda:7"});
  require_error([] { tensor({1.0}, {1}, {.device = Device("cuda:7")}); }, {"cuda:7"});
  require_error([] { zeros({0}, {.device = Device("cpu:9")}); }, {"cpu:9"});
}

TEST_CASE("factories place tensors on the requested CPU device", "[ops]") {
  CpuDevicesGuard devices(2);
  const Device cpu1("cpu:1");
  REQUIRE(ones({2}, {.device = cpu1}).device() == cpu1);
  REQUIRE(arange(3, {.device = cpu1}).device() == cpu1);
  Tensor t = tensor({1.0, 2.0}, {2}, {.dtype = DType::Float64, .device = cpu1});
  REQUIRE(t.device() == cpu1);
  REQUIRE(t.to_vector<double>() == std::vector<double>{1.0, 2.0});
}
