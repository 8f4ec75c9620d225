// tests/parallel/parallel_test_util.h — what the data-parallel tests share: CPU devices, two
// small models (an MLP, and a CNN with batch norm), fixed data, the one-device reference
// (micro-batches accumulated in order, as `--grad-accum` does) and exact comparisons.
#pragma once

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "multigrad.h"
#include "parallel/micro_batches.h"
#include "test_util.h"

namespace mg::test {

inline std::vector<Device> cpu_devices(int n) {
  std::vector<Device> out;
  for (int i = 0; i < n; ++i) out.emplace_back(DeviceType::CPU, i);
  return out;
}

enum class ModelKind { Mlp, CnnWithBatchNorm };

inline const char* model_name(ModelKind kind) { return kind == ModelKind::Mlp ? "mlp" : "cnn"; }

// The same parameters for the same seed.
inline std::shared_ptr<nn::Module> make_model(ModelKind kind, uint64_t seed) {
  manual_seed(seed);
  if (kind == ModelKind::Mlp) return nn::mlp({12, 16, 8, 3});
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, 1, 1, false), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4 * 4 * 4, 3)});
}

struct Batch {
  Tensor inputs, targets;  // on cpu:0
};

// `steps` batches of `batch` examples for the model kind, fixed by the seed.
inline std::vector<Batch> make_batches(ModelKind kind, int steps, int64_t batch, uint64_t seed = 7) {
  manual_seed(seed);
  std::vector<Batch> out;
  for (int s = 0; s < steps; ++s) {
    const Shape shape = kind == ModelKind::Mlp ? Shape{batch, 12} : Shape{batch, 1, 8, 8};
    Tensor x = randn(shape);
    Tensor y = argmax(randn({batch, 3}), 1);  // Int64 classes in [0, 3)
    out.push_back({x, y});
  }
  return out;
}

// The micro-batch's loss, scaled by its share of the global batch (parallel/micro_batches.h).
inline Tensor scaled_loss(const Tensor& logits, const Tensor& targets, int64_t batch) {
  return mul(cross_entropy(logits, targets), double(targets.size(0)) / double(batch));
}

inline optim::SGD make_sgd(const nn::Module& model) {
  return optim::SGD(model.parameters(), {.lr = 0.1, .momentum = 0.9});
}

// One device: every batch as `parts` micro-batches accumulated in order, then an SGD step.
inline void train_reference(nn::Module& model, const std::vector<Batch>& batches, int64_t parts) {
  optim::SGD sgd = make_sgd(model);
  for (const Batch& b : batches) {
    sgd.zero_grad();
    const int64_t n = b.inputs.size(0);
    for (const auto& chunk : parallel::split_batch(n, parts)) {
      const Tensor x = b.inputs.slice(0, chunk.begin, chunk.end);
      const Tensor y = b.targets.slice(0, chunk.begin, chunk.end);
      scaled_loss(model.forward(x), y, n).backward();
    }
    sgd.step();
  }
}

// Raw bytes of a tensor (host copy), for bit-identity.
inline std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor host = t.detach().to(Device("cpu:0")).contiguous();
  std::vector<unsigned char> out(size_t(host.numel()) * host.element_size());
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size());
  return out;
}

inline std::vector<std::vector<unsigned char>> parameter_bytes(const nn::Module& model) {
  std::vector<std::vector<unsigned char>> out;
  for (const Tensor& p : model.parameters()) out.push_back(bytes_of(p));
  return out;
}

inline std::vector<std::vector<double>> parameter_values(const nn::Module& model) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : model.parameters()) out.push_back(values(p.detach().to(Device("cpu:0"))));
  return out;
}

}  // namespace mg::test
