// tests/optim/test_moved_params.cpp — an optimizer made before its model moves (nn::Module::to
// moves parameters in place): it trains the moved parameters exactly as one made after the move,
// and state it made before the move (momentum, Adam's moments) follows its parameter.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "core/cpu_devices_guard.h"
#include "multigrad/nn/models.h"
#include "multigrad/optim/adam.h"
#include "multigrad/optim/sgd.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

std::unique_ptr<optim::Optimizer> sgd(std::vector<Tensor> params) {
  return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}
std::unique_ptr<optim::Optimizer> adamw(std::vector<Tensor> params) {
  return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
}

// Where the model is moved relative to the optimizer's making and its steps.
enum class Move { Never, BeforeOptimizer, AfterOptimizer, AfterFirstStep };

// The parameters of an MLP after `steps` steps on fixed data, trained on `device` (from the start,
// or moved there as `move` says) in `dtype`.
std::vector<std::vector<double>> train_params(const MakeOptimizer& make, Move move, const Device& device,
                                       DType dtype = DType::Float32, int steps = 3) {
  manual_seed(3);
  auto model = nn::mlp({4, 8, 3});
  const Tensor x = tensor(pseudo_random(20, 1), {5, 4});
  const Tensor y = tensor(std::vector<int64_t>{0, 1, 2, 1, 0}, {5}, {.dtype = DType::Int64});
  auto place = [&] {
    model->to(device);
    model->to(dtype);
  };
  if (move == Move::Never || move == Move::BeforeOptimizer) place();
  std::unique_ptr<optim::Optimizer> opt = make(model->parameters());
  if (move == Move::AfterOptimizer) place();
  if (steps == 0) place();
  for (int step = 0; step < steps; ++step) {
    if (step == 1 && move == Move::AfterFirstStep) place();
    const Device d = model->parameters()[0].device();
    opt->zero_grad();
    cross_entropy(model->forward(x.to(d).to(model->parameters()[0].dtype())), y.to(d)).backward();
    opt->step();
  }
  std::vector<std::vector<double>> out;
  for (const Tensor& p : model->parameters()) {
    CHECK(p.device() == device);
    CHECK(p.dtype() == dtype);
    out.push_back(values(p));
  }
  return out;
}

}  // namespace

TEST_CASE("optimizers made before the model moves train the moved parameters as if made after", "[optim]") {
  CpuDevicesGuard devices(2);
  const Device cpu1("cpu:1");
  for (const auto& [name, make] : {std::pair<const char*, MakeOptimizer>{"SGD", sgd}, {"AdamW", adamw}}) {
    INFO(name);
    const auto want = train_params(make, Move::BeforeOptimizer, cpu1);
    CHECK(train_params(make, Move::AfterOptimizer, cpu1) == want);
    CHECK(want != train_params(make, Move::BeforeOptimizer, cpu1, DType::Float32, 0));  // the steps trained
  }
}

TEST_CASE("optimizer state made before a move follows its parameter to the device and dtype", "[optim]") {
  CpuDevicesGuard devices(2);
  const Device cpu0("cpu:0"), cpu1("cpu:1");
  for (const auto& [name, make] : {std::pair<const char*, MakeOptimizer>{"SGD", sgd}, {"AdamW", adamw}}) {
    INFO(name);
    // CPU devices compute the same bits: moving mid-run changes nothing but where the state lives.
    CHECK(train_params(make, Move::AfterFirstStep, cpu1) == train_params(make, Move::Never, cpu0));
    // to(Float64) after a step: the state is cast along (a Float32 state beside Float64
    // parameters would be an error in the fused update).
    CHECK_NOTHROW(train_params(make, Move::AfterFirstStep, cpu0, DType::Float64));
  }
}
