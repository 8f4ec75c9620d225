// tests/autograd/test_tape.cpp — the autograd engine (autograd/tape.cpp): the walk, gradient
// accumulation, gradient destinations, retain_graph, node lifetime, on_grad_ready hooks, grad
// mode, anomaly detection, tapes on several threads, gradcheck itself, and the errors of each
// entry point.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "core/cpu_devices_guard.h"

using namespace mg;
using namespace mg::test;

namespace {

Tensor f64(const std::vector<double>& v, const Shape& shape, bool requires_grad = true) {
  return tensor(v, shape, {.dtype = DType::Float64, .requires_grad = requires_grad});
}

// An identity op that logs its backward into `log` (a marker in the walk's order).
Tensor marker(const Tensor& x, std::vector<std::string>& log, const std::string& name) {
  Tensor out = clone(x.detach());
  record("marker", {out}, {x}, [&log, name](const TensorList& g) {
    log.push_back(name);
    return TensorList{g[0]};
  });
  return out;
}

}  // namespace

// ---- the walk and accumulation ----

TEST_CASE("backward of a small expression gives hand-computed gradients", "[autograd]") {
  Tensor x = f64({1, 2}, {2}), w = f64({3, -1}, {2});
  Tensor loss = sum(mul(mul(x, w), x));  // sum(w x^2)
  REQUIRE(loss.requires_grad());
  REQUIRE_FALSE(loss.is_leaf());
  loss.backward();
  require_close(x.grad(), {6, -4});  // 2 w x
  require_close(w.grad(), {1, 4});   // x^2
}

TEST_CASE("fan-out sums the gradients of every use", "[autograd]") {
  Tensor x = f64({2, -3}, {2});
  Tensor y = add(add(mul(x, x), x), exp(mul(x, 0.0)));  // x^2 + x + 1
  sum(y).backward();
  require_close(x.grad(), {5, -5});  // 2x + 1
  Tensor z = f64({1.5}, {});
  Tensor h = mul(z, 2.0);
  add(mul(h, h), h).backward();  // 4 z^2 + 2 z -> 8 z + 2
  require_close(z.grad(), {14});
}

TEST_CASE("gradients accumulate over two backward passes into the same tensor", "[autograd]") {
  Tensor x = f64({1, 2, 3}, {3});
  sum(mul(x, 2.0)).backward();
  Tensor first = x.grad();
  const void* memory = first.data_ptr();
  sum(mul(x, x)).backward();
  require_close(x.grad(), {4, 6, 8});
  REQUIRE(x.grad().is_same(first));  // += in place: the same tensor, the same memory
  REQUIRE(x.grad().data_ptr() == memory);
  x.set_grad(Tensor());
  REQUIRE_FALSE(x.grad().defined());
}

// Tied weights (the GPT's token embedding, also its output layer): each pass's contributions are
// summed first, then added to the gradient, so two micro-batches give (a1 + b1) + (a2 + b2),
// which is what data parallelism's sum of two replicas' gradients computes. In float32 (spacing
// 8 at 1e8) the association shows: (5e7 + 5e7) + (4 + 4) = 100000008, while adding each
// contribution as it arrives gives (1e8 + 4) + 4 = 1e8 (each + 4 a tie, rounded to even).
TEST_CASE("a leaf used twice adds its pass's summed contributions to its gradient", "[autograd]") {
  Tensor w = tensor(std::vector<float>{2}, {1}, {.requires_grad = true});
  auto pass = [&w](double a, double b) { add(sum(mul(w, a)), sum(mul(w, b))).backward(); };
  pass(5e7, 5e7);
  pass(4, 4);
  REQUIRE(w.grad().item<float>() == 100000008.0f);
}

TEST_CASE("a leaf two linear layers share gets both gradients in its destination", "[autograd]") {
  Tensor w = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor buffer = full({2, 3}, 99.0, {.dtype = DType::Float64});
  set_grad_destination(w, buffer);
  const Tensor x1 = f64({1, 0, 2}, {1, 3}, false), x2 = f64({0, 3, 1}, {1, 3}, false);
  add(sum(linear(x1, w)), sum(linear(x2, w))).backward();  // d/dw = [x1 + x2; x1 + x2]
  REQUIRE(w.grad().is_same(buffer));
  require_close(buffer, {1, 3, 3, 1, 3, 3});
}

