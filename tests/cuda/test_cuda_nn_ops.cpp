// tests/cuda/test_cuda_nn_ops.cpp — the nn ops of autograd/nn_ops.h on cuda:0 against the CPU:
// linear (cuBLAS or the native GEMM, with gradient destinations), cross_entropy
// (kernels/cuda/loss.cu), embedding (kernels/cuda/index.cu), batch_norm and layer_norm
// (kernels/cuda/norm.cu; their kernels alone in test_cuda_norm.cpp), dropout, mse_loss, causal
// attention (and its kernels with bf16 and fp16 inputs) and the tiny GPT; forward results and the
// gradients of every input, plus the index errors that CUDA must raise like the CPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "multigrad/kernels/attention.h"
#include "multigrad/kernels/index.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("cuda: cross_entropy forward and backward match the CPU at several class counts", "[cuda]") {
  // 3000 rows: more than the grid's blocks on any GPU (kBlocksPerSm per SM), so blocks loop.
  const std::vector<std::pair<int64_t, int64_t>> sizes{{1, 10}, {257, 10}, {3000, 10}, {64, 1000}, {8, 3000}, {5, 1}};
  for (auto [rows, cols] : sizes) {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      INFO("N = " << rows << ", C = " << cols << ", " << dtype);
      Tensor logits = cpu_input({rows, cols}, dtype, 7, 5.0);
      logits.requires_grad_();
      Tensor targets = int64s(indices_below(rows, cols, 8), {rows});
      // Float32 rows sum in float32 on CUDA and in float64 on the CPU: a few ulps of lse.
      const double tol = dtype == DType::Float32 ? 2e-5 : 1e-12;
      check_forward_backward([&](const TensorList& in) { return cross_entropy(in[0], in[1]); }, {logits, targets},
                             tol, tol);
    }
  }
}

TEST_CASE("cuda: linear forward and backward match the CPU, with and without bias", "[cuda]") {
  const std::vector<Shape> inputs{{5}, {33, 70}, {4, 9, 70}, {0, 70}};
  for (const Shape& shape : inputs) {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      INFO("input " << to_string(shape) << ", " << dtype);
      const int64_t in = shape.back();
      Tensor x = cpu_input(shape, dtype, 3), w = cpu_input({40, in}, dtype, 4), b = cpu_input({40}, dtype, 5);
      x.requires_grad_();
      w.requires_grad_();
      b.requires_grad_();
      const double tol = dtype == DType::Float32 ? 1e-4 : 1e-12;
      check_forward_backward([](const TensorList& t) { return linear(t[0], t[1], t[2]); }, {x, w, b}, tol, tol);
      check_forward_backward([](const TensorList& t) { return linear(t[0], t[1]); }, {x, w}, tol, tol);
    }
  }
}

TEST_CASE("cuda: linear writes its weight and bias gradients into their destinations", "[cuda]") {
  Tensor x = cpu_input({16, 24}, DType::Float32, 6), w = cpu_input({8, 24}, DType::Float32, 7);
  Tensor b = cpu_input({8}, DType::Float32, 8);
  w.requires_grad_();
  b.requires_grad_();
  mul(linear(x, w, b), linear(x, w, b)).sum().backward();
  Tensor xg = x.to(gpu()), wg = w.detach().to(gpu()).requires_grad_(), bg = b.detach().to(gpu()).requires_grad_();
  const Tensor flat = zeros({8 * 24 + 8}, {.device = gpu()});
  set_grad_destination(wg, flat.slice(0, 0, 8 * 24).view({8, 24}));
  set_grad_destination(bg, flat.slice(0, 8 * 24, 8 * 24 + 8));
  mul(linear(xg, wg, bg), linear(xg, wg, bg)).sum().backward();
  REQUIRE(wg.grad().data_ptr() == flat.data_ptr());
  expect_close(wg.grad(), w.grad(), 1e-4, 1e-4);
  expect_close(bg.grad(), b.grad(), 1e-4, 1e-4);
}

