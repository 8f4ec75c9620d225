// tests/parallel/parallel_test_util.h — what the data-parallel tests share: devices, each
// rank's collective inputs and their reference results, errors caught per rank, the local
// backend with rendezvous sends, two small models (an MLP, and a CNN with batch norm), fixed
// data, the one-device reference (micro-batches accumulated in order, as `--grad-accum` does),
// DDP and pipeline training over any backend and exact comparisons.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "multigrad/multigrad.h"
#include "multigrad/parallel/data/micro_batches.h"
#include "test_util.h"

namespace mg::test {

inline std::vector<Device> cpu_devices(int n) {
  std::vector<Device> out;
  for (int i = 0; i < n; ++i) out.emplace_back(DeviceType::CPU, i);
  return out;
}

// n logical CUDA devices, cuda:0 .. cuda:n-1 (they may share a GPU: the local backend's).
inline std::vector<Device> cuda_devices(int n) {
  std::vector<Device> out;
  for (int i = 0; i < n; ++i) out.emplace_back(DeviceType::CUDA, i);
  return out;
}

// run_ranks (local.h) or run_ranks_nccl (nccl.h).
using Backend = void (*)(const std::vector<Device>&, const std::function<void(parallel::Communicator&)>&);

// run_ranks with rendezvous sends (LocalOptions): a send completes only once its receive has been
// posted, as over NCCL, so code that would wait on NCCL times out here instead.
inline void run_ranks_rendezvous(const std::vector<Device>& devices,
                                 const std::function<void(parallel::Communicator&)>& fn) {
  parallel::run_ranks(devices, fn, {.rendezvous_sends = true});
}

// ---------------------------------------------------------------- collectives

// Rank r's i-th input value: exact in every dtype for integers, irregular for floats so that the
// order of summation shows in the low bits.
inline double input_value(DType dtype, int rank, int64_t i) {
  if (dtype == DType::Int64) return double((i * 31 + rank * 17) % 101 - 50);
  return std::sin(double(i) * 0.37 + rank * 1.1) * 10.0;
}

// Rank r's input of `shape` on a CPU device: element i is input_value(dtype, rank, i).
inline Tensor make_input(DType dtype, const Device& device, const Shape& shape, int rank) {
  Tensor t = Tensor::empty(shape, {dtype, device});
  const int64_t n = t.numel();
  MG_DISPATCH_ARITH(dtype, "make_input", [&] {
    auto* p = t.data<scalar_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = scalar_t(input_value(dtype, rank, i));
  });
  return t;
}

// Element i of op over the ranks' inputs, in double.
inline double reference_value(parallel::ReduceOp op, DType dtype, int ranks, int64_t i) {
  double acc = input_value(dtype, 0, i);
  for (int r = 1; r < ranks; ++r) {
    const double v = input_value(dtype, r, i);
    acc = op == parallel::ReduceOp::Max ? std::max(acc, v) : acc + v;
  }
  return op == parallel::ReduceOp::Avg ? acc / ranks : acc;
}

// Elements 0 .. numel-1 of op over the ranks' inputs.
inline std::vector<double> reference_reduce(parallel::ReduceOp op, DType dtype, int ranks, int64_t numel) {
  std::vector<double> out(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) out[size_t(i)] = reference_value(op, dtype, ranks, i);
  return out;
}

// Runs fn on every rank of `run` on `devices`, catching mg::Error per rank; returns each rank's
// message ("" if none).
inline std::vector<std::string> rank_errors(Backend run, const std::vector<Device>& devices,
                                            const std::function<void(parallel::Communicator&)>& fn) {
  std::vector<std::string> messages(devices.size());
  run(devices, [&](parallel::Communicator& comm) {
    try {
      fn(comm);
    } catch (const Error& e) {
      messages[size_t(comm.rank())] = e.what();
    }
  });
  return messages;
}

inline void require_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& p : parts) {
    INFO("message: " << message << "\nexpected to contain: " << p);
    REQUIRE(message.find(p) != std::string::npos);
  }
}