TEST_CASE("a leaf's first gradient is contiguous and aliases no other tensor", "[autograd]") {
  Tensor x = f64({1, 2, 3, 4}, {2, 2});
  Tensor gy = f64({1, 2, 3, 4}, {2, 2}, false);
  backward({clone(x)}, {gy});  // clone passes gy itself through: the caller still holds it
  REQUIRE(x.grad().storage() != gy.storage());
  REQUIRE(x.grad().is_contiguous());
  // add passes one gradient to both leaves: at most one of them may keep it, and not the
  // caller's; then an in-place change to one gradient leaves the other alone.
  Tensor a = f64({1, 2}, {2}), b = f64({3, 4}, {2});
  Tensor g = f64({1, 1}, {2}, false);
  backward({add(a, b)}, {g});
  REQUIRE(a.grad().storage() != b.grad().storage());
  REQUIRE(a.grad().storage() != g.storage());
  REQUIRE(b.grad().storage() != g.storage());
  sum(add(a, b)).backward();  // accumulates in place into each
  require_close(a.grad(), {2, 2});
  require_close(b.grad(), {2, 2});
  // A fresh result of a backward function that owns all its memory becomes the gradient as it
  // is, not copied (PyTorch's AccumulateGrad steals it too).
  Tensor c = f64({1, 2}, {2});
  const void* made = nullptr;
  Tensor out = clone(c.detach());
  record("fresh", {out}, {c}, [&made](const TensorList& grads) {
    Tensor fresh = mul(grads[0], 2.0);
    made = fresh.data_ptr();
    return TensorList{fresh};
  });
  sum(out).backward();
  REQUIRE(c.grad().data_ptr() == made);
  require_close(c.grad(), {2, 2});
  Tensor y = f64({5}, {1});
  sum(expand(y, {3})).backward();  // the gradient arrives as an expanded (stride 0) view
  REQUIRE(y.grad().is_contiguous());
  require_close(y.grad(), {3});
}

TEST_CASE("a gradient destination receives a leaf's first gradient, then accumulates", "[autograd]") {
  Tensor x = f64({1, 2, 3}, {3});
  const Tensor buffer = full({3}, 99.0, {.dtype = DType::Float64});
  set_grad_destination(x, buffer);
  Tensor seen;
  on_grad_ready(x, [&seen](const Tensor& g) { seen = g; });
  sum(mul(x, 2.0)).backward();  // mul's backward makes a fresh tensor: copied into the buffer
  REQUIRE(x.grad().is_same(buffer));
  REQUIRE(seen.is_same(buffer));
  require_close(buffer, {2, 2, 2});
  sum(mul(x, x)).backward();  // a gradient exists: added into it, in place
  REQUIRE(x.grad().is_same(buffer));
  require_close(buffer, {4, 6, 8});
  x.set_grad(Tensor());
  backward({x}, {f64({1, 1, 1}, {3}, false)});  // backward on the leaf itself
  REQUIRE(x.grad().is_same(buffer));
  require_close(buffer, {1, 1, 1});
  // Removed: the next first gradient is the leaf's own again.
  set_grad_destination(x, Tensor());
  x.set_grad(Tensor());
  sum(mul(x, 3.0)).backward();
  REQUIRE(x.grad().storage() != buffer.storage());
  require_close(x.grad(), {3, 3, 3});
  require_close(buffer, {1, 1, 1});
}

TEST_CASE("grad_destination is offered only while a leaf has no gradient", "[autograd]") {
  Tensor x = f64({1, 2}, {2});
  REQUIRE_FALSE(grad_destination(x).defined());
  const Tensor buffer = zeros({2}, {.dtype = DType::Float64});
  set_grad_destination(x, buffer);
  REQUIRE(grad_destination(x).is_same(buffer));
  REQUIRE_FALSE(grad_destination(mul(x, 2.0)).defined());  // not a leaf
  x.set_grad(ones({2}, {.dtype = DType::Float64}));
  REQUIRE_FALSE(grad_destination(x).defined());  // adding to it must not overwrite it
}

