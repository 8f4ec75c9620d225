// tests/optim/test_optim_state.cpp — optimizer state_dict / load_state_dict: a run resumed
// from saved parameters and optimizer state continues bit-identically; bad states are errors.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "multigrad/optim/adam.h"
#include "optim/optim_test_util.h"
#include "multigrad/optim/sgd.h"

using namespace mg;
using namespace mg::test;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// Gradient of step t for parameter i: fixed pseudo-random values; parameter 1 gets none on odd
// steps, so the per-parameter step counts differ.
void set_step_grads(const std::vector<Tensor>& params, int t) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (i == 1 && t % 2) {
      params[i].set_grad(Tensor());
      continue;
    }
    params[i].set_grad(tensor(pseudo_random(size_t(params[i].numel()), uint64_t(100 * t + i)), params[i].shape()));
  }
}

std::vector<Tensor> fresh_params() {
  return {tensor(pseudo_random(6, 1), {2, 3}, {.requires_grad = true}),
          tensor(pseudo_random(4, 2), {4}, {.requires_grad = true})};
}

// Runs 2 steps, saves, runs 3 more; then restores into new parameters and a new optimizer and
// runs the same 3 steps: the parameters must agree bit for bit.
void check_resume(const MakeOptimizer& make) {
  std::vector<Tensor> params = fresh_params();
  auto opt = make(params);
  for (int t = 0; t < 2; ++t) {
    set_step_grads(params, t);
    opt->step();
  }
  std::vector<Tensor> saved;
  for (const Tensor& p : params) saved.push_back(p.detach().clone());
  optim::OptimizerState state = opt->state_dict();
  for (int t = 2; t < 5; ++t) {
    set_step_grads(params, t);
    opt->step();
  }
  std::vector<Tensor> resumed;
  for (const Tensor& s : saved) resumed.push_back(s.clone().requires_grad_(true));
  auto opt2 = make(resumed);
  opt2->load_state_dict(state);
  for (int t = 2; t < 5; ++t) {
    set_step_grads(resumed, t);
    opt2->step();
  }
  for (size_t i = 0; i < params.size(); ++i) CHECK(values(params[i]) == values(resumed[i]));
  // and a fresh optimizer without the state would not have matched
  std::vector<Tensor> cold;
  for (const Tensor& s : saved) cold.push_back(s.clone().requires_grad_(true));
  auto opt3 = make(cold);
  for (int t = 2; t < 5; ++t) {
    set_step_grads(cold, t);
    opt3->step();
  }
  CHECK(values(params[0]) != values(cold[0]));
}

}  // namespace

TEST_CASE("SGD: a resumed run continues bit-identically", "[optim]") {
  check_resume([](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.1, .momentum = 0.9,
                                                                        .nesterov = true, .weight_decay = 0.01});
  });
}

TEST_CASE("Adam: a resumed run (amsgrad) continues bit-identically", "[optim]") {
  check_resume([](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 0.01, .amsgrad = true});
  });
}

TEST_CASE("AdamW: a resumed run continues bit-identically", "[optim]") {
  check_resume([](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(std::move(p)); });
}

TEST_CASE("Adam: state_dict names per-parameter state and the options", "[optim]") {
  std::vector<Tensor> params = fresh_params();
  optim::Adam opt(params, {.lr = 0.02, .betas = {0.5, 0.6}});
  set_step_grads(params, 1);  // only parameter 0 gets a gradient
  opt.step();
  optim::OptimizerState s = opt.state_dict();
  CHECK(s.tensors.size() == 3);
  CHECK(s.tensors.at("0.step").item<int64_t>() == 1);
  CHECK(s.tensors.at("0.exp_avg").shape() == Shape{2, 3});
  CHECK(s.tensors.count("1.exp_avg") == 0);
  CHECK(s.options.at("lr") == 0.02);
  CHECK(s.options.at("beta2") == 0.6);
  // a copy: later steps do not change the saved moments
  std::vector<double> saved = values(s.tensors.at("0.exp_avg"));
  set_step_grads(params, 2);
  opt.step();
  CHECK(values(s.tensors.at("0.exp_avg")) == saved);
}

TEST_CASE("Optimizer: load_state_dict rejects foreign or damaged state", "[optim]") {
  std::vector<Tensor> params = fresh_params();
  optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9});
  set_step_grads(params, 0);
  opt.step();
  optim::OptimizerState good = opt.state_dict();

  optim::OptimizerState s = good;
  s.tensors["0.exp_avg"] = zeros({2, 3});
  require_error([&] { opt.load_state_dict(s); }, {"SGD.load_state_dict", "unexpected key '0.exp_avg'"});
  s = good;
  s.tensors["7.momentum_buffer"] = zeros({2});
  require_error([&] { opt.load_state_dict(s); }, {"parameter 7", "has 2"});
  s = good;
  s.tensors["1.momentum_buffer"] = zeros({5});
  require_error([&] { opt.load_state_dict(s); }, {"shape mismatch for key '1.momentum_buffer'", "[5]", "[4]"});
  s = good;
  s.options.erase("momentum");
  require_error([&] { opt.load_state_dict(s); }, {"missing option 'momentum'"});
  optim::Adam adam(params);
  require_error([&] { adam.load_state_dict(good); }, {"Adam.load_state_dict", "momentum_buffer"});
}