TEST_CASE("cuda: cross_entropy names the first target out of range and C", "[cuda]") {
  std::vector<int64_t> t = indices_below(300, 10, 9);
  t[100] = 10;
  t[200] = -3;
  Tensor logits = zeros({300, 10}, {.device = gpu()});
  require_error([&] { cross_entropy(logits, int64s(t, {300}, gpu())); }, {"cross_entropy", "target 10", "row 100",
                                                                           "C = 10"});
  // The device is usable afterwards: the error came from a flag, not a device-side assert.
  t[100] = 0;
  t[200] = 0;
  CHECK(std::abs(cross_entropy(logits, int64s(t, {300}, gpu())).item<double>() - std::log(10.0)) < 1e-6);
}

TEST_CASE("cuda: cross_entropy of an empty batch is NaN", "[cuda]") {
  Tensor loss = cross_entropy(zeros({0, 4}, {.device = gpu()}), int64s({}, {0}, gpu()));
  CHECK(std::isnan(loss.item<double>()));
}

TEST_CASE("cuda: embedding forward and backward with many duplicates match the CPU", "[cuda]") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    INFO(dtype);
    Tensor weight = cpu_input({50, 33}, dtype, 10);
    weight.requires_grad_();
    Tensor indices = int64s(indices_below(1000, 50, 11), {20, 50});
    // A gather, and sums of ~20 rows per index in the CPU's order: exact.
    check_forward_backward([](const TensorList& in) { return embedding(in[0], in[1]); }, {weight, indices}, 0, 0);
  }
}

TEST_CASE("cuda: embedding backward adds onto grad_weight in the CPU's order, bit for bit", "[cuda]") {
  // n = 1, below, at and above a power of two (the sort's padding), and one row taking every index.
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int64_t n : {1, 7, 64, 1000, 1025, 300}) {
      INFO(dtype << ", n = " << n);
      std::vector<int64_t> idx = indices_below(n, 50, 20 + n);
      if (n == 300) std::fill(idx.begin(), idx.end(), 3);
      const Tensor start = cpu_input({50, 33}, dtype, 30), grad_out = cpu_input({n, 33}, dtype, 31);
      Tensor on_cpu = start.clone(), on_gpu = start.to(gpu());
      const auto add = [](const Tensor& g, const Tensor& i, const Tensor& table) {
        kernels::index_add(g.view({1, g.size(0), 33}), i, table.view({1, 50, 33}), false, "embedding backward");
      };
      add(grad_out, int64s(idx, {n}), on_cpu);
      add(grad_out.to(gpu()), int64s(idx, {n}, gpu()), on_gpu);
      expect_equal(on_gpu, on_cpu);
    }
  }
}

TEST_CASE("cuda: embedding names the first index out of range and V", "[cuda]") {
  std::vector<int64_t> idx = indices_below(5000, 7, 12);
  idx[4000] = 7;
  idx[4500] = -1;
  Tensor weight = zeros({7, 16}, {.device = gpu()});
  require_error([&] { embedding(weight, int64s(idx, {5000}, gpu())); }, {"embedding", "index 7", "position 4000",
                                                                         "[0, 7)"});
  // With D == 0 there is nothing to copy, but the indices are still checked.
  require_error([&] { embedding(zeros({7, 0}, {.device = gpu()}), int64s({0, 9}, {2}, gpu())); }, {"index 9", "[0, 7)"});
}