TEST_CASE("set_grad_destination checks the leaf and the buffer", "[autograd]") {
  CpuDevicesGuard devices(2);
  Tensor x = f64({1, 2, 3, 4}, {2, 2});
  require_error([&] { set_grad_destination(x, zeros({4}, {.dtype = DType::Float64})); },
                {"set_grad_destination", "shape [2, 2]", "got shape [4]"});
  require_error([&] { set_grad_destination(x, zeros({2, 2})); }, {"dtype Float64", "dtype Float32"});
  require_error([&] { set_grad_destination(x, zeros({2, 2}, {.dtype = DType::Float64, .device = Device("cpu:1")})); },
                {"on cpu:0", "on cpu:1"});
  require_error([&] { set_grad_destination(x, zeros({2, 2}, {.dtype = DType::Float64}).transpose(0, 1)); },
                {"contiguous"});
  require_error([&] { set_grad_destination(mul(x, 2.0), zeros({2, 2}, {.dtype = DType::Float64})); },
                {"leaf tensor that requires grad"});
  set_grad_destination(f64({1}, {1}, false), Tensor());  // removing is allowed on anything
}

TEST_CASE("backward with several outputs and explicit gradients", "[autograd]") {
  Tensor x = f64({1, 2}, {2});
  Tensor a = mul(x, 3.0), b = mul(x, x);
  backward({a, b}, {f64({1, 1}, {2}, false), f64({1, 0.5}, {2}, false)});
  require_close(x.grad(), {3 + 2, 3 + 2});
}

TEST_CASE("backward on a leaf adds the seed into its gradient", "[autograd]") {
  Tensor x = f64({4}, {});
  x.backward();
  require_close(x.grad(), {1});
}

TEST_CASE("gradients reach only inputs that require grad", "[autograd]") {
  Tensor x = f64({1, 2}, {2});
  Tensor c = f64({5, 6}, {2}, false);
  sum(mul(x, c)).backward();
  require_close(x.grad(), {5, 6});
  REQUIRE_FALSE(c.grad().defined());
}

TEST_CASE("mixed dtypes give each leaf a gradient of its own dtype", "[autograd]") {
  Tensor a = tensor<float>({1, 2}, {2}, {.requires_grad = true});
  Tensor b = f64({3, 4}, {2});
  Tensor y = mul(a, b);
  REQUIRE(y.dtype() == DType::Float64);
  sum(y).backward();
  REQUIRE(a.grad().dtype() == DType::Float32);
  require_close(a.grad(), {3, 4});
  require_close(b.grad(), {1, 2});
}

// ---- retain_graph and lifetime ----

TEST_CASE("retain_graph allows a second backward", "[autograd]") {
  Tensor x = f64({1, 2}, {2});
  Tensor loss = sum(exp(x));
  loss.backward(true);
  loss.backward();
  require_close(x.grad(), {2 * std::exp(1.0), 2 * std::exp(2.0)});
}

TEST_CASE("a second backward through a freed graph is a clear error", "[autograd]") {
  Tensor x = f64({1, 2}, {2});
  Tensor loss = sum(exp(x));
  loss.backward();
  require_error([&] { loss.backward(); },
                {"backward: the graph of 'sum' was already freed by an earlier backward; use retain_graph=true"});
}

TEST_CASE("backward releases what it ran and keeps what it did not", "[autograd]") {
  Tape tape;
  TapeScope scope(tape);
  Tensor x = f64({1, 2}, {2});
  Tensor a = mul(x, 2.0);
  Tensor b = mul(x, 3.0);  // not reachable from a's loss
  Tensor loss = sum(a);
  REQUIRE(tape.size() == 3);
  loss.backward();
  int released = 0;
  for (const auto& node : tape.live_nodes()) released += node->released() ? 1 : 0;
  REQUIRE(released == 2);
  require_close(x.grad(), {2, 2});
  sum(b).backward();  // b's node was skipped, so it still works
  require_close(x.grad(), {5, 5});
}

TEST_CASE("nodes are freed when their outputs are dropped", "[autograd]") {
  Tape tape;
  TapeScope scope(tape);
  Tensor x = f64({1, 2}, {2});
  {
    Tensor y = exp(mul(x, 2.0));
    Tensor z = sum(y);
    REQUIRE(tape.size() == 3);
  }
  REQUIRE(tape.size() == 0);
  Tensor kept = sigmoid(x);  // saves its output (detached), which must not keep the node alive
  REQUIRE(tape.size() == 1);
  kept = Tensor();
  REQUIRE(tape.size() == 0);
}

