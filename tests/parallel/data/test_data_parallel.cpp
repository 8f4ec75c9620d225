// tests/parallel/data/test_data_parallel.cpp — DataParallel (parallel/data/data_parallel.cpp) on CPU
// devices: its forward equals the module's on the same rows, its gradients and training equal
// `--grad-accum` on one device bit for bit, the input's gradient, batch-norm buffers, small
// batches, errors.
#include "core/cpu_devices_guard.h"
#include "parallel/parallel_test_util.h"

using mg::Device;
using mg::Tensor;
using mg::parallel::DataParallel;
using namespace mg::test;

namespace {

// Training with DataParallel over `devices`: the loss of each device's rows, scaled by their
// share (the split of parallel/data/micro_batches.h), as `multigrad train --parallel dp` computes it.
void train_dp(DataParallel& dp, const std::vector<Batch>& batches) {
  mg::optim::SGD sgd = make_sgd(dp);
  for (const Batch& b : batches) {
    sgd.zero_grad();
    const int64_t n = b.inputs.size(0);
    const Tensor logits = dp.forward(b.inputs);
    Tensor loss;
    for (const auto& c : mg::parallel::split_batch(n, int64_t(dp.devices().size()))) {
      const Tensor part = scaled_loss(logits.slice(0, c.begin, c.end), b.targets.slice(0, c.begin, c.end), n);
      loss = loss.defined() ? mg::add(loss, part) : part;
    }
    loss.backward();
    sgd.step();
  }
}

// The module's forward over the rows DataParallel gives each of `devices` devices
// (parallel/data/micro_batches.h), one chunk after another, concatenated. This, not one forward over
// the whole batch, is what DataParallel's output equals bit for bit: BLAS may round a row of a
// GEMM over 7 rows differently from the same row of a GEMM over 3 (OpenBLAS's Haswell and
// Prescott kernels do), so only the same row blocks give the same bits.
std::vector<double> forward_in_chunks(mg::nn::Module& model, const Tensor& x, int devices) {
  mg::NoGradGuard no_grad;
  std::vector<Tensor> parts;
  for (const auto& c : mg::parallel::split_batch(x.size(0), devices)) parts.push_back(model.forward(x.slice(0, c.begin, c.end)));
  return values(mg::cat(parts));
}

}  // namespace

TEST_CASE("dp forward equals the module's forward on the same rows", "[parallel][dp]") {
  CpuDevicesGuard guard(3);
  auto model = make_model(ModelKind::Mlp, 1);
  const Tensor x = make_batches(ModelKind::Mlp, 1, 7)[0].inputs;
  const auto want = forward_in_chunks(*model, x, 3);  // rows 3, 2, 2
  DataParallel dp(model, cpu_devices(3));
  const Tensor y = dp.forward(x);
  CHECK(y.device() == Device("cpu:0"));
  CHECK(y.shape() == mg::Shape{7, 3});
  CHECK(values(y) == want);
}

// Dropout inside the replicas: each draws its rows of the whole batch's mask (a DrawSliceScope),
// from the caller's generator, which then continues past the whole batch's draw, so the output,
// the input's gradient (the mask again, recomputed nowhere) and the next forward's mask are one
// device's. Replicas sharing the caller's generator would draw masks in thread order.
TEST_CASE("dp applies the dropout mask one device draws for the whole batch", "[parallel][dp]") {
  CpuDevicesGuard guard(3);
  auto model = std::make_shared<mg::nn::Sequential>();
  model->push_back(std::make_shared<mg::nn::Dropout>(0.5));
  const Tensor x = mg::tensor(pseudo_random(7 * 6, 70), {7, 6});
  mg::manual_seed(21);
  const auto want_first = values(model->forward(x));
  const auto want_second = values(model->forward(x));
  const mg::PhiloxState want_after = mg::get_rng_state();
  for (int devices : {2, 3}) {
    INFO(devices << " devices");
    DataParallel dp(model, cpu_devices(devices));
    mg::manual_seed(21);
    const Tensor input = x.detach().requires_grad_(true);
    const Tensor y = dp.forward(input);
    CHECK(values(y) == want_first);
    mg::backward({y}, {mg::ones_like(y)});
    CHECK(values(mg::mul(input.grad(), x)) == want_first);  // the gradient is the mask: x * mask
    CHECK(values(dp.forward(x)) == want_second);
    CHECK(mg::get_rng_state().offset == want_after.offset);
  }
}

