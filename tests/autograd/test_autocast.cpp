// autograd/autocast.h: round_to (values and gradient), the autocast ops (matmul, linear, conv2d,
// attention) rounding operands and result, their gradients, what autocast leaves alone, the
// guard's scope per thread, and checkpoint()'s recomputation under autocast.
#include <cstring>
#include <thread>

#include "multigrad/autograd/autocast.h"
#include "core/cpu_devices_guard.h"
#include "multigrad/kernels/attention.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

constexpr Precision kLower[] = {Precision::BFloat16, Precision::Float16};

std::vector<float> floats(const Tensor& t) { return t.to_vector<float>(); }

// Every value of t is a value of p (rounding leaves it as it is).
bool representable(const Tensor& t, Precision p) {
  NoGradGuard no_grad;
  return floats(round_to(t, p)) == floats(t);
}

Tensor random(const Shape& shape, uint64_t seed, double scale = 1.0, bool requires_grad = false) {
  std::vector<double> v = pseudo_random(size_t(numel_of(shape)), seed);
  for (double& x : v) x *= scale;
  Tensor t = tensor(v, shape).to(DType::Float32);
  if (requires_grad) t.requires_grad_(true);
  return t;
}

// Causal attention by the fused kernels (kernels/attention.h), told that q, k, v (B, H, L, E) and
// the output gradient g hold p's values, and given the output rounded, as autocast's attention
// does, without the autograd around: the output, then (g defined) the gradients of q, k and v.
std::vector<Tensor> attention_kernels(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, Precision p) {
  const double scale = 1.0 / std::sqrt(double(q.size(3)));
  const kernels::GemmInputs inputs = detail::gemm_inputs(p);
  const TensorList in{q.detach().contiguous(), k.detach().contiguous(), v.detach().contiguous()};
  const Tensor out = Tensor::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
  const Tensor lse = Tensor::empty({q.size(0), q.size(1), q.size(2)}, q.options());
  kernels::attention_fwd(in[0], in[1], in[2], true, scale, out, lse, inputs);
  if (!g.defined()) return {out};
  std::vector<Tensor> results{out};
  for (const Tensor& t : in) results.push_back(Tensor::empty(t.shape(), t.options()));
  kernels::attention_bwd(g.contiguous(), in[0], in[1], in[2], round_to(out, p), lse, true, scale, results[1],
                         results[2], results[3], inputs);
  return results;
}

}  // namespace

TEST_CASE("round_to rounds values and gradients, and passes Float32 through", "[autograd][autocast]") {
  for (Precision p : kLower) {
    INFO(precision_name(p));
    const Tensor x = random({40}, 1, 300.0, true);
    const Tensor y = round_to(x, p);
    CHECK(representable(y, p));
    CHECK(floats(y) != floats(x));
    const Tensor g = random({40}, 2, 1e-3);
    mg::backward({y}, {g});
    CHECK(floats(x.grad()) == floats(round_to(g, p)));
    CHECK(floats(x.grad()) != floats(g));
  }
  const Tensor x = random({3}, 3);
  CHECK(round_to(x, Precision::Float32).is_same(x));
  require_error([] { round_to(zeros({2}, {.dtype = DType::Float64}), Precision::BFloat16); },
                {"round_to(bf16)", "Float32", "Float64"});
}