TEST_CASE("nodes that no gradient reaches are skipped", "[autograd]") {
  std::vector<std::string> log;
  Tensor x = f64({1, 2}, {2});
  Tensor used = marker(x, log, "used");
  Tensor unused = marker(x, log, "unused");
  sum(used).backward();
  REQUIRE(log == std::vector<std::string>{"used"});
  REQUIRE_FALSE(unused.is_leaf());
}

TEST_CASE("a node whose outputs get no gradient does not run", "[autograd]") {
  std::vector<std::string> log;
  Tensor x = f64({1, 2}, {2});
  Tensor m = marker(x, log, "before pow");
  pow(m, 0.0).sum().backward();  // pow's gradient for exponent 0 is undefined (zero)
  REQUIRE(log.empty());
}

// ---- hooks ----

TEST_CASE("on_grad_ready fires once per pass with the final gradient", "[autograd]") {
  Tensor x = f64({1, 2}, {2});
  std::vector<std::vector<double>> seen;
  on_grad_ready(x, [&](const Tensor& g) { seen.push_back(values(g)); });
  Tensor loss = sum(add(mul(x, x), mul(x, 3.0)));  // three uses of x
  loss.backward(true);
  REQUIRE(seen.size() == 1);
  require_close(seen[0], {5, 7});
  loss.backward();
  REQUIRE(seen.size() == 2);
  require_close(seen[1], {10, 14});  // accumulated over both passes
}

TEST_CASE("on_grad_ready waits for both gradients of a node that takes the leaf twice", "[autograd]") {
  // mul(x, x) is x's only consumer: the hook fires once both its input gradients are in (the
  // CUDA simulator found it firing after the first).
  Tensor x = f64({1, 2}, {2});
  std::vector<double> seen;
  on_grad_ready(x, [&](const Tensor& g) { seen = values(g); });
  sum(mul(x, x)).backward();
  require_close(seen, {2, 4});
}

TEST_CASE("on_grad_ready fires as soon as a leaf is final, before the walk ends", "[autograd]") {
  // early is used by the first op, late only by the last one: in the reverse walk late's
  // gradient is final first, before the marker between them runs; early's only after it.
  std::vector<std::string> log;
  Tensor x = f64({1, 2}, {2}, false);
  Tensor early = f64({3, 4}, {2}), late = f64({5, 6}, {2});
  on_grad_ready(early, [&](const Tensor&) { log.push_back("early ready"); });
  on_grad_ready(late, [&](const Tensor&) { log.push_back("late ready"); });
  Tensor h = mul(x, early);
  Tensor m = marker(h, log, "marker backward");
  sum(mul(m, late)).backward();
  REQUIRE(log == std::vector<std::string>{"late ready", "marker backward", "early ready"});
  require_close(early.grad(), {5, 12});
  require_close(late.grad(), {3, 8});
}

TEST_CASE("on_grad_ready needs a leaf that requires grad", "[autograd]") {
  Tensor x = f64({1}, {1});
  require_error([&] { on_grad_ready(mul(x, 2.0), [](const Tensor&) {}); }, {"on_grad_ready", "leaf"});
  require_error([&] { on_grad_ready(f64({1}, {1}, false), [](const Tensor&) {}); }, {"on_grad_ready"});
}

// ---- grad mode ----

TEST_CASE("NoGradGuard records nothing and restores grad mode", "[autograd]") {
  Tape tape;
  TapeScope scope(tape);
  Tensor x = f64({1, 2}, {2});
  {
    NoGradGuard no_grad;
    REQUIRE_FALSE(is_grad_enabled());
    Tensor y = mul(exp(x), 2.0);
    REQUIRE_FALSE(y.requires_grad());
    REQUIRE(tape.size() == 0);
  }
  REQUIRE(is_grad_enabled());
  Tensor y = exp(x);
  REQUIRE(y.requires_grad());
  REQUIRE(tape.size() == 1);
}

