// examples/model_parallel.cpp — a model too big for one device, split across two by hand, as
// PyTorch's multi-GPU tutorial first does: the first layers on one device, the rest on the other,
// the activations moved between them with .to(device). Autograd follows the move: backward sends
// the activations' gradient back to the first device (the copy is an op on the tape).
//
//   build/examples/model_parallel         # exits 1 if the split model differs from one device's
//
// Every op runs on the same numbers in the same order as on one device, so the split changes
// nothing in the result; it only changes where each layer's parameters, activations and optimizer
// state live. Only one device works at a time, though: a pipeline (examples/layouts.cpp gpipe or
// 1f1b, parallel/pipeline/) cuts each batch into micro-batches so the stages overlap.
#include <cstdio>
#include <string>
#include <vector>

#include "multigrad/multigrad.h"

namespace {

constexpr int kSteps = 20;

std::shared_ptr<mg::nn::Sequential> model() {
  mg::manual_seed(0);  // both runs start from the same parameters
  return mg::nn::mlp({32, 256, 256, 256, 8});
}

// The first 4 layers (Linear, ReLU, Linear, ReLU) on `first`, the rest on `second`. slice() shares
// the modules: `net` itself is now split, and its parameters() are those of both halves.
struct Split {
  std::shared_ptr<mg::nn::Sequential> front, back;
  mg::Device second;
  Split(const mg::nn::Sequential& net, const mg::Device& first, const mg::Device& second)
      : front(net.slice(0, 4)), back(net.slice(4, net.size())), second(second) {
    front->to(first);
    back->to(second);
  }
  mg::Tensor forward(const mg::Tensor& x) const { return back->forward(front->forward(x).to(second)); }
};

std::string train(const std::vector<mg::Device>& devices) {
  mg::manual_seed(1);
  const mg::Tensor x = mg::randn({128, 32}).to(devices.front());
  const mg::Tensor y = mg::to(mg::mul(mg::rand({128}), 8.0), mg::DType::Int64).to(devices.back());  // where the loss is
  const auto net = model();
  const Split split(*net, devices.front(), devices.back());
  mg::optim::SGD optimizer(net->parameters(), {.lr = 0.05, .momentum = 0.9});  // each state beside its parameter
  for (int step = 1; step <= kSteps; ++step) {
    optimizer.zero_grad();
    const mg::Tensor loss = mg::cross_entropy(split.forward(x), y);
    loss.backward();
    optimizer.step();
    if (step % 10 == 0) std::printf("  step %d: loss %.4f\n", step, loss.item<float>());
  }
  if (devices.size() > 1)
    for (const auto& [name, p] : net->named_parameters()) std::printf("  %-8s on %s\n", name.c_str(), p.device().str().c_str());
  return mg::train::params_sha256(*net);
}

}  // namespace

int main() {
  mg::set_cpu_device_count(2);
  std::puts("split over cpu:0 and cpu:1:");
  const std::string split = train({mg::Device("cpu:0"), mg::Device("cpu:1")});
  std::puts("one device:");
  const std::string one = train({mg::Device("cpu:0")});
  std::printf("params_sha256, one device: %s\nparams_sha256, split: %s\n", one.c_str(), split.c_str());
  std::puts(one == split ? "bit-identical" : "DIFFERENT");
  return one == split ? 0 : 1;
}
