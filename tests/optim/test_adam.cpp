// tests/optim/test_adam.cpp — optim/adam.h: three steps of Adam, Adam with L2 decay, AMSGrad
// and AdamW against hand values and a naive reference of PyTorch's formulas.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "multigrad/optim/adam.h"
#include "optim/optim_test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// torch.optim.Adam / AdamW's documented algorithm for one parameter.
std::vector<double> adam_reference(std::vector<double> p, const std::vector<std::vector<double>>& grads,
                                   const optim::AdamOptions& o, bool decoupled) {
  const double b1 = o.betas[0], b2 = o.betas[1];
  std::vector<double> m(p.size()), v(p.size()), v_max(p.size());
  for (size_t t = 1; t <= grads.size(); ++t)
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grads[t - 1][i];
      if (decoupled) p[i] *= 1 - o.lr * o.weight_decay;
      else g += o.weight_decay * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      v_max[i] = std::max(v_max[i], v[i]);
      double m_hat = m[i] / (1 - std::pow(b1, double(t)));
      double v_hat = (o.amsgrad ? v_max[i] : v[i]) / (1 - std::pow(b2, double(t)));
      p[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  return p;
}

// Gradients that shrink in magnitude, so v falls and AMSGrad's max differs from v.
const std::vector<std::vector<double>> kGrads = {{2.0, -3.0, 0.5}, {0.1, -0.2, 0.4}, {-0.05, 1.0, 0.3}};
const std::vector<double> kStart = {1.0, -2.0, 0.5};

template <class Opt, class Options>
std::vector<double> run(const Options& o) {
  Tensor p = param64(kStart);
  Opt opt({p}, o);
  for (const auto& g : kGrads) {
    set_grad64(p, g);
    opt.step();
  }
  return values(p);
}

}  // namespace

TEST_CASE("Adam: a constant gradient moves every step by lr, bias correction included", "[optim]") {
  // m_hat = v_hat = 1 at every step for g = 1: each step is lr / (1 + eps).
  Tensor p = param64({1.0});
  optim::Adam opt({p}, {.lr = 0.1});
  for (int t = 1; t <= 3; ++t) {
    set_grad64(p, {1.0});
    opt.step();
    CHECK(p.item<double>() == Approx(1.0 - 0.1 * t / (1 + 1e-8)).epsilon(1e-12));
  }
}

TEST_CASE("Adam: three steps match the reference", "[optim]") {
  optim::AdamOptions o{.lr = 0.01, .betas = {0.8, 0.95}, .eps = 1e-6};
  require_close(run<optim::Adam>(o), adam_reference(kStart, kGrads, o, false), 1e-12, 1e-12);
}

TEST_CASE("Adam: L2 weight decay folds weight_decay * p into the gradient", "[optim]") {
  optim::AdamOptions o{.lr = 0.01, .weight_decay = 0.1};
  require_close(run<optim::Adam>(o), adam_reference(kStart, kGrads, o, false), 1e-12, 1e-12);
  CHECK(run<optim::Adam>(o) != run<optim::Adam>(optim::AdamOptions{.lr = 0.01}));
}

TEST_CASE("Adam: amsgrad uses the running maximum of the second moment", "[optim]") {
  optim::AdamOptions o{.lr = 0.01, .amsgrad = true};
  std::vector<double> got = run<optim::Adam>(o);
  require_close(got, adam_reference(kStart, kGrads, o, false), 1e-12, 1e-12);
  optim::AdamOptions plain{.lr = 0.01};
  CHECK(got != run<optim::Adam>(plain));  // the gradients shrink, so the max matters
}

TEST_CASE("AdamW: decoupled decay multiplies p by 1 - lr * weight_decay", "[optim]") {
  optim::AdamWOptions w{.lr = 0.01, .weight_decay = 0.1};
  optim::AdamOptions as_adam{.lr = 0.01, .weight_decay = 0.1};
  require_close(run<optim::AdamW>(w), adam_reference(kStart, kGrads, as_adam, true), 1e-12, 1e-12);
  // by hand, one step with g = 0: m = v = 0, so p = p * (1 - 0.01 * 0.1) exactly
  Tensor p = param64({3.0});
  optim::AdamW opt({p}, {.lr = 0.01, .weight_decay = 0.1});
  set_grad64(p, {0.0});
  opt.step();
  CHECK(p.item<double>() == Approx(3.0 * 0.999).epsilon(1e-14));
}

TEST_CASE("AdamW: PyTorch's defaults, weight decay 1e-2", "[optim]") {
  Tensor p = param64({1.0});
  optim::AdamW opt({p});
  CHECK(opt.options().weight_decay == 0.01);
  CHECK(opt.lr() == 1e-3);
  optim::Adam adam({param64({1.0})});
  CHECK(adam.options().weight_decay == 0.0);
  CHECK(adam.options().betas[1] == 0.999);
}

TEST_CASE("Adam: float32 parameters follow the float64 reference", "[optim]") {
  Tensor p = tensor(kStart, {3}, {.requires_grad = true});
  optim::Adam opt({p}, {.lr = 0.01, .amsgrad = true});
  for (const auto& g : kGrads) {
    p.set_grad(tensor(g, {3}));
    opt.step();
  }
  CHECK(p.dtype() == DType::Float32);
  require_close(p, adam_reference(kStart, kGrads, {.lr = 0.01, .amsgrad = true}, false), 1e-6, 1e-6);
}

TEST_CASE("Adam: invalid hyper-parameters are errors naming them", "[optim]") {
  Tensor p = param64({1.0});
  require_error([&] { optim::Adam opt({p}, {.lr = 0.1, .betas = {1.0, 0.9}}); }, {"Adam", "betas (1, 0.9)"});
  require_error([&] { optim::AdamW opt({p}, {.lr = 0.1, .eps = -1}); }, {"AdamW", "eps -1"});
  require_error([&] { optim::Adam opt({p}, {.lr = 0.1, .weight_decay = -2}); }, {"weight_decay -2"});
  require_error([&] { optim::AdamW opt({p}, {.lr = std::numeric_limits<double>::infinity()}); },
                {"AdamW", "learning rate inf", "finite"});
  optim::Adam adam({p}, {.lr = 0.1});
  require_error([&] { adam.set_lr(std::nan("")); }, {"Adam", "learning rate nan"});
}