TEST_CASE("requires_grad propagates through differentiable ops only", "[autograd]") {
  Tensor x = f64({1, -2}, {2});
  Tensor c = f64({3, 4}, {2}, false);
  REQUIRE(add(x, c).requires_grad());
  REQUIRE(x.transpose(0, 0).is_same(x));  // an op with nothing to do returns its input
  REQUIRE(reshape(x, {2, 1}).requires_grad());
  REQUIRE_FALSE(add(c, c).requires_grad());
  REQUIRE_FALSE(gt(x, c).requires_grad());
  REQUIRE_FALSE(argmax(x, 0).requires_grad());
  REQUIRE_FALSE(x.to(DType::Int64).requires_grad());
  REQUIRE(x.is_leaf());
  REQUIRE(zeros({2}, {.requires_grad = true}).requires_grad());
}

TEST_CASE("detach cuts a tensor from the tape and shares its memory", "[autograd]") {
  Tensor x = f64({1, 2}, {2});
  Tensor y = mul(x, 2.0);
  Tensor d = y.detach();
  REQUIRE_FALSE(d.requires_grad());
  REQUIRE(d.is_leaf());
  REQUIRE(d.data_ptr() == y.data_ptr());
  sum(add(mul(d, x), y)).backward();
  require_close(x.grad(), {4, 6});  // d counts as a constant
}

TEST_CASE("requires_grad_ marks leaves and refuses non-floating dtypes and non-leaves", "[autograd]") {
  Tensor x = tensor<double>({1, 2}, {2}, {.dtype = DType::Float64});
  REQUIRE_FALSE(x.requires_grad());
  x.requires_grad_();
  REQUIRE(x.requires_grad());
  x.requires_grad_(false);
  REQUIRE_FALSE(x.requires_grad());
  require_error([] { tensor<int64_t>({1, 2}, {2}, {.dtype = DType::Int64}).requires_grad_(); },
                {"requires_grad_", "floating", "Int64"});
  Tensor y = mul(f64({1}, {1}), 2.0);
  require_error([&] { y.requires_grad_(false); }, {"requires_grad_", "leaf", "mul"});
}

TEST_CASE("set_grad checks shape, dtype and device", "[autograd]") {
  Tensor x = f64({1, 2}, {2});
  x.set_grad(f64({7, 8}, {2}, false));
  require_close(x.grad(), {7, 8});
  sum(x).backward();
  require_close(x.grad(), {8, 9});
  require_error([&] { x.set_grad(f64({1, 2, 3}, {3}, false)); }, {"set_grad", "[2]", "[3]"});
  require_error([&] { x.set_grad(tensor<float>({1, 2}, {2})); }, {"set_grad", "Float64", "Float32"});
}

TEST_CASE("copy_ into a tensor that requires grad is an error unless grad mode is off", "[autograd]") {
  Tensor x = f64({1, 2}, {2});
  Tensor src = f64({5, 6}, {2}, false);
  require_error([&] { copy_(x, src); }, {"copy_", "requires grad", "[2]"});
  require_error([&] { copy_(mul(x, 1.0), src); }, {"copy_", "requires grad"});
  {
    NoGradGuard no_grad;
    copy_(x, src);
  }
  require_close(x, {5, 6});
}

// ---- anomaly detection ----

TEST_CASE("DetectAnomalyGuard names the op that produced NaN in its forward", "[autograd]") {
  Tensor x = f64({1, -1}, {2});
  Tensor y = log(x);  // NaN without the guard: no error
  REQUIRE(std::isnan(values(y)[1]));
  DetectAnomalyGuard guard;
  REQUIRE(is_anomaly_enabled());
  require_error([&] { log(x); }, {"DetectAnomaly: log produced NaN in its forward"});
}

TEST_CASE("DetectAnomalyGuard names the op whose backward produced Inf", "[autograd]") {
  Tensor x = f64({0, 1}, {2});
  Tensor loss = sum(sqrt(x));  // sqrt(0) = 0 is fine forward; its derivative is inf
  {
    DetectAnomalyGuard guard;
    require_error([&] { loss.backward(true); }, {"DetectAnomaly: sqrt produced Inf in its backward"});
  }
  REQUIRE_FALSE(is_anomaly_enabled());
  loss.backward();  // without the guard the inf just arrives
  REQUIRE(std::isinf(values(x.grad())[0]));
}

