// examples/example.h — what the layout examples share: the model, the batches, the training loop
// and the comparison of digests. The loop is the same for every layout; what changes from one
// example to the next is the Plan and the Groups given to train::parallelize.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "multigrad/multigrad.h"

namespace example {

constexpr int kSteps = 5;
constexpr int64_t kBatch = 64;

inline std::vector<mg::optim::ParamGroup> one_group(std::vector<mg::Tensor> params) {
  return {{.params = std::move(params)}};
}
inline std::unique_ptr<mg::optim::Optimizer> sgd(std::vector<mg::optim::ParamGroup> groups) {
  return std::make_unique<mg::optim::SGD>(std::move(groups), mg::optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
}

// The model every example trains: 32 inputs, 8 classes. Seeded, so every replica starts alike.
inline std::shared_ptr<mg::nn::Sequential> mlp() {
  mg::manual_seed(0);
  return mg::nn::mlp({32, 64, 64, 8});
}

// kSteps batches of random inputs, each with a random class of 8. Made on the main thread: the
// global generator is not for rank threads.
inline std::vector<mg::data::Batch> random_batches() {
  mg::manual_seed(1);
  std::vector<mg::data::Batch> out;
  for (int s = 0; s < kSteps; ++s)
    out.push_back({mg::randn({kBatch, 32}), mg::to(mg::mul(mg::rand({kBatch}), 8.0), mg::DType::Int64), {}});
  return out;
}

// Trains `net` laid out by `plan` over `groups` on `devices`, a train_step per batch; returns the
// digest of the one-device model its parameters make up (gathered first where they are spread:
// ZeRO-3's shards, a pipeline's stages, tensor parallelism's slices; collective on every rank).
inline std::string train(std::shared_ptr<mg::nn::Module> net, const std::vector<mg::data::Batch>& batches,
                         const mg::train::Groups& groups, const std::vector<mg::Device>& devices,
                         const mg::train::Plan& plan, int64_t grad_accum) {
  const auto m = mg::train::parallelize({net}, devices, groups, plan);
  const auto optimizer = mg::train::make_optimizer(*m, plan, one_group, sgd);
  mg::train::Metrics metrics;  // summed on the device, read once below
  int64_t step = 0;
  for (const mg::data::Batch& b : batches) {
    const mg::data::Batch here{b.inputs.to(devices.front()), b.targets.to(devices.front()), {}};
    mg::train::train_step(*m, *optimizer, here, {.grad_accum = grad_accum}, metrics, ++step);
  }
  m->gather_parameters();
  m->model_state();  // tensor parallelism: the slices gathered into the one-device model
  if (groups.world == nullptr || groups.world->rank() == 0)
    std::printf("  mean loss %.4f over %lld examples\n", metrics.totals().loss(), (long long)metrics.totals().samples);
  return mg::train::params_sha256(m->one_device_model());
}

// Prints the reference's digest and each run's; 0 when all are equal (the process's exit code).
inline int compare(const std::string& reference_name, const std::string& reference, const std::string& name,
                   const std::vector<std::string>& digests) {
  bool equal = true;
  std::printf("params_sha256, %s: %s\n", reference_name.c_str(), reference.c_str());
  for (size_t r = 0; r < digests.size(); ++r) {
    const std::string who = digests.size() > 1 ? name + " rank " + std::to_string(r) : name;
    std::printf("params_sha256, %s: %s\n", who.c_str(), digests[r].c_str());
    equal = equal && digests[r] == reference;
  }
  std::puts(equal ? "bit-identical" : "DIFFERENT");
  return equal ? 0 : 1;
}

}  // namespace example
