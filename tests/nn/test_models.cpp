// tests/nn/test_models.cpp — nn/models.h: the MLP and the Fashion-MNIST CNN's structure,
// parameter counts (computed by hand in the comments) and output shapes.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/cpu_devices_guard.h"
#include "multigrad/nn/models.h"
#include "multigrad/optim/sgd.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

int64_t count(const std::vector<Tensor>& tensors) {
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.numel();
  return n;
}

}  // namespace

TEST_CASE("mlp: Linear and ReLU alternate, no ReLU after the last layer", "[nn]") {
  auto model = nn::mlp({784, 256, 128, 10});
  REQUIRE(model->size() == 5);
  CHECK(model->at(0)->name() == "Linear(in_features=784, out_features=256, bias=true)");
  CHECK(model->at(1)->name() == "ReLU()");
  CHECK(model->at(3)->name() == "ReLU()");
  CHECK(model->at(4)->name() == "Linear(in_features=128, out_features=10, bias=true)");
  // 784*256 + 256 + 256*128 + 128 + 128*10 + 10
  CHECK(count(model->parameters()) == 235146);
  CHECK(model->named_parameters().back().first == "4.bias");
  require_error([] { nn::mlp({3}); }, {"mlp", "1 sizes"});
}

TEST_CASE("mlp: forward gives one row of logits per sample", "[nn]") {
  manual_seed(0);
  auto model = nn::mlp({6, 5, 3});
  Tensor y = model->forward(randn({4, 6}));
  CHECK(y.shape() == Shape{4, 3});
}

TEST_CASE("fashion_cnn: the documented architecture and 421738 parameters", "[nn]") {
  auto model = nn::fashion_cnn();
  REQUIRE(model->size() == 12);
  CHECK(model->at(0)->name() == "Conv2d(1, 32, kernel_size=3, stride=1, padding=1, dilation=1, groups=1, bias=false)");
  CHECK(model->at(5)->name().rfind("BatchNorm2d(64", 0) == 0);
  CHECK(model->at(8)->name() == "Flatten(start_dim=1, end_dim=-1)");
  CHECK(model->at(9)->name() == "Linear(in_features=3136, out_features=128, bias=true)");
  // conv1 32*1*9, bn1 2*32, conv2 64*32*9, bn2 2*64, fc1 3136*128+128, fc2 128*10+10
  CHECK(count(model->parameters()) == 288 + 64 + 18432 + 128 + 401536 + 1290);
  std::vector<std::string> buffers;
  for (const auto& [n, t] : model->named_buffers()) buffers.push_back(n);
  CHECK(buffers == std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked",
                                            "5.running_mean", "5.running_var", "5.num_batches_tracked"});
}

TEST_CASE("fashion_cnn: forward maps (N, 1, 28, 28) images to (N, 10) logits", "[nn]") {
  manual_seed(1);
  auto model = nn::fashion_cnn();
  Tensor x = randn({2, 1, 28, 28});
  Tensor y = model->forward(x);
  CHECK(y.shape() == Shape{2, 10});
  model->eval();
  CHECK(model->forward(x).shape() == Shape{2, 10});
}

TEST_CASE("mlp: moved to cpu:1, trained there with SGD, as in the design's example", "[nn]") {
  CpuDevicesGuard devices(2);
  const Device cpu1("cpu:1");
  manual_seed(2);
  auto model = nn::mlp({8, 16, 4});
  model->to(cpu1);
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  Tensor x = randn({5, 8}, {.device = cpu1});
  std::vector<double> before = values(model->parameters()[0]);
  opt.zero_grad();
  model->forward(x).sum().backward();
  opt.step();
  CHECK(model->parameters()[0].device() == cpu1);
  CHECK(values(model->parameters()[0]) != before);
}