TEST_CASE("cuda: batch_norm training, running stats and eval match the CPU", "[cuda]") {
  Tensor x = cpu_input({6, 3, 5, 4}, DType::Float64, 13);
  x.requires_grad_();
  Tensor weight = cpu_input({3}, DType::Float64, 14), bias = cpu_input({3}, DType::Float64, 15);
  weight.requires_grad_();
  bias.requires_grad_();
  Tensor rm_cpu = zeros({3}, {.dtype = DType::Float64}), rv_cpu = ones({3}, {.dtype = DType::Float64});
  Tensor rm_gpu = rm_cpu.to(gpu()), rv_gpu = rv_cpu.to(gpu());
  check_forward_backward(
      [&](const TensorList& in) {
        const bool on_gpu = in[0].device().is_cuda();
        return batch_norm(in[0], on_gpu ? rm_gpu : rm_cpu, on_gpu ? rv_gpu : rv_cpu, in[1], in[2], true);
      },
      {x, weight, bias}, 1e-10, 1e-12);
  expect_close(rm_gpu, rm_cpu, 1e-12, 1e-14);
  expect_close(rv_gpu, rv_cpu, 1e-12, 1e-14);
  check_forward_backward(
      [&](const TensorList& in) {
        const bool on_gpu = in[0].device().is_cuda();
        return batch_norm(in[0], on_gpu ? rm_gpu : rm_cpu, on_gpu ? rv_gpu : rv_cpu, in[1], in[2], false);
      },
      {x, weight, bias}, 1e-10, 1e-12);
}

TEST_CASE("cuda: layer_norm forward and backward match the CPU", "[cuda]") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    INFO(dtype);
    Tensor x = cpu_input({7, 4, 33}, dtype, 16);
    Tensor weight = cpu_input({4, 33}, dtype, 17), bias = cpu_input({4, 33}, dtype, 18);
    for (Tensor* t : {&x, &weight, &bias}) t->requires_grad_();
    // Float32 means and variances are tree sums on CUDA, float64 sums on the CPU.
    const double tol = dtype == DType::Float32 ? 1e-4 : 1e-10;
    check_forward_backward([](const TensorList& in) { return layer_norm(in[0], {4, 33}, in[1], in[2]); },
                           {x, weight, bias}, tol, tol);
  }
}

TEST_CASE("cuda: dropout draws the CPU's mask for the same seed", "[cuda]") {
  Tensor x = cpu_input({37, 129}, DType::Float32, 19);
  x.requires_grad_();
  check_forward_backward(
      [](const TensorList& in) {
        manual_seed(2024);
        return dropout(in[0], 0.35, true);
      },
      {x}, 0.0, 0.0);
}

TEST_CASE("cuda: mse_loss forward and backward match the CPU", "[cuda]") {
  Tensor input = cpu_input({31, 17}, DType::Float64, 20), target = cpu_input({31, 17}, DType::Float64, 21);
  input.requires_grad_();
  target.requires_grad_();
  check_forward_backward([](const TensorList& in) { return mse_loss(in[0], in[1]); }, {input, target}, 1e-12, 1e-14);
}

TEST_CASE("cuda: scaled_dot_product_attention (the fused kernels) matches the CPU's, causal or not", "[cuda]") {
  struct Case {
    Shape q, k;  // (B, H, L, E) and (B, H, S, E); v is (B, H, S, f)
    int64_t f;
    bool causal;
  };
  // kernels/cuda/attention.cu's tiles: 128 rows (float, widths <= 32) down to 16 (double, <= 128).
  const std::vector<Case> cases{
      {{2, 3, 37, 8}, {2, 3, 37, 8}, 8, true},        // a transformer's heads
      {{1, 2, 9, 5}, {1, 2, 4, 5}, 5, true},          // more queries than keys
      {{1, 2, 5, 6}, {1, 2, 9, 6}, 3, false},         // fewer, and F != E
      {{1, 1, 150, 8}, {1, 1, 150, 8}, 8, true},      // two tiles of 128 (float)
      {{1, 2, 70, 64}, {1, 2, 70, 64}, 64, true},     // 64 wide: tiles of 64 or 32 rows
      {{1, 1, 37, 100}, {1, 1, 37, 100}, 100, false}, // 128 wide: tiles of 32 or 16 rows
      {{1, 1, 5, 130}, {1, 1, 5, 130}, 130, true},    // wider than the fused kernel: the math path
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases) {
      INFO(detail::str_cat(dtype, " q ", c.q, " k ", c.k, " F ", c.f, " causal ", c.causal));
      Shape vs = c.k;
      vs.back() = c.f;
      Tensor q = cpu_input(c.q, dtype, 20), k = cpu_input(c.k, dtype, 21), v = cpu_input(vs, dtype, 22);
      for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
      // Float32: the two devices sum the dot products (up to 130 terms) and the softmax's rows
      // (up to 150) in other orders, each within that many roundings of values of order 1.
      const double tol = dtype == DType::Float32 ? 1e-4 : 1e-10;
      const bool causal = c.causal;
      check_forward_backward(
          [causal](const TensorList& in) { return scaled_dot_product_attention(in[0], in[1], in[2], causal); },
          {q, k, v}, tol, tol);
    }
  }
}