TEST_CASE("dp over 2 and 3 devices trains bit-identically to --grad-accum, mlp and cnn with batch norm",
          "[parallel][dp]") {
  CpuDevicesGuard guard(3);
  for (ModelKind kind : {ModelKind::Mlp, ModelKind::CnnWithBatchNorm}) {
    const auto batches = make_batches(kind, 4, 10);  // 3 devices: rows 4, 3, 3
    for (int n : {2, 3}) {
      INFO(model_name(kind) << " on " << n << " devices");
      auto reference = make_model(kind, 1);
      train_reference(*reference, batches, n);
      auto model = make_model(kind, 1);
      DataParallel dp(model, cpu_devices(n));
      train_dp(dp, batches);
      REQUIRE(parameter_bytes(*model) == parameter_bytes(*reference));
      // Batch norm's statistics come from devices[0]'s rows only, as in PyTorch.
      for (const auto& [name, buffer] : model->named_buffers()) {
        INFO(name);
        CHECK(values(buffer) != values(reference->state_dict().at(name)));
      }
    }
  }
}

TEST_CASE("dp replicas compute in the caller's autocast precision, bit-identical to bf16 --grad-accum",
          "[parallel][dp][autocast]") {
  CpuDevicesGuard guard(2);
  mg::AutocastGuard autocast(mg::Precision::BFloat16);
  const auto batches = make_batches(ModelKind::Mlp, 2, 10);
  auto reference = make_model(ModelKind::Mlp, 1);
  train_reference(*reference, batches, 2);
  auto model = make_model(ModelKind::Mlp, 1);
  DataParallel dp(model, cpu_devices(2));
  train_dp(dp, batches);
  REQUIRE(parameter_bytes(*model) == parameter_bytes(*reference));
  mg::AutocastGuard off(mg::Precision::Float32);
  auto float32 = make_model(ModelKind::Mlp, 1);
  train_reference(*float32, batches, 2);
  CHECK(parameter_bytes(*float32) != parameter_bytes(*reference));
}

TEST_CASE("dp passes the gradient back to its input and into the module's parameters", "[parallel][dp]") {
  CpuDevicesGuard guard(2);
  auto model = make_model(ModelKind::Mlp, 1);
  const Batch b = make_batches(ModelKind::Mlp, 1, 5)[0];

  Tensor x_ref = b.inputs.clone().requires_grad_(true);
  mg::cross_entropy(model->forward(x_ref), b.targets).backward();
  const auto want_input = values(x_ref.grad());
  std::vector<std::vector<double>> want_grads;
  for (const Tensor& p : model->parameters()) {
    want_grads.push_back(values(p.grad()));
    p.set_grad(Tensor());
  }

  DataParallel dp(model, cpu_devices(2));
  for (int step = 0; step < 2; ++step) {  // the second: replicas must start again from zero
    for (const Tensor& p : model->parameters()) p.set_grad(Tensor());
    Tensor x = b.inputs.clone().requires_grad_(true);
    mg::cross_entropy(dp.forward(x), b.targets).backward();
    INFO("step " << step);
    require_close(values(x.grad()), want_input, 1e-5, 1e-7);
    const auto params = model->parameters();
    for (size_t p = 0; p < params.size(); ++p) require_close(values(params[p].grad()), want_grads[p], 1e-5, 1e-7);
  }
}

TEST_CASE("dp with fewer rows than devices uses as many devices as rows", "[parallel][dp]") {
  CpuDevicesGuard guard(4);
  auto model = make_model(ModelKind::Mlp, 1);
  const Batch b = make_batches(ModelKind::Mlp, 1, 2)[0];
  const auto want = forward_in_chunks(*model, b.inputs, 4);  // a row each on cpu:0 and cpu:1
  DataParallel dp(model, cpu_devices(4));
  const Tensor y = dp.forward(b.inputs);
  CHECK(values(y) == want);
  mg::sum(y).backward();
  for (const Tensor& p : model->parameters()) CHECK(p.grad().defined());
}

TEST_CASE("dp runs in evaluation without recording", "[parallel][dp]") {
  CpuDevicesGuard guard(2);
  auto model = make_model(ModelKind::CnnWithBatchNorm, 1);
  const Batch b = make_batches(ModelKind::CnnWithBatchNorm, 1, 6)[0];
  model->eval();
  const auto want = forward_in_chunks(*model, b.inputs, 2);
  DataParallel dp(model, cpu_devices(2));
  mg::NoGradGuard no_grad;
  const Tensor y = dp.forward(b.inputs);
  CHECK(!y.requires_grad());
  CHECK(values(y) == want);
}

TEST_CASE("dp refuses a module off devices[0], repeated devices and an empty batch", "[parallel][dp]") {
  CpuDevicesGuard guard(2);
  auto model = make_model(ModelKind::Mlp, 1);
  require_error([&] { DataParallel dp(model, {Device("cpu:1"), Device("cpu:0")}); },
                {"is on cpu:0 but the module must be on devices[0] = cpu:1"});
  require_error([&] { DataParallel dp(model, {Device("cpu:0"), Device("cpu:0")}); }, {"cpu:0 is listed twice"});
  require_error([&] { DataParallel dp(model, {Device("cpu:0"), Device("cpu:7")}); }, {"cpu:7"});
  DataParallel dp(model, cpu_devices(2));
  require_error([&] { dp.forward(mg::zeros({0, 12})); }, {"non-empty batch", "[0, 12]"});
}
