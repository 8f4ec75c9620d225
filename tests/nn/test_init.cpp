// tests/nn/test_init.cpp — nn/init.h: fans of linear and conv weights, the Kaiming bound for a
// few slopes, constant fills, and initialisation leaving the tape alone.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "multigrad/nn/init.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("init: fan_in and fan_out of linear and conv weights", "[nn]") {
  CHECK(nn::init::fan_in_and_fan_out(zeros({7, 3})) == std::pair<int64_t, int64_t>{3, 7});
  CHECK(nn::init::fan_in_and_fan_out(zeros({8, 4, 3, 5})) == std::pair<int64_t, int64_t>{60, 120});
  require_error([] { nn::init::fan_in_and_fan_out(zeros({3})); }, {"at least 2 dims", "[3]"});
}

TEST_CASE("init: kaiming_uniform_ bound is sqrt(6 / ((1 + a^2) fan_in))", "[nn]") {
  manual_seed(4);
  for (double a : {0.0, 1.0, std::sqrt(5.0)}) {
    Tensor w = zeros({200, 50}, {.dtype = DType::Float64, .requires_grad = true});
    nn::init::kaiming_uniform_(w, a);
    const double bound = std::sqrt(6.0 / ((1 + a * a) * 50.0));
    std::vector<double> v = values(w);
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    INFO("a = " << a);
    CHECK(*lo >= -bound);
    CHECK(*hi <= bound);
    CHECK(*hi > 0.99 * bound);
    CHECK(w.is_leaf());  // initialising in place does not record on the tape
  }
}

TEST_CASE("init: constant_, zeros_ and ones_ fill in place, any dtype", "[nn]") {
  Tensor f = empty({2, 2});
  nn::init::constant_(f, 0.25);
  CHECK(values(f) == std::vector<double>(4, 0.25));
  Tensor i = empty({3}, {.dtype = DType::Int64});
  nn::init::ones_(i);
  CHECK(values(i) == std::vector<double>(3, 1.0));
  nn::init::zeros_(f);
  CHECK(values(f) == std::vector<double>(4, 0.0));
  require_error([&] { nn::init::uniform_(f, 1.0, 0.0); }, {"uniform_", "low 1", "high 0"});
}
