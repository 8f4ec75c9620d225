// tests/optim/test_clip_grad.cpp — optim/clip_grad.h: the global L2 norm over several
// gradients and PyTorch's scaling rule.
#include <catch2/catch.hpp>

#include <cmath>

#include "optim/clip_grad.h"
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
