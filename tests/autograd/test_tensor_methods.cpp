// The compute methods of mg::Tensor (autograd/tensor_methods.cpp) against naive loops: each
// must forward to its functional op with its arguments in order.
#include <cmath>

#include "reference.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("Tensor math methods match libm", "[ops]") {
  Array a = random_array({3, 5}, 90);
  Array pos = map(a, [](double x) { return x + 2; });
  Tensor t = to_tensor(a, DType::Float64), p = to_tensor(pos, DType::Float64);
  auto near = [](const Tensor& got, const Array& src, double (*f)(double)) {
    require_close(got, map(src, [f](double x) { return f(x); }).data, 1e-12, 1e-12);
  };
  near(t.neg(), a, [](double x) { return -x; });
  near(t.exp(), a, [](double x) { return std::exp(x); });
  near(p.log(), pos, [](double x) { return std::log(x); });
  near(p.sqrt(), pos, [](double x) { return std::sqrt(x); });
  near(t.abs(), a, [](double x) { return std::abs(x); });
  near(t.relu(), a, [](double x) { return x > 0 ? x : 0.0; });
  near(t.sigmoid(), a, [](double x) { return 1 / (1 + std::exp(-x)); });
  near(t.tanh(), a, [](double x) { return std::tanh(x); });
  near(t.gelu(), a,
       [](double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); });
  near(p.pow(1.5), pos, [](double x) { return std::pow(x, 1.5); });
}

TEST_CASE("Tensor reduction and shape methods pass their arguments through", "[ops]") {
  Tensor t = arange(24, {.dtype = DType::Float64}).reshape({2, 3, 4});
  REQUIRE(t.sum().item<double>() == 276.0);
  REQUIRE(t.sum({0, 2}).to_vector<double>() == std::vector<double>{60, 92, 124});
  REQUIRE(t.sum({2}, true).shape() == Shape{2, 3, 1});
  REQUIRE(t.mean().item<double>() == 11.5);
  REQUIRE(t.mean({1}, true).shape() == Shape{2, 1, 4});
  REQUIRE(t.mean({1}).to_vector<double>()[5] == 17.0);  // mean of t[1, :, 1] = (13 + 17 + 21) / 3
  REQUIRE(t.view({6, 4}).shape() == Shape{6, 4});
  REQUIRE(t.permute({2, 0, 1}).shape() == Shape{4, 2, 3});
  REQUIRE(t.slice(2, 1, 4, 2).to_vector<double>()[1] == 3.0);
  REQUIRE(t.slice(0, 1, 2).expand({5, 3, 4}).shape() == Shape{5, 3, 4});
  REQUIRE(t.flatten(0, 1).shape() == Shape{6, 4});
  REQUIRE(t.clone().to_vector<double>() == t.to_vector<double>());
  REQUIRE(t.contiguous().is_same(t));
}