// The attention kernels told that their inputs hold bf16 or fp16 values (kernels/attention.h):
// they round the probabilities and dS where the CPU's do. Rounding moves each result by about one
// rounding of each term from what the same kernels give unrounded (Float32 inputs); the CPU's
// rounded result is the yardstick. The backward, given the CPU forward's out and lse, rounds the
// same p and ds as the CPU's, so its distance to the CPU's result (float32's other summation order,
// and a term whose two float32 values fall on either side of a rounding midpoint: rare) is far
// below the rounding's: a quarter of it at most, over all elements. The forward rounds against
// the running max of its online softmax where the CPU's rounds against the row's max: other
// numbers rounded, so its distance to the unrounded result must be the CPU's, within a factor 2
// either way (a forward that did not round would be 1000 times closer).
TEST_CASE("cuda: attention kernels with bf16 and fp16 inputs round where the CPU's do", "[cuda][autocast]") {
  namespace k = mg::kernels;
  const auto norm = [](const Tensor& a, const Tensor& b) {
    const std::vector<double> x = a.to(Device("cpu")).to_vector<double>(), y = b.to(Device("cpu")).to_vector<double>();
    double sum = 0;
    for (size_t i = 0; i < x.size(); ++i) sum += (x[i] - y[i]) * (x[i] - y[i]);
    return std::sqrt(sum);
  };
  // The forward's out and lse, then given them (on the CPU) the backward's gradients, on `device`.
  const auto run = [](const TensorList& cpu_in, const Tensor& cpu_g, bool causal, double scale, k::GemmInputs inputs,
                      const Device& device, const TensorList& given = {}) {
    TensorList in;
    for (const Tensor& t : cpu_in) in.push_back(t.to(device));
    const Tensor g = cpu_g.to(device);
    Tensor out = Tensor::empty({in[0].size(0), in[0].size(1), in[0].size(2), in[2].size(3)}, in[0].options());
    Tensor lse = Tensor::empty({in[0].size(0), in[0].size(1), in[0].size(2)}, in[0].options());
    k::attention_fwd(in[0], in[1], in[2], causal, scale, out, lse, inputs);
    const Tensor bwd_out = given.empty() ? out : given[0].to(device), bwd_lse = given.empty() ? lse : given[1].to(device);
    TensorList results{out, lse};
    for (const Tensor& t : in) results.push_back(Tensor::empty(t.shape(), t.options()));
    k::attention_bwd(g, in[0], in[1], in[2], bwd_out, bwd_lse, causal, scale, results[2], results[3], results[4],
                     inputs);
    return results;
  };
  for (const auto& [inputs, unary] : {std::pair{k::GemmInputs::BFloat16, k::UnaryOp::RoundBFloat16},
                                      std::pair{k::GemmInputs::Float16, k::UnaryOp::RoundFloat16}}) {
    const auto rounded = [unary](const Tensor& t) {
      Tensor out = Tensor::empty(t.shape(), t.options());
      k::unary(unary, t, out);
      return out;
    };
    // E = 12: a scale that is no power of two, so where ds is rounded (before scaling) matters.
    for (const bool causal : {true, false}) {
      INFO((inputs == k::GemmInputs::BFloat16 ? "bf16" : "fp16") << " causal " << causal);
      const TensorList in{rounded(cpu_input({1, 2, 150, 12}, DType::Float32, 30)),
                          rounded(cpu_input({1, 2, 150, 12}, DType::Float32, 31)),
                          rounded(cpu_input({1, 2, 150, 16}, DType::Float32, 32))};
      const Tensor g = rounded(cpu_input({1, 2, 150, 16}, DType::Float32, 33));
      const double scale = 1.0 / std::sqrt(12.0);
      const Device cpu("cpu");
      // The backwards read the CPU forward's output rounded, as autocast gives it, and its lse.
      const TensorList forward = run(in, g, causal, scale, inputs, cpu);
      const TensorList given{rounded(forward[0]), forward[1]};
      const TensorList want = run(in, g, causal, scale, inputs, cpu, given);
      const TensorList unrounded = run(in, g, causal, scale, k::GemmInputs::Float32, cpu, given);
      const TensorList got = run(in, g, causal, scale, inputs, gpu(), given);
      const double forward_rounding = norm(want[0], unrounded[0]), forward_error = norm(got[0], unrounded[0]);
      INFO("forward: the GPU " << forward_error << " from the unrounded result, the CPU " << forward_rounding);
      CHECK(forward_error <= 2 * forward_rounding);
      CHECK(forward_error >= forward_rounding / 2);
      expect_close(got[1], want[1], 1e-5, 1e-5);  // lse: no rounding in it
      for (size_t i = 2; i < 5; ++i) {
        INFO("gradient of " << "qkv"[i - 2] << ": the GPU " << norm(got[i], want[i]) << " from the CPU's, rounding "
                            << norm(want[i], unrounded[i]));
        CHECK(norm(got[i], want[i]) <= norm(want[i], unrounded[i]) / 4);
      }
    }
  }
}