// ---- threads ----

TEST_CASE("TapeScope on two threads records on each thread's own tape", "[autograd]") {
  Tape tape_a, tape_b;
  Tensor x = f64({1, 2}, {2});
  auto work = [&x](Tape& tape, int ops) {
    TapeScope scope(tape);
    std::vector<Tensor> keep;
    Tensor y = x;
    for (int i = 0; i < ops; ++i) keep.push_back(y = mul(y, 2.0));
    REQUIRE(tape.size() == size_t(ops));
    REQUIRE(&current_tape() == &tape);
  };
  std::thread a(work, std::ref(tape_a), 3);
  std::thread b(work, std::ref(tape_b), 5);
  a.join();
  b.join();
  REQUIRE(&current_tape() != &tape_a);
  REQUIRE(&current_tape() != &tape_b);
}

TEST_CASE("a graph recorded on one thread runs backward on another", "[autograd]") {
  Tensor x = f64({1, 2}, {2});
  Tensor loss;
  std::thread recorder([&] {
    Tape tape;
    TapeScope scope(tape);
    loss = sum(mul(x, x));
  });
  recorder.join();
  std::thread runner([&] { loss.backward(); });
  runner.join();
  require_close(x.grad(), {2, 4});
}

TEST_CASE("grad mode is per thread", "[autograd]") {
  NoGradGuard no_grad;
  bool other_thread_enabled = false;
  std::thread t([&] { other_thread_enabled = is_grad_enabled(); });
  t.join();
  REQUIRE(other_thread_enabled);
  REQUIRE_FALSE(is_grad_enabled());
}

// ---- errors of backward ----

TEST_CASE("backward on a tensor that does not require grad is an error", "[autograd]") {
  Tensor c = f64({1}, {1}, false);
  require_error([&] { c.backward(); }, {"backward", "does not require grad"});
}

TEST_CASE("backward of a non-scalar without grad_outputs is an error", "[autograd]") {
  Tensor y = mul(f64({1, 2, 3, 4, 5, 6}, {2, 3}), 2.0);
  require_error([&] { y.backward(); },
                {"backward: expected a one-element output, got shape [2, 3]; pass grad_outputs"});
}

TEST_CASE("grad_outputs must match the outputs' shapes and count", "[autograd]") {
  Tensor y = mul(f64({1, 2, 3}, {3}), 2.0);
  require_error([&] { backward({y}, {f64({1, 1}, {2}, false)}); }, {"grad_outputs[0]", "[2]", "[3]"});
  require_error([&] { backward({y}, {f64({1, 1, 1}, {3}, false), f64({1}, {1}, false)}); },
                {"1 outputs but 2 grad_outputs"});
}

// ---- gradcheck itself ----

TEST_CASE("gradcheck catches a wrong derivative and names the element", "[autograd]") {
  // x^2 with a backward that returns x instead of 2x.
  auto wrong_square = [](const TensorList& in) {
    const Tensor& x = in[0];
    Tensor out = mul(x.detach(), x.detach());
    record("wrong_square", {out}, {x}, [x](const TensorList& g) { return TensorList{mul(g[0], x.detach())}; });
    return out;
  };
  require_error([&] { gradcheck(wrong_square, {f64({1, 2}, {2})}); },
                {"gradcheck: input 0, element 0", "analytic", "numeric"});
  REQUIRE(gradcheck([](const TensorList& in) { return mul(in[0], in[0]); }, {f64({1, 2}, {2})}));
}

TEST_CASE("gradcheck needs Float64 inputs and leaves their gradients alone", "[autograd]") {
  require_error([] { gradcheck([](const TensorList& in) { return in[0]; }, {tensor<float>({1}, {1})}); },
                {"gradcheck: input 0", "Float32", "Float64"});
  Tensor x = f64({1, 2}, {2});
  REQUIRE(gradcheck([](const TensorList& in) { return exp(in[0]); }, {x}));
  REQUIRE_FALSE(x.grad().defined());
}