// Communicator::split on any communicator: pairs of ranks (color rank / 2), every rank in
// reverse order (key -rank), a split of a split, and a negative color; in each group its ranks
// and size, a collective and (in a pair) an exchange, with a collective of comm in between.
// Returns "" when everything holds, else the first difference (rank threads only record).
inline std::string check_split(parallel::Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  const TensorOptions on{.device = comm.device()};
  const auto value = [](const Tensor& t) { return t.to(Device("cpu:0")).to_vector<double>()[0]; };
  const auto differs = [&](const char* what, double got, double want) {
    return got == want ? std::string() : detail::str_cat("rank ", r, ": ", what, " is ", got, ", expected ", want);
  };
  std::string e;
  const auto pair = comm.split(r / 2, r);
  const int pair_size = std::min(2, n - r / 2 * 2);
  if (!(e = differs("the pair's size", pair->size(), pair_size)).empty()) return e;
  if (!(e = differs("the rank in the pair", pair->rank(), r % 2)).empty()) return e;
  const auto reversed = comm.split(7, -r);
  if (!(e = differs("the rank in reverse", reversed->rank(), n - 1 - r)).empty()) return e;

  Tensor sum = full({3}, double(r + 1), on);  // the pair's ranks 2k and 2k + 1: 2k + 1 + 2k + 2
  pair->all_reduce(sum)->wait();
  const double first = r / 2 * 2;
  if (!(e = differs("the pair's all_reduce", value(sum), pair_size == 2 ? 2 * first + 3 : first + 1)).empty()) return e;
  Tensor everyone = full({1}, 1.0, on);
  comm.all_reduce(everyone)->wait();
  if (!(e = differs("comm's all_reduce", value(everyone), n)).empty()) return e;
  Tensor root = full({2}, double(r), on);  // reversed's rank 0 is comm's last
  reversed->broadcast(root, 0)->wait();
  if (!(e = differs("the reversed broadcast", value(root), n - 1)).empty()) return e;
  if (pair_size == 2) {
    const Tensor mine = full({4}, 10.0 * r, on), theirs = Tensor::empty({4}, {DType::Float32, comm.device()});
    pair->send_recv(mine, 1 - pair->rank(), theirs, 1 - pair->rank())->wait();
    if (!(e = differs("the pair's message", value(theirs), 10.0 * (r ^ 1))).empty()) return e;
  }
  const auto nested = reversed->split(reversed->rank() % 2, 0);  // comm's ranks of n - 1's parity, and the rest
  Tensor count = full({1}, 1.0, on);
  nested->all_reduce(count)->wait();
  if (!(e = differs("the nested group's size", value(count), (n + ((n - 1 - r) % 2 == 0 ? 1 : 0)) / 2)).empty()) return e;
  const auto none = comm.split(r == 0 ? -1 : 1, 0);
  if (r == 0 && none != nullptr) return "rank 0: a negative color gave a communicator";
  if (r != 0 && !(e = differs("the group without rank 0's size", none->size(), n - 1)).empty()) return e;
  return "";
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ---------------------------------------------------------------- training

// DeepMlp: nine layers, enough for an interleaved pipeline of 4 stages x 2 chunks. Gpt: the tiny
// config with 32 token ids (5 layers to a pipeline: the embeddings, 2 blocks, ln_f, and the head
// tied to the token embedding).
enum class ModelKind { Mlp, CnnWithBatchNorm, DeepMlp, Gpt };

inline const char* model_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::Mlp: return "mlp";
    case ModelKind::DeepMlp: return "deep mlp";
    case ModelKind::CnnWithBatchNorm: return "cnn";
    case ModelKind::Gpt: return "gpt";
  }
  return "?";
}

constexpr int64_t kGptVocab = 32, kGptWindow = 16;  // ModelKind::Gpt's token ids, and tokens per example

// The same parameters for the same seed.
inline std::shared_ptr<nn::Module> make_model(ModelKind kind, uint64_t seed) {
  manual_seed(seed);
  if (kind == ModelKind::Gpt) return nn::gpt(nn::gpt_config("tiny", kGptVocab));
  if (kind == ModelKind::Mlp) return nn::mlp({12, 16, 8, 3});
  if (kind == ModelKind::DeepMlp) return nn::mlp({12, 16, 16, 16, 8, 3});
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, 1, 1, false), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4 * 4 * 4, 3)});
}

struct Batch {
  Tensor inputs, targets;  // on cpu:0
};