TEST_CASE("autocast ops round their operands and their result", "[autograd][autocast]") {
  const Tensor a = random({5, 7}, 4, 3.0), b = random({7, 6}, 5, 3.0), bias = random({6}, 6);
  const Tensor image = random({2, 3, 6, 6}, 7), kernel = random({4, 3, 3, 3}, 8), kernel_bias = random({4}, 9);
  const Tensor q = random({2, 2, 5, 4}, 10, 2.0), k = random({2, 2, 5, 4}, 11, 2.0), v = random({2, 2, 5, 4}, 12);
  const std::vector<std::pair<std::string, std::function<Tensor(const std::vector<Tensor>&)>>> ops{
      {"matmul", [](const auto& x) { return matmul(x[0], x[1]); }},
      {"linear", [](const auto& x) { return linear(x[0], x[1].transpose(0, 1), x[2]); }},
      {"conv2d", [](const auto& x) { return conv2d(x[3], x[4], x[5], {.padding = {1, 1}}); }},
      {"attention", [](const auto& x) { return scaled_dot_product_attention(x[6], x[7], x[8], true); }},
      {"attention (math)", [](const auto& x) { return scaled_dot_product_attention_math(x[6], x[7], x[8], true); }},
  };
  const std::vector<Tensor> inputs{a, b, bias, image, kernel, kernel_bias, q, k, v};
  for (Precision p : kLower) {
    std::vector<Tensor> rounded;
    for (const Tensor& t : inputs) rounded.push_back(round_to(t, p));
    for (const auto& [name, op] : ops) {
      INFO(name << " in " << precision_name(p));
      Tensor got;
      {
        AutocastGuard autocast(p);
        got = op(inputs);
      }
      CHECK(got.dtype() == DType::Float32);
      CHECK(representable(got, p));
      // The same op, rounded by hand; the fused attention rounds its probabilities too, which
      // only its kernels can be told.
      const Tensor by_hand = name == "attention" ? attention_kernels(rounded[6], rounded[7], rounded[8], {}, p)[0]
                                                 : op(rounded);
      CHECK(floats(got) == floats(round_to(by_hand, p)));
      CHECK(floats(got) != floats(op(inputs)));                // and not what Float32 gives
    }
  }
}

TEST_CASE("autocast leaves Float64 operands and the other ops alone", "[autograd][autocast]") {
  const Tensor a = random({4, 5}, 13).to(DType::Float64), b = random({5, 3}, 14).to(DType::Float64);
  const Tensor x = random({4, 5}, 15, 3.0);
  AutocastGuard autocast(Precision::BFloat16);
  CHECK(values(matmul(a, b)) == values([&] {
          AutocastGuard off(Precision::Float32);
          return matmul(a, b);
        }()));
  // Norms, activations, losses and elementwise math compute in Float32 (the float32 list).
  CHECK(!representable(gelu(x), Precision::BFloat16));
  CHECK(!representable(layer_norm(x, {5}), Precision::BFloat16));
  CHECK(!representable(softmax(x, -1), Precision::BFloat16));
}

TEST_CASE("autocast linear's gradients multiply rounded gradients by rounded operands", "[autograd][autocast]") {
  for (Precision p : kLower) {
    INFO(precision_name(p));
    const Tensor x = random({9, 6}, 16, 2.0, true), w = random({4, 6}, 17, 1.0, true), b = random({4}, 18, 1.0, true);
    const Tensor c = random({9, 4}, 19, 3.0);  // d loss / d output
    {
      AutocastGuard autocast(p);
      sum(mul(linear(x, w, b), c)).backward();
    }
    // By hand, in Float32: out = r(r(x) r(w)^T + r(b)), so the output's gradient is r(c) and each
    // operand's gradient the product of it and the other rounded operand, rounded.
    const Tensor g = round_to(c, p);
    const Tensor gx = round_to(matmul(g, round_to(w.detach(), p)), p);
    const Tensor gw = round_to(matmul(g.transpose(0, 1), round_to(x.detach(), p)), p);
    const Tensor gb = round_to(sum(g, {0}), p);
    for (const Tensor& grad : {x.grad(), w.grad(), b.grad()}) {
      CHECK(grad.dtype() == DType::Float32);
      CHECK(representable(grad, p));
    }
    // Each gradient is a rounded sum of the same rounded products; the two orders of summation
    // differ by a few float32 ulps, which can move a result across a rounding midpoint of p: one
    // step of p (2^-7 relative for bf16's 8 significant bits, 2^-10 for fp16's 11) at most.
    const double step = p == Precision::BFloat16 ? 0x1p-7 : 0x1p-10;
    require_close(x.grad(), values(gx), step, 0);
    require_close(w.grad(), values(gw), step, 0);
    require_close(b.grad(), values(gb), step, 0);
  }
}