TEST_CASE("cuda: the tiny GPT's logits and every gradient match the CPU", "[cuda]") {
  manual_seed(8);
  auto on_cpu = nn::gpt(nn::gpt_config("tiny", 40));
  on_cpu->to(DType::Float64);
  auto on_gpu = std::dynamic_pointer_cast<nn::GPT>(on_cpu->clone());
  on_gpu->to(gpu());
  std::vector<int64_t> ids = indices_below(3 * 16, 40, 23), next = indices_below(3 * 16, 40, 24);
  Tensor want = cross_entropy(on_cpu->forward(int64s(ids, {3, 16})).reshape({48, 40}), int64s(next, {48}));
  Tensor got = cross_entropy(on_gpu->forward(int64s(ids, {3, 16}, gpu())).reshape({48, 40}), int64s(next, {48}, gpu()));
  expect_close(got, want, 1e-10, 1e-12);
  want.backward();
  got.backward();
  const auto cpu_params = on_cpu->named_parameters(), gpu_params = on_gpu->named_parameters();
  REQUIRE(cpu_params.size() == gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    INFO(cpu_params[i].first);
    REQUIRE(gpu_params[i].second.grad().defined());
    expect_close(gpu_params[i].second.grad(), cpu_params[i].second.grad(), 1e-9, 1e-12);
  }
}

TEST_CASE("cuda: a recomputed GPT's gradients equal the plain run's bit for bit, and the CPU's", "[cuda]") {
  nn::GPTConfig config = nn::gpt_config("tiny", 40);
  config.dropout = 0.1;  // the recomputation must replay the masks
  manual_seed(8);
  auto on_cpu = nn::gpt(config);
  on_cpu->to(DType::Float64);
  auto on_gpu = std::dynamic_pointer_cast<nn::GPT>(on_cpu->clone());
  on_gpu->to(gpu());
  const std::vector<int64_t> ids = indices_below(3 * 16, 40, 23), next = indices_below(3 * 16, 40, 24);
  // The gradients of one step, the dropout masks drawn from seed 9.
  auto grads = [&](nn::GPT& model, bool recompute, const Device& device) {
    model.set_recompute(recompute);
    for (const Tensor& p : model.parameters()) p.set_grad(Tensor());
    manual_seed(9);
    cross_entropy(model.forward(int64s(ids, {3, 16}, device)).reshape({48, 40}), int64s(next, {48}, device)).backward();
    TensorList out;
    for (const Tensor& p : model.parameters()) out.push_back(p.grad().to(Device("cpu")));
    return out;
  };
  const TensorList plain = grads(*on_gpu, false, gpu()), recomputed = grads(*on_gpu, true, gpu());
  const TensorList cpu = grads(*on_cpu, true, Device("cpu"));
  REQUIRE(plain.size() == recomputed.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("parameter " << i);
    CHECK(plain[i].to_vector<double>() == recomputed[i].to_vector<double>());
    expect_close(recomputed[i], cpu[i], 1e-9, 1e-12);
  }
}