// `steps` batches of `batch` examples for the model kind, fixed by the seed: a GPT's are windows
// of kGptWindow token ids with their next tokens, (batch, kGptWindow) each.
inline std::vector<Batch> make_batches(ModelKind kind, int steps, int64_t batch, uint64_t seed = 7) {
  manual_seed(seed);
  std::vector<Batch> out;
  for (int s = 0; s < steps; ++s) {
    if (kind == ModelKind::Gpt) {
      out.push_back({argmax(randn({batch, kGptWindow, kGptVocab}), 2), argmax(randn({batch, kGptWindow, kGptVocab}), 2)});
      continue;
    }
    const Shape shape = kind == ModelKind::CnnWithBatchNorm ? Shape{batch, 1, 8, 8} : Shape{batch, 12};
    Tensor x = randn(shape);
    Tensor y = argmax(randn({batch, 3}), 1);  // Int64 classes in [0, 3)
    out.push_back({x, y});
  }
  return out;
}

// The micro-batch's loss, scaled by its share of the global batch (parallel/data/micro_batches.h):
// logits (b, C) with targets (b), or a GPT's (b, T, V) with (b, T).
inline Tensor scaled_loss(const Tensor& logits, const Tensor& targets, int64_t batch) {
  return mul(cross_entropy_flat(logits, targets), double(targets.size(0)) / double(batch));
}

inline optim::SGD make_sgd(const nn::Module& model) {
  return optim::SGD(model.parameters(), {.lr = 0.1, .momentum = 0.9});
}

// One device: every batch as `parts` micro-batches accumulated in order, then a step of
// `optimizer` (null: make_sgd's).
inline void train_reference(nn::Module& model, const std::vector<Batch>& batches, int64_t parts,
                            optim::Optimizer* optimizer = nullptr) {
  optim::SGD own = make_sgd(model);
  optim::Optimizer& sgd = optimizer != nullptr ? *optimizer : own;
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

// A data-parallel rank's part of a step: micro-batch comm.rank() of b's split across the ranks,
// forward through `model`, backward of its loss scaled by its share of b.
inline void backward_rank_part(parallel::Communicator& comm, const Batch& b, nn::Module& model) {
  const int64_t n = b.inputs.size(0);
  const auto chunk = parallel::split_batch(n, comm.size())[size_t(comm.rank())];
  const Tensor x = b.inputs.slice(0, chunk.begin, chunk.end).to(comm.device());
  const Tensor y = b.targets.slice(0, chunk.begin, chunk.end).to(comm.device());
  scaled_loss(model.forward(x), y, n).backward();
}

// Trains `kind` with DDP (reduce_op Sum) over `run` on `devices`: rank r starts from seed
// 1 + r * seed_step (DDP's broadcast from rank 0 must make them equal), takes micro-batch r of
// each global batch (parallel/data/micro_batches.h) and scales its loss by its share. Returns each
// rank's module.
inline std::vector<std::shared_ptr<nn::Module>> train_ddp(Backend run, const std::vector<Device>& devices,
                                                          ModelKind kind, const std::vector<Batch>& batches,
                                                          uint64_t seed_step = 1) {
  const int ranks = int(devices.size());
  std::vector<std::shared_ptr<nn::Module>> models;
  for (int r = 0; r < ranks; ++r) models.push_back(make_model(kind, 1 + uint64_t(r) * seed_step));
  run(devices, [&](parallel::Communicator& comm) {
    const auto model = models[size_t(comm.rank())];
    model->to(comm.device());
    parallel::DistributedDataParallel ddp(model, comm, {.reduce_op = parallel::ReduceOp::Sum});
    optim::SGD sgd = make_sgd(ddp);
    for (const Batch& b : batches) {
      sgd.zero_grad();
      backward_rank_part(comm, b, ddp);
      sgd.step();
    }
  });
  return models;
}

// A layer that passes its input through and calls on_forward each time it runs (on whichever
// thread runs it): when a model's forward gets there, and in what state.
struct ForwardProbe : nn::Cloneable<ForwardProbe> {
  explicit ForwardProbe(std::function<void()> on_forward) : on_forward(std::move(on_forward)) {}
  std::function<void()> on_forward;
  Tensor forward(const Tensor& x) override {
    on_forward();
    return x;
  }
  std::string name() const override { return "ForwardProbe"; }
};

// What a pipeline cuts, and ZeRO-3's layers: the model itself, or a GPT's layers().
inline std::shared_ptr<nn::Sequential> pipeline_layers(const std::shared_ptr<nn::Module>& model) {
  if (const auto gpt = std::dynamic_pointer_cast<nn::GPT>(model)) return gpt->layers();
  return std::dynamic_pointer_cast<nn::Sequential>(model);
}

// How train_zero builds each rank's optimizer: the groups of a model, the shard's optimizer, and
// the stage and units (gradients summed: the losses are scaled by their share).
struct ZeroSetup {
  std::function<std::vector<optim::ParamGroup>(const nn::Module&)> groups = [](const nn::Module& m) {
    return std::vector<optim::ParamGroup>{{.params = m.parameters()}};
  };
  parallel::ZeroOptimizer::MakeOptimizer make = [](std::vector<optim::ParamGroup> g) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(std::move(g), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});  // make_sgd's
  };
  parallel::ZeroOptions options = {.reduce_op = parallel::ReduceOp::Sum};
};

