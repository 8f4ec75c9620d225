// tests/optim/test_sgd.cpp — optim/sgd.h: three steps against PyTorch's formulas evaluated by
// hand (literal numbers) and by a naive reference loop, for plain SGD, momentum with
// dampening, Nesterov with weight decay; skipping, zero_grad and argument errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "optim/optim_test_util.h"
#include "multigrad/optim/sgd.h"

using namespace mg;
using namespace mg::test;

namespace {

// torch.optim.SGD's documented algorithm, one parameter, `grads[t]` the gradient of step t.
std::vector<double> sgd_reference(std::vector<double> p, const std::vector<std::vector<double>>& grads,
                                  const optim::SGDOptions& o) {
  std::vector<double> buf(p.size());
  for (size_t t = 0; t < grads.size(); ++t)
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grads[t][i] + o.weight_decay * p[i];
      if (o.momentum != 0) {
        buf[i] = t == 0 ? g : o.momentum * buf[i] + (1 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * g;
    }
  return p;
}

const std::vector<std::vector<double>> kGrads = {{0.5, -1.0, 2.0}, {0.25, 0.5, -1.5}, {-0.75, 1.0, 0.1}};
const std::vector<double> kStart = {1.0, -2.0, 0.5};

std::vector<double> run_sgd(const optim::SGDOptions& o) {
  Tensor p = param64(kStart);
  optim::SGD opt({p}, o);
  for (const auto& g : kGrads) {
    set_grad64(p, g);
    opt.step();
  }
  return values(p);
}

}  // namespace

TEST_CASE("SGD: plain steps are p -= lr * g", "[optim]") {
  // 1 - 0.1 * (0.5 + 0.25 - 0.75) = 1.0; -2 - 0.1 * 0.5 = -2.05; 0.5 - 0.1 * 0.6 = 0.44
  require_close(run_sgd({.lr = 0.1}), {1.0, -2.05, 0.44}, 1e-12, 1e-12);
}

TEST_CASE("SGD: momentum starts its buffer at the first gradient", "[optim]") {
  Tensor p = param64({1.0});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  std::vector<double> want = {0.9, 0.71, 0.439};  // b = 1, 1.9, 2.71
  for (double w : want) {
    set_grad64(p, {1.0});
    opt.step();
    CHECK(p.item<double>() == Approx(w).epsilon(1e-12));
  }
}

TEST_CASE("SGD: momentum with dampening matches the reference over 3 steps", "[optim]") {
  optim::SGDOptions o{.lr = 0.05, .momentum = 0.8, .dampening = 0.3};
  require_close(run_sgd(o), sgd_reference(kStart, kGrads, o), 1e-12, 1e-12);
  // one step by hand: the first buffer is undampened, b = g
  Tensor p = param64({2.0});
  optim::SGD opt({p}, o);
  set_grad64(p, {1.0});
  opt.step();
  set_grad64(p, {1.0});
  opt.step();
  // b2 = 0.8 * 1 + 0.7 * 1 = 1.5; p = 2 - 0.05 - 0.075
  CHECK(p.item<double>() == Approx(1.875).epsilon(1e-12));
}

TEST_CASE("SGD: Nesterov with weight decay matches the reference over 3 steps", "[optim]") {
  optim::SGDOptions o{.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01};
  require_close(run_sgd(o), sgd_reference(kStart, kGrads, o), 1e-12, 1e-12);
  // by hand, one step: g = 0.5 + 0.01 * 1 = 0.51, b = 0.51, g' = 0.51 + 0.9 * 0.51 = 0.969
  Tensor p = param64({1.0});
  optim::SGD opt({p}, o);
  set_grad64(p, {0.5});
  opt.step();
  CHECK(p.item<double>() == Approx(1.0 - 0.0969).epsilon(1e-12));
}

TEST_CASE("SGD: plain weight decay adds weight_decay * p to the gradient", "[optim]") {
  optim::SGDOptions o{.lr = 0.1, .weight_decay = 0.5};
  require_close(run_sgd(o), sgd_reference(kStart, kGrads, o), 1e-12, 1e-12);
}

TEST_CASE("SGD: a parameter without a gradient is skipped", "[optim]") {
  Tensor a = param64({1.0}), b = param64({2.0});
  optim::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  set_grad64(a, {1.0});
  opt.step();
  CHECK(b.item<double>() == 2.0);
  CHECK(opt.state_dict().tensors.count("1.momentum_buffer") == 0);
  // b's first step later starts its own buffer from its gradient
  set_grad64(b, {1.0});
  opt.step();
  CHECK(b.item<double>() == Approx(1.9).epsilon(1e-12));
}

TEST_CASE("Optimizer: zero_grad drops gradients or fills them with zeros", "[optim]") {
  Tensor p = param64({1.0, 2.0});
  optim::SGD opt({p}, {.lr = 0.1});
  set_grad64(p, {3.0, 4.0});
  opt.zero_grad(/*set_to_none=*/false);
  REQUIRE(p.grad().defined());
  CHECK(values(p.grad()) == std::vector<double>{0.0, 0.0});
  opt.zero_grad();
  CHECK_FALSE(p.grad().defined());
}

TEST_CASE("SGD: invalid arguments are errors naming the values", "[optim]") {
  Tensor p = param64({1.0});
  require_error([&] { optim::SGD opt({p}, {.lr = -1}); }, {"SGD", "learning rate -1"});
  // An infinite rate would make the first step's parameters NaN (a schedule's inf * 0).
  require_error([&] { optim::SGD opt({p}, {.lr = std::numeric_limits<double>::infinity()}); },
                {"SGD", "learning rate inf", "finite"});
  require_error([&] { optim::SGD opt({p}, {.lr = 0.1, .nesterov = true}); }, {"Nesterov", "momentum 0"});
  require_error([&] { optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
                {"Nesterov", "dampening 0.1"});
  require_error([] { optim::SGD opt(std::vector<Tensor>{}, {.lr = 0.1}); }, {"SGD", "empty parameter list"});
  require_error([&] { optim::SGD opt({p, p}); }, {"parameter 1", "appears twice"});
  Tensor not_leaf = p * 2.0;
  require_error([&] { optim::SGD opt({not_leaf}); }, {"parameter 0", "not a leaf"});
  require_error([] { optim::SGD opt({zeros({2}, {.dtype = DType::Int64})}); }, {"parameter 0", "Int64"});
}

TEST_CASE("SGD: the learning rate can be read and changed between steps", "[optim]") {
  Tensor p = param64({1.0});
  optim::SGD opt({p}, {.lr = 0.1});
  CHECK(opt.lr() == 0.1);
  opt.set_lr(0.5);
  set_grad64(p, {1.0});
  opt.step();
  CHECK(p.item<double>() == Approx(0.5).epsilon(1e-12));
  require_error([&] { opt.set_lr(-0.1); }, {"learning rate -0.1"});
  require_error([&] { opt.set_lr(std::nan("")); }, {"learning rate nan"});
}