// What a backward keeps of a tensor holding bf16 (fp16) values (autocast.h's SavedOperand) it
// keeps in bf16 (fp16) and reads back exactly: the gradients equal those computed from a Float32
// copy of the same values, which is kept as it is.
TEST_CASE("backward keeps bf16 and fp16 values in two bytes and reads them back exactly", "[autograd][autocast]") {
  mg::test::CpuDevicesGuard guard(2);
  const Device device("cpu:1");
  for (const Precision lower : {Precision::BFloat16, Precision::Float16}) {
    INFO(precision_name(lower));
    const auto rounded_leaf = [&](const Tensor& t) { return round_to(t.detach(), lower).requires_grad_(); };
    const Tensor x = random({64, 128}, 20, 4.0).to(device).requires_grad_(), c = random({64, 128}, 21, 3.0).to(device);
    const Tensor leaf = rounded_leaf(x);
    const int64_t before = memory_stats(device).allocated;
    Tensor loss = sum(mul(gelu(round_to(x, lower)), c));
    // gelu's output (which mul reads) and its input in two bytes (not round_to's Float32 output):
    // one and a half Float32 activations, and the loss (a scalar: under 1 KiB).
    const int64_t activation_bytes = 64 * 128 * 4, kept = memory_stats(device).allocated - before;
    CHECK(kept >= activation_bytes + activation_bytes / 2);
    CHECK(kept < activation_bytes + activation_bytes / 2 + 1024);
    loss.backward();
    sum(mul(gelu(leaf), c)).backward();
    CHECK(floats(x.grad()) == floats(round_to(leaf.grad(), lower)));
    // Float32 values that are not round_to's are kept as they are: gelu of x keeps x itself (the
    // caller's), so only its output is new.
    const int64_t held = memory_stats(device).allocated;
    loss = sum(mul(gelu(x), c));
    CHECK(memory_stats(device).allocated - held < activation_bytes + 1024);
  }
}

// Attention under autocast keeps q, k, v (in bf16 for bf16) and its output rounded; its gradients
// are those of its kernels given the rounded values, the rounded output and the rounded output
// gradient, then rounded.
TEST_CASE("autocast attention's gradients are its kernels' on the rounded values and output", "[autograd][autocast]") {
  for (Precision p : kLower) {
    INFO(precision_name(p));
    const Tensor q = random({2, 3, 8, 4}, 22, 1.0, true), k = random({2, 3, 8, 4}, 23, 1.0, true),
                 v = random({2, 3, 8, 4}, 24, 1.0, true), g = random({2, 3, 8, 4}, 25, 1.0);
    {
      AutocastGuard autocast(p);
      sum(mul(scaled_dot_product_attention(q, k, v, true), g)).backward();
    }
    const std::vector<Tensor> want =
        attention_kernels(round_to(q, p), round_to(k, p), round_to(v, p), round_to(g, p), p);
    for (auto [through, by_kernels] : {std::pair{q, want[1]}, {k, want[2]}, {v, want[3]}})
      CHECK(floats(through.grad()) == floats(round_to(by_kernels, p)));
  }
}

TEST_CASE("the autocast guard nests, restores, and belongs to its thread", "[autograd][autocast]") {
  CHECK(autocast_precision() == Precision::Float32);
  {
    AutocastGuard outer(Precision::BFloat16);
    {
      AutocastGuard inner(Precision::Float16);
      CHECK(autocast_precision() == Precision::Float16);
      Precision other = Precision::BFloat16;
      std::thread([&] { other = autocast_precision(); }).join();
      CHECK(other == Precision::Float32);
    }
    CHECK(autocast_precision() == Precision::BFloat16);
  }
  CHECK(autocast_precision() == Precision::Float32);
}

TEST_CASE("checkpoint recomputes under the forward's autocast precision", "[autograd][autocast][checkpoint]") {
  const Tensor w = random({6, 6}, 20, 1.0, true);
  const Tensor x = random({5, 6}, 21, 2.0, true);
  const auto block = [&](const Tensor& h) { return gelu(linear(gelu(linear(h, w)), w)); };
  const auto grads = [&](bool recompute) {
    w.set_grad(Tensor());
    x.set_grad(Tensor());
    Tensor y;
    {
      AutocastGuard autocast(Precision::BFloat16);
      y = recompute ? checkpoint(block, x, {w}) : block(x);
    }
    sum(mul(y, y)).backward();  // with autocast off: the recomputation must restore it
    return std::make_pair(floats(w.grad()), floats(x.grad()));
  };
  CHECK(grads(true) == grads(false));
}