// Trains `kind` with ZeRO (parallel::ZeroOptimizer, setup.options) over `run` on `devices`, as
// train_ddp does: rank r starts from seed 1 + 100 r (the broadcast must equalise them) and takes
// micro-batch r of each batch (stage 3: through zero.model(), the model's parameters gathered at
// the end). `before` (may be empty) runs first on each rank's optimizer and model, `after` at the
// end. Returns each rank's module.
inline std::vector<std::shared_ptr<nn::Module>> train_zero(
    Backend run, const std::vector<Device>& devices, ModelKind kind, const std::vector<Batch>& batches,
    const ZeroSetup& setup = {}, const std::function<void(parallel::ZeroOptimizer&, nn::Module&)>& before = {},
    const std::function<void(parallel::ZeroOptimizer&, parallel::Communicator&)>& after = {}) {
  const int ranks = int(devices.size());
  std::vector<std::shared_ptr<nn::Module>> models;
  for (int r = 0; r < ranks; ++r) models.push_back(make_model(kind, 1 + uint64_t(r) * 100));
  run(devices, [&](parallel::Communicator& comm) {
    nn::Module& model = *models[size_t(comm.rank())];
    model.to(comm.device());
    const bool stage3 = setup.options.stage == 3;
    parallel::ZeroOptimizer zero(setup.groups(model), comm, setup.make, setup.options,
                                 stage3 ? pipeline_layers(models[size_t(comm.rank())]) : nullptr);
    if (before) before(zero, model);
    for (const Batch& b : batches) {
      zero.zero_grad();
      backward_rank_part(comm, b, stage3 ? zero.model() : model);
      zero.step();
    }
    zero.gather_parameters();  // stage 3: the returned models readable
    if (after) after(zero, comm);
  });
  return models;
}

// The batches with their tensors on `device`.
inline std::vector<Batch> batches_on(const std::vector<Batch>& batches, const Device& device) {
  std::vector<Batch> moved;
  for (const Batch& b : batches) moved.push_back({b.inputs.to(device), b.targets.to(device)});
  return moved;
}

// `kind` (from seed 1) on `device`, trained by train_reference on the batches moved there.
inline std::shared_ptr<nn::Module> reference_model(ModelKind kind, const std::vector<Batch>& batches, int64_t parts,
                                                   const Device& device) {
  auto model = make_model(kind, 1);
  model->to(device);
  train_reference(*model, batches_on(batches, device), parts);
  return model;
}

// Trains `kind` (from seed 1) as a pipeline over `devices`, a stage each (options: the schedule,
// the micro-batches, how the stage threads are run), an SGD step per batch. Returns the model.
inline std::shared_ptr<nn::Module> train_pipeline(ModelKind kind, const std::vector<Device>& devices,
                                                  const std::vector<Batch>& batches,
                                                  parallel::PipelineOptions options) {
  auto model = make_model(kind, 1);
  parallel::Pipeline pipeline(pipeline_layers(model), devices, std::move(options));
  optim::SGD sgd = make_sgd(*model);
  for (const Batch& b : batches) {
    sgd.zero_grad();
    pipeline.step(b.inputs, b.targets);
    sgd.step();
  }
  return model;
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
