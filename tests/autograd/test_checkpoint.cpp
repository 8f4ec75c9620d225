// tests/autograd/test_checkpoint.cpp — grad() (autograd/tape.h) and activation recomputation
// (autograd/checkpoint.cpp): gradients bit-identical to the plain graph, also with dropout
// inside (the draws replayed), nested, and with gradient destinations; nothing saved but the
// input; gradcheck; and a recomputation that does not repeat its forward's draws is an error.
#include <catch2/catch.hpp>

#include <vector>

#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// A block as the GPT's: y = x + W2 gelu(W1 x + b1) with dropout on the branch.
struct Block {
  Tensor w1, b1, w2;
  double p = 0.0;
  Tensor operator()(const Tensor& x) const {
    return x + dropout(matmul(gelu(linear(x, w1, b1)), w2), p, true);
  }
  TensorList params() const { return {w1, b1, w2}; }
};

Block make_block(int64_t width, double p, DType dtype = DType::Float32) {
  const TensorOptions o{.dtype = dtype, .requires_grad = true};
  return {randn({4 * width, width}, o), randn({4 * width}, o), randn({4 * width, width}, o), p};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.shape() == b.shape() && a.to_vector<float>() == b.to_vector<float>();
}

}  // namespace

TEST_CASE("grad returns the gradients backward would add, and adds them nowhere", "[autograd][checkpoint]") {
  Tensor x = tensor(std::vector<double>{1, 2, 3}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor w = tensor(std::vector<double>{2, -1, 4}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor unused = tensor(std::vector<double>{5}, {1}, {.dtype = DType::Float64, .requires_grad = true});
  int fired = 0;
  on_grad_ready(w, [&](const Tensor&) { ++fired; });
  const Tensor y = sum(x * w + x * x);  // dy/dx = w + 2x, dy/dw = x
  const TensorList g = grad({y}, {}, {w, x, unused}, true);
  REQUIRE(g.size() == 3);
  CHECK(values(g[0]) == std::vector<double>{1, 2, 3});
  CHECK(values(g[1]) == std::vector<double>{4, 3, 10});
  CHECK(!g[2].defined());
  CHECK(!x.grad().defined());
  CHECK(!w.grad().defined());
  CHECK(fired == 0);
  backward({y});  // the graph was retained; backward agrees
  CHECK(values(x.grad()) == values(g[1]));
  CHECK(fired == 1);
  require_error([&] { grad({y}, {}, {y}); }, {"grad: inputs[0]", "not a leaf"});
}

TEST_CASE("checkpoint: gradients bit-identical to the plain graph, dropout included", "[autograd][checkpoint]") {
  const double p = GENERATE(0.0, 0.3);
  manual_seed(7);
  const Block block = make_block(8, p);
  const Tensor x0 = randn({5, 8});
  const Tensor g = randn({5, 8});

  auto run = [&](bool recompute) {
    for (const Tensor& t : block.params()) t.set_grad(Tensor());
    Tensor x = x0.detach();
    x.requires_grad_(true);
    manual_seed(11);
    const Tensor h = x * 2.0;  // x reaches the block through an op: the walk continues past it
    const Tensor y = recompute ? checkpoint(block, h, block.params()) : block(h);
    const Tensor z = block(y);  // a plain block after it draws from the generator too
    const PhiloxState after_forward = get_rng_state();
    backward({z}, {g});
    CHECK(get_rng_state().offset == after_forward.offset);  // the recomputation drew nothing new
    TensorList out{y, z, x.grad()};
    for (const Tensor& t : block.params()) out.push_back(t.grad());
    return out;
  };
  const TensorList plain = run(false), recomputed = run(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("result " << i);
    CHECK(same_bits(plain[i], recomputed[i]));
  }
}

TEST_CASE("checkpoint: nested checkpoints with dropout give the plain graph's gradients", "[autograd][checkpoint]") {
  manual_seed(4);
  const Block inner = make_block(6, 0.4), outer = make_block(6, 0.2);
  const Tensor x0 = randn({3, 6});
  auto run = [&](bool recompute) {
    TensorList params = inner.params();
    for (const Tensor& t : outer.params()) params.push_back(t);
    for (const Tensor& t : params) t.set_grad(Tensor());
    const auto both = [&](const Tensor& in) {
      return outer(recompute ? checkpoint(inner, in, inner.params()) : inner(in));
    };
    Tensor x = x0.detach();
    x.requires_grad_(true);
    manual_seed(12);
    backward({sum(recompute ? checkpoint(both, x, params) : both(x))});
    TensorList out{x.grad()};
    for (const Tensor& t : params) out.push_back(t.grad());
    return out;
  };
  const TensorList plain = run(false), recomputed = run(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("gradient " << i);
    CHECK(same_bits(plain[i], recomputed[i]));
  }
}

TEST_CASE("checkpoint: saves only its input, a leaf's gradient goes to its destination", "[autograd][checkpoint]") {
  manual_seed(3);
  const Block block = make_block(6, 0.0);
  Tensor x = randn({3, 6}, {.requires_grad = true});
  const Tensor y = checkpoint(block, x, block.params());
  REQUIRE(y.requires_grad());
  // One node for the whole block, holding the input and the parameters only.
  const auto nodes = current_tape().live_nodes();
  REQUIRE(!nodes.empty());
  CHECK(nodes.back()->name == "checkpoint");
  CHECK(nodes.back()->inputs.size() == 4);

  const Tensor bucket = zeros(block.w1.shape());
  set_grad_destination(block.w1, bucket);
  backward({sum(y)});
  CHECK(block.w1.grad().is_same(bucket));
  CHECK(sum(abs(bucket)).item<double>() > 0);
  set_grad_destination(block.w1, Tensor());
  // Without grad mode, or with nothing requiring grad, it is fn itself.
  NoGradGuard no_grad;
  CHECK(!checkpoint(block, x, block.params()).requires_grad());
}

TEST_CASE("checkpoint: gradcheck through a recomputed block", "[autograd][checkpoint]") {
  manual_seed(5);
  const Block block = make_block(3, 0.0, DType::Float64);
  const Tensor x = randn({2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  CHECK(gradcheck(
      [](const TensorList& in) {
        const Block b{in[1], in[2], in[3], 0.0};
        return checkpoint(b, in[0], b.params());
      },
      {x, block.w1, block.b1, block.w2}));
}

TEST_CASE("checkpoint: a recomputation that draws other numbers than its forward is an error", "[autograd][checkpoint]") {
  manual_seed(2);
  const Tensor x = randn({4, 4}, {.requires_grad = true});
  int calls = 0;
  // The second call (the recomputation) draws 2 Philox blocks where the first drew 1.
  const auto fn = [&](const Tensor& in) {
    const Tensor kept = dropout(in, 0.5, true);
    return kept * rand({++calls == 1 ? 4 : 8}).sum();
  };
  const Tensor y = checkpoint(fn, x, {});
  require_error([&] { backward({sum(y)}); }, {"RngReplay", "draw 2", "blocks"});
}
