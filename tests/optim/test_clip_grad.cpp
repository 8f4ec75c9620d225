// tests/optim/test_clip_grad.cpp — optim/clip_grad.h: the global L2 norm over several
// gradients and PyTorch's scaling rule.
#include <catch2/catch.hpp>

#include <cmath>

#include "multigrad/optim/clip_grad.h"
#include "optim/optim_test_util.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("clip_grad_norm: returns the total norm and scales large gradients to max_norm", "[optim]") {
  Tensor a = param64({3.0, 0.0}), b = param64({4.0}), none = param64({1.0});
  set_grad64(a, {3.0, 0.0});
  set_grad64(b, {4.0});
  double total = optim::clip_grad_norm({a, b, none}, 1.0);
  CHECK(total == Approx(5.0).epsilon(1e-14));  // sqrt(9 + 16)
  const double coef = 1.0 / (5.0 + 1e-6);
  require_close(a.grad(), {3.0 * coef, 0.0}, 1e-14);
  require_close(b.grad(), {4.0 * coef}, 1e-14);
  CHECK_FALSE(none.grad().defined());
}

TEST_CASE("clip_grad_norm: leaves gradients below max_norm unchanged", "[optim]") {
  Tensor p = tensor({1.0, -2.0, 2.0}, {3}, {.requires_grad = true});
  p.set_grad(tensor({1.0, -2.0, 2.0}, {3}));
  CHECK(optim::clip_grad_norm({p}, 3.5) == Approx(3.0).epsilon(1e-7));
  require_close(p.grad(), {1.0, -2.0, 2.0}, 0, 0);
  require_error([&] { optim::clip_grad_norm({p}, -1); }, {"max_norm", "-1"});
}

TEST_CASE("clip_grad_norm: a non-finite norm is returned and leaves the gradients as they are", "[optim]") {
  for (double bad : {INFINITY, NAN}) {
    Tensor p = tensor({1.0, 2.0}, {2}, {.requires_grad = true});
    p.set_grad(tensor({bad, 2.0}, {2}));
    const double total = optim::clip_grad_norm({p}, 1.0);
    CHECK((std::isinf(bad) ? std::isinf(total) : std::isnan(total)));
    CHECK(p.grad().to_vector<float>()[1] == 2.0f);
  }
}

TEST_CASE("SquareSum: the same digits and value whatever the order and the split of the elements", "[optim]") {
  // Float32 values over 2^-149 .. 2^100 and float64 ones whose squares need more than 53 bits:
  // a rounding sum would depend on the order.
  std::vector<float> f32;
  std::vector<double> f64;
  uint64_t state = 12345;
  const auto next = [&] { return state = state * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (int i = 0; i < 3000; ++i) {
    const int exponent = int(next() >> 56) % 250 - 149;
    f32.push_back(float(std::ldexp(1.0 + double(next() >> 40) / double(1 << 24), exponent)) * (i % 3 ? 1.f : -1.f));
    f64.push_back(std::ldexp(1.0 + double(next() >> 11) / 9007199254740992.0, int(next() >> 58) - 32));
  }
  const auto sum_of = [](const std::vector<Tensor>& parts) {
    optim::SquareSum s;
    for (const Tensor& t : parts) s.add(t);
    return s;
  };
  const optim::SquareSum whole32 = sum_of({tensor(f32, {3000})});
  const optim::SquareSum whole64 = sum_of({tensor(f64, {3000}, {.dtype = DType::Float64})});
  // Reversed and cut into three pieces, and two partial sums combined through their words.
  std::vector<float> r32(f32.rbegin(), f32.rend());
  std::vector<double> r64(f64.rbegin(), f64.rend());
  const Tensor t32 = tensor(r32, {3000}), t64 = tensor(r64, {3000}, {.dtype = DType::Float64});
  const optim::SquareSum cut32 = sum_of({t32.slice(0, 0, 7), t32.slice(0, 7, 2000), t32.slice(0, 2000, 3000)});
  const optim::SquareSum cut64 = sum_of({t64.slice(0, 0, 1234), t64.slice(0, 1234, 3000)});
  CHECK(cut32.words() == whole32.words());
  CHECK(cut64.words() == whole64.words());
  CHECK(cut32.value() == whole32.value());
  std::vector<int64_t> a = sum_of({t64.slice(0, 0, 10)}).words(), b = sum_of({t64.slice(0, 10, 3000)}).words();
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  CHECK(optim::SquareSum::from_words(a).words() == whole64.words());
  CHECK(optim::SquareSum::from_words(a).value() == whole64.value());
  // Close to a long double sum of the squares.
  long double ref = 0;
  for (double x : f64) ref += (long double)x * x;
  CHECK(whole64.value() == Approx(double(ref)).epsilon(1e-15));
}

TEST_CASE("SquareSum: exact integers, mixed magnitudes, NaN and infinity", "[optim]") {
  std::vector<double> ints;
  for (int i = 1; i <= 1000; ++i) ints.push_back(double(i));
  optim::SquareSum s;
  s.add(tensor(ints, {1000}, {.dtype = DType::Float64}));
  CHECK(s.value() == 1000.0 * 1001.0 * 2001.0 / 6.0);
  // 2^60 + 1: the digits hold it exactly (the 1 shows in the lowest digit of 2^0), value() rounds.
  optim::SquareSum big;
  big.add(tensor(std::vector<double>{std::ldexp(1.0, 30), 1.0}, {2}, {.dtype = DType::Float64}));
  const std::vector<int64_t> w = big.words();
  CHECK(optim::SquareSum::from_words(w).words() == w);
  CHECK(w[1074 / 32] == int64_t(1) << (1074 % 32));  // 2^0 = 2^(32 x 33 + 18) above 2^-1074
  CHECK(big.value() == std::ldexp(1.0, 60));
  optim::SquareSum nan, inf;
  nan.add(tensor(std::vector<double>{1.0, NAN}, {2}, {.dtype = DType::Float64}));
  inf.add(tensor(std::vector<double>{1.0, INFINITY, 1e200}, {3}, {.dtype = DType::Float64}));
  CHECK(std::isnan(nan.value()));
  CHECK(std::isinf(inf.value()));
  require_error([] { optim::SquareSum::from_words({1, 2}); }, {"SquareSum::from_words", "70 words", "got 2"});
  require_error([] { optim::SquareSum().add(zeros({2}, {.dtype = DType::Int64})); }, {"SquareSum", "Int64"});
}