namespace {

// y = x * w elementwise, with a custom backward whose derivative for w (when `wrong_w`), or else
// for x, has its sign flipped: a layer's derivative with a planted mistake.
Tensor scale_op(const Tensor& x, const Tensor& w, bool wrong_w) {
  Tensor out = mul(x.detach(), w.detach());
  record("planted_scale", {out}, {x, w}, [x, w, wrong_w](const TensorList& g) {
    const Tensor gx = mul(g[0], w.detach()), gw = mul(g[0], x.detach());
    return TensorList{wrong_w ? gx : neg(gx), wrong_w ? neg(gw) : gw};
  });
  return out;
}

class PlantedScale : public nn::Cloneable<PlantedScale> {
 public:
  explicit PlantedScale(bool wrong_w) : wrong_w_(wrong_w) {
    register_parameter("w", tensor({0.5, -1.5, 2.0}, {3}, {.dtype = DType::Float64}));
  }
  Tensor forward(const Tensor& x) override { return scale_op(x, parameter("w"), wrong_w_); }
  std::string name() const override { return "PlantedScale"; }

 private:
  bool wrong_w_;
};

}  // namespace

TEST_CASE("gradcheck of a module's parameters given as inputs while fn calls forward catches a wrong derivative",
          "[autograd]") {
  // PyTorch's idiom: gradcheck(lambda x, w: m(x), (x, m.w)). fn reads m's own parameter, which
  // is the tensor given: its derivative is checked, and the planted mistake found.
  const Tensor x = tensor({1.0, 2.0, -3.0}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  PlantedScale wrong(/*wrong_w=*/true);
  require_error([&] { gradcheck([&](const TensorList& in) { return wrong.forward(in[0]); }, {x, wrong.parameter("w")}); },
                {"gradcheck: input 1, element 0", "analytic", "numeric"});
  // The other form: only the input checked, the parameter frozen; here the planted mistake is in
  // d/dx.
  PlantedScale wrong_x(/*wrong_w=*/false);
  Tensor(wrong_x.parameter("w")).requires_grad_(false);  // the module's tensor: a handle to it
  require_error([&] { gradcheck([&](const TensorList& in) { return wrong_x.forward(in[0]); }, {x}); },
                {"gradcheck: input 0, element 0"});
  // A right derivative passes both ways, and the module's parameter keeps its value and gradient.
  auto right = std::make_shared<nn::Linear>(3, 2);
  right->to(DType::Float64);
  const std::vector<double> weight = values(right->weight());
  REQUIRE(gradcheck([&](const TensorList& in) { return right->forward(in[0]); },
                    {x.reshape({1, 3}).detach().requires_grad_(), right->weight(), right->bias()}));
  CHECK(values(right->weight()) == weight);
  CHECK_FALSE(right->weight().grad().defined());
}

TEST_CASE("gradcheck refuses an input fn never reads and a leaf it was not given", "[autograd]") {
  const Tensor x = tensor({1.0, 2.0}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor w = tensor({3.0, 4.0}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  // Given w, but reads a copy of its values: w's gradient would be zero on both sides.
  const Tensor w_copy = w.detach().clone().requires_grad_();
  require_error([&] { gradcheck([&](const TensorList& in) { return mul(in[0], w_copy); }, {x, w}); },
                {"gradcheck: input 1", "does not depend on it", "never reads it"});
  // Reads a leaf requiring grad that it was not given: its derivative would go unchecked.
  require_error([&] { gradcheck([&](const TensorList& in) { return mul(in[0], w); }, {x}); },
                {"gradcheck: fn's output depends on a tensor that requires grad but is not among the inputs",
                 "shape [2]"});
  // An output that depends on nothing requiring grad, with an input that does.
  require_error([&] { gradcheck([](const TensorList& in) { return in[0].detach(); }, {x}); },
                {"gradcheck: input 0", "never reads it"});
}

TEST_CASE("backward frees the activations it passed while the loss still lives", "[autograd]") {
  mg::test::CpuDevicesGuard guard(2);
  const mg::Device device("cpu:1");
  mg::Tensor w = mg::randn({256, 256}, {.device = device}).requires_grad_();
  mg::Tensor x = mg::randn({256, 256}, {.device = device});
  mg::Tensor loss = mg::tanh(mg::relu(mg::matmul(x, w))).sum();  // three (256, 256) activations
  const int64_t with_graph = mg::memory_stats(device).allocated;
  loss.backward();
  w.set_grad(mg::Tensor());
  const int64_t activation_bytes = 256 * 256 * 4;
  CHECK(mg::memory_stats(device).allocated <= with_graph - 2 * activation_bytes);
}

// The graph keeps what backward reads, nothing more (tape.h, "Ownership"): matmul's output, read
// by no backward (relu reads its own output, add and round_to nothing), is freed with the forward's
// temporaries; so are the unrounded values under autocast.
TEST_CASE("the graph keeps only the activations backward reads", "[autograd][tape]") {
  mg::test::CpuDevicesGuard guard(2);
  const mg::Device device("cpu:1");
  const int64_t activation_bytes = 256 * 256 * 4;
  mg::Tensor w = mg::randn({256, 256}, {.device = device}).requires_grad_();
  mg::Tensor x = mg::randn({256, 256}, {.device = device});
  const int64_t before = mg::memory_stats(device).allocated;
  mg::Tensor out = mg::add(mg::relu(mg::matmul(x, w)), 1.0);  // matmul's output, relu's, add's
  CHECK(mg::memory_stats(device).allocated - before == 2 * activation_bytes);  // relu's and add's
  out = mg::Tensor();
  CHECK(mg::memory_stats(device).allocated == before);  // the graph went with its output
  {
    mg::AutocastGuard autocast(mg::Precision::BFloat16);
    out = mg::relu(mg::matmul(x, w));  // x, w and the product rounded, then relu
  }
  // The rounded x and w that matmul reads, in bf16 (autocast.h's SavedOperand), and relu's output;
  // not the unrounded product or its copy.
  CHECK(mg::memory_stats(device).allocated - before == 2 * activation_bytes);
  out = mg::Tensor();
  // where reads neither operand (only the condition, the caller's here): matmul's output goes.
  const mg::Tensor positive = mg::gt(x, 0.0);
  const int64_t with_condition = mg::memory_stats(device).allocated;
  out = mg::where(positive, mg::matmul(x, w), x);
  CHECK(mg::memory_stats(device).allocated - with_condition == activation_bytes);  // where's output
}

// ---- saved tensors changed in place (version counters) ----

TEST_CASE("backward refuses a saved input changed in place after the forward, naming the op and both versions",
          "[autograd][tape]") {
  Tensor w = tensor(std::vector<float>{1, 1, 1}, {3}).requires_grad_();
  Tensor x = tensor(std::vector<float>{1, 1, 1}, {3});
  Tensor loss = sum(mul(w, x));  // d loss / dw = x, as the forward saw it: 1
  copy_(x, full({3}, 50.0f));    // would make the gradient 50, silently
  require_error([&] { loss.backward(); },
                {"backward of mul: its input 1 ([3], Float32) was modified in place after the forward used it: it "
                 "is at version 1, the forward saw version 0"});
  CHECK(!w.grad().defined());
  // A view shares the version of the bytes it views.
  Tensor y = sum(mul(w, x));
  copy_(x.slice(0, 0, 1), full({1}, 2.0f));
  require_error([&] { y.backward(); }, {"backward of mul: its input 1", "version 2, the forward saw version 1"});
}

TEST_CASE("backward refuses parameters an optimizer stepped between the forward and the backward", "[autograd][tape]") {
  Tensor w = tensor(std::vector<float>{0.5f, -1.0f}, {2}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  sum(mul(w, w)).backward();
  Tensor loss = sum(mul(w, w));
  opt.step();
  require_error([&] { loss.backward(); }, {"backward of mul: its input 0 ([2], Float32) was modified in place"});
}

TEST_CASE("backward accepts in-place changes that its ops do not read: add's operands, views, sums",
          "[autograd][tape]") {
  Tensor w = tensor(std::vector<float>{1, 2}, {2}).requires_grad_();
  Tensor x = tensor(std::vector<float>{3, 4}, {2});
  Tensor loss = add(sum(add(w, x)), sum(reshape(sub(mul(w, 2.0), x), {1, 2})));
  copy_(x, full({2}, 9.0f));
  loss.backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{3, 3});
  // Changed back to its recorded values is still a change: the version counts writes.
  Tensor z = sum(mul(w, x));
  copy_(x, clone(x));
  CHECK_THROWS_AS(z.backward(), Error);
}