// Autocast on CUDA: the tiny GPT's logits, loss and every gradient under bf16 and fp16 against the
// same model in float64, beside the CPU's autocast run. The two devices round the same operands
// and results to the same precision and sum the products in other float32 orders (a sum near a
// rounding midpoint may round the other way: one step of the precision, the kind of error both
// make already), so the test asks what the golden test asks of PyTorch's autocast
// (tests/golden/test_golden.cpp): the GPU's error within twice the CPU's (or one rounding of the
// largest value where the CPU's is smaller), the two within three times that apart, and the GPU's
// error at least a quarter of the CPU's (a GPU path that did not round would be 1000 times closer).
TEST_CASE("cuda: the tiny GPT under bf16 and fp16 autocast is as far from float64 as the CPU's autocast run",
          "[cuda][autocast]") {
  manual_seed(8);
  auto exact = nn::gpt(nn::gpt_config("tiny", 40));
  exact->to(DType::Float64);
  const std::vector<int64_t> ids = indices_below(3 * 16, 40, 23), next = indices_below(3 * 16, 40, 24);
  // The logits, the loss and every gradient of `model` on `device`, under `precision`.
  const auto run = [&](nn::GPT& model, const Device& device, Precision precision) {
    Tensor logits, loss;
    {
      AutocastGuard autocast(precision);
      logits = model.forward(int64s(ids, {3, 16}, device)).reshape({48, 40});
      loss = cross_entropy(logits, int64s(next, {48}, device));
    }
    loss.backward();
    TensorList out{logits.detach().to(Device("cpu")), loss.detach().to(Device("cpu"))};
    for (const Tensor& p : model.parameters()) out.push_back(p.grad().to(Device("cpu")));
    return out;
  };
  const TensorList want = run(*exact, Device("cpu"), Precision::Float32);
  for (Precision precision : {Precision::BFloat16, Precision::Float16}) {
    const double u = precision == Precision::BFloat16 ? 0x1p-8 : 0x1p-11;
    auto on_cpu = std::dynamic_pointer_cast<nn::GPT>(exact->clone());
    on_cpu->to(DType::Float32);
    auto on_gpu = std::dynamic_pointer_cast<nn::GPT>(on_cpu->clone());
    on_gpu->to(gpu());
    const TensorList cpu = run(*on_cpu, Device("cpu"), precision), got = run(*on_gpu, gpu(), precision);
    for (size_t i = 0; i < want.size(); ++i) {
      const std::vector<double> w = want[i].to_vector<double>(), c = cpu[i].to(DType::Float64).to_vector<double>(),
                                g = got[i].to(DType::Float64).to_vector<double>();
      double cpu_error = 0, gpu_error = 0, apart = 0, largest = 0;
      for (size_t j = 0; j < w.size(); ++j) {
        cpu_error = std::max(cpu_error, std::abs(c[j] - w[j]));
        gpu_error = std::max(gpu_error, std::abs(g[j] - w[j]));
        apart = std::max(apart, std::abs(g[j] - c[j]));
        largest = std::max(largest, std::abs(w[j]));
      }
      const double scale = std::max(cpu_error, u * largest);
      INFO((precision == Precision::BFloat16 ? "bf16" : "fp16")
           << ", tensor " << i << " (logits, loss, then the gradients): the GPU's error " << gpu_error
           << ", the CPU's " << cpu_error << ", apart " << apart);
      CHECK(gpu_error <= 2 * scale);
      CHECK(apart <= 3 * scale);
      CHECK(gpu_error >= cpu_error / 4);
    }
  }
}
