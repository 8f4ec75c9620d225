// tests/nn/test_module.cpp — nn/module.h: registries and dotted names, state dicts and each
// load error, clone independence, train/eval, moving between devices.
#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu_devices_guard.h"
#include "multigrad/nn/layers.h"
#include "nn/nn_test_util.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// x * w, with w registered as given (two of them can share one tensor).
class Scaling : public nn::Cloneable<Scaling> {
 public:
  explicit Scaling(const Tensor& w) { register_parameter("w", w); }
  Tensor forward(const Tensor& x) override { return x * parameter("w"); }
  std::string name() const override { return "Scaling"; }
};

// Attention scores of x against a learned query, masked: a module taking two tensors.
class MaskedScores : public nn::Cloneable<MaskedScores> {
 public:
  explicit MaskedScores(int64_t dim) { register_parameter("q", ones({dim, 1})); }
  Tensor forward_many(const std::vector<Tensor>& in) override {  // x (N, dim), mask (N, 1) Bool
    return softmax(masked_fill(matmul(in[0], parameter("q")), in[1], -INFINITY), 0);
  }
  std::string name() const override { return "MaskedScores"; }
};

// forward_many that calls forward on itself: the defaults would hand the call back and forth.
class Looping : public nn::Cloneable<Looping> {
 public:
  Tensor forward_many(const std::vector<Tensor>& in) override { return forward(in[0]); }
  std::string name() const override { return "Looping"; }
};

// Defines no forward at all.
class Formless : public nn::Cloneable<Formless> {
 public:
  std::string name() const override { return "Formless"; }
};

std::vector<std::string> names_of(const nn::NamedTensors& entries) {
  std::vector<std::string> out;
  for (const auto& [n, t] : entries) out.push_back(n);
  return out;
}

}  // namespace

TEST_CASE("Module: named_parameters lists own entries first, then children, dotted", "[nn]") {
  TinyNet net;
  CHECK(names_of(net.named_parameters()) ==
        std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  std::vector<Tensor> params = net.parameters();
  REQUIRE(params.size() == 5);
  CHECK(params[1].shape() == Shape{4, 3});
  CHECK(params[4].shape() == Shape{2});
  CHECK(params[1].is_same(net.child<nn::Linear>("fc1")->weight()));
}

TEST_CASE("Module: buffers and children are registered in order", "[nn]") {
  TinyNet net;
  CHECK(names_of(net.named_buffers()) == std::vector<std::string>{"counter"});
  REQUIRE(net.buffers().size() == 1);
  auto children = net.children();
  REQUIRE(children.size() == 2);
  CHECK(net.named_children()[0].first == "fc1");
  CHECK(children[1]->name() == "Linear(in_features=4, out_features=2, bias=true)");
  CHECK(net.child<nn::Linear>("fc2") == children[1]);
}

TEST_CASE("Module: lookups of missing entries and wrong child types are errors", "[nn]") {
  TinyNet net;
  require_error([&] { net.parameter("nope"); }, {"TinyNet", "no parameter named 'nope'"});
  require_error([&] { net.buffer("scale"); }, {"no buffer named 'scale'"});
  require_error([&] { net.child("fc3"); }, {"no child module named 'fc3'"});
  require_error([&] { net.child<nn::Conv2d>("fc1"); }, {"'fc1' is a Linear", "not the type"});
}

TEST_CASE("Module: parameters are leaves that require grad, buffers do not", "[nn]") {
  TinyNet net;
  for (const Tensor& p : net.parameters()) {
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  CHECK_FALSE(net.buffer("counter").requires_grad());
}

namespace {
// Registers a name twice or a dotted name, to test the registry's checks.
class BadNet : public nn::Cloneable<BadNet> {
 public:
  explicit BadNet(int mode) {
    register_parameter("w", ones({1}));
    if (mode == 0) register_buffer("w", ones({1}));
    if (mode == 1) register_parameter("a.b", ones({1}));
    if (mode == 2) register_parameter("i", zeros({1}, {.dtype = DType::Int64}));
  }
  Tensor forward(const Tensor& x) override { return x; }
  std::string name() const override { return "BadNet"; }
};
}  // namespace

TEST_CASE("Module: duplicate, dotted and integral registrations are errors", "[nn]") {
  require_error([] { BadNet net(0); }, {"BadNet", "'w' is already registered"});
  require_error([] { BadNet net(1); }, {"invalid entry name 'a.b'"});
  require_error([] { BadNet net(2); }, {"parameter 'i'", "floating"});
}

TEST_CASE("Module: gradients reach every parameter through forward and backward", "[nn]") {
  manual_seed(1);
  TinyNet net;
  Tensor x = tensor(pseudo_random(6, 3), {2, 3});
  net.forward(x).sum().backward();
  for (const auto& [n, p] : net.named_parameters()) {
    INFO(n);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().shape() == p.shape());
  }
  // d(sum(scale * h)) / d scale = sum(h)
  Tensor h = net.forward(x).detach();
  CHECK(net.parameter("scale").grad().item<double>() == Approx(h.sum().item<double>()).epsilon(1e-5));
}

TEST_CASE("Module: state_dict holds parameters and buffers, sharing their storage", "[nn]") {
  TinyNet net;
  nn::StateDict sd = net.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, t] : sd) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"counter", "fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "scale"});
  CHECK_FALSE(sd.at("fc1.weight").requires_grad());
  CHECK(sd.at("fc1.weight").data_ptr() == net.child<nn::Linear>("fc1")->weight().data_ptr());
}

TEST_CASE("Module: load_state_dict round trip reproduces the outputs", "[nn]") {
  manual_seed(3);
  TinyNet a;
  manual_seed(4);
  TinyNet b;
  Tensor x = tensor(pseudo_random(9, 5), {3, 3});
  REQUIRE(values(a.forward(x)) != values(b.forward(x)));
  b.load_state_dict(a.state_dict());
  CHECK(values(a.forward(x)) == values(b.forward(x)));
  // copied, not aliased: the loaded tensors keep their own storage and stay parameters
  CHECK(b.parameter("scale").data_ptr() != a.parameter("scale").data_ptr());
  CHECK(b.parameter("scale").requires_grad());
}

TEST_CASE("Module: load_state_dict names a missing key and its shape", "[nn]") {
  TinyNet net;
  nn::StateDict sd = net.state_dict();
  sd.erase("fc2.weight");
  require_error([&] { net.load_state_dict(sd); }, {"missing key 'fc2.weight'", "[2, 4]"});
}

TEST_CASE("Module: load_state_dict names an unexpected key", "[nn]") {
  TinyNet net;
  nn::StateDict sd = net.state_dict();
  sd["fc3.weight"] = zeros({5, 5});
  require_error([&] { net.load_state_dict(sd); }, {"unexpected key 'fc3.weight'", "[5, 5]"});
}

TEST_CASE("Module: load_state_dict names a mis-shaped key and both shapes", "[nn]") {
  TinyNet net;
  nn::StateDict sd = net.state_dict();
  sd["fc1.weight"] = zeros({3, 4});
  require_error([&] { net.load_state_dict(sd); }, {"shape mismatch for key 'fc1.weight'", "[3, 4]", "[4, 3]"});
  require_error([&] { net.load_state_dict(sd, /*strict=*/false); }, {"fc1.weight", "[3, 4]", "[4, 3]"});
}

TEST_CASE("Module: non-strict load skips missing and unexpected keys", "[nn]") {
  TinyNet net;
  nn::StateDict sd;
  sd["scale"] = full({1}, 2.5);
  sd["extra"] = zeros({1});
  net.load_state_dict(sd, /*strict=*/false);
  CHECK(net.parameter("scale").item<double>() == 2.5);
}

TEST_CASE("Module: a failed load leaves the module unchanged", "[nn]") {
  TinyNet net;
  std::vector<double> before = values(net.child<nn::Linear>("fc1")->weight());
  nn::StateDict sd = net.state_dict();
  sd["fc1.weight"] = full({4, 3}, 7.0);
  sd["fc2.bias"] = zeros({3});  // mis-shaped: the whole load is refused
  REQUIRE_THROWS_AS(net.load_state_dict(sd), Error);
  CHECK(values(net.child<nn::Linear>("fc1")->weight()) == before);
}

TEST_CASE("Module: clone is a deep, independent copy", "[nn]") {
  manual_seed(5);
  TinyNet net;
  auto copy = net.clone();
  REQUIRE(copy->name() == "TinyNet");
  auto a = net.named_parameters(), b = copy->named_parameters();
  REQUIRE(names_of(a) == names_of(b));
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(values(a[i].second) == values(b[i].second));
    CHECK(a[i].second.data_ptr() != b[i].second.data_ptr());
    CHECK(b[i].second.requires_grad());
    CHECK(b[i].second.is_leaf());
  }
  CHECK(copy->buffer("counter").data_ptr() != net.buffer("counter").data_ptr());
  // Changing the replica leaves the original alone, and the children are new objects.
  {
    NoGradGuard no_grad;
    copy_(copy->child<nn::Linear>("fc1")->weight(), zeros({4, 3}));
  }
  CHECK(values(net.child<nn::Linear>("fc1")->weight()) != values(copy->child<nn::Linear>("fc1")->weight()));
  CHECK(copy->child("fc1") != net.child("fc1"));
  Tensor x = tensor(pseudo_random(3, 2), {1, 3});
  CHECK(values(copy->forward(x)) != values(net.forward(x)));
}

TEST_CASE("Module: train and eval apply recursively", "[nn]") {
  TinyNet net;
  CHECK(net.is_training());
  net.eval();
  CHECK_FALSE(net.is_training());
  for (const auto& c : net.children()) CHECK_FALSE(c->is_training());
  auto copy = net.clone();
  CHECK_FALSE(copy->child("fc2")->is_training());
  net.train();
  CHECK(net.child("fc1")->is_training());
}

TEST_CASE("Module: to(device) moves parameters and buffers, which stay leaves", "[nn]") {
  CpuDevicesGuard devices(2);
  const Device cpu1("cpu:1");
  manual_seed(6);
  TinyNet net;
  Tensor x = tensor(pseudo_random(6, 7), {2, 3});
  std::vector<double> want = values(net.forward(x));
  net.to(cpu1);
  for (const Tensor& p : net.parameters()) {
    CHECK(p.device() == cpu1);
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  CHECK(net.buffer("counter").device() == cpu1);
  Tensor y = net.forward(x.to(cpu1));
  CHECK(y.device() == cpu1);
  require_close(y, want);
  y.sum().backward();
  CHECK(net.parameter("scale").grad().device() == cpu1);
}

TEST_CASE("Module: to(dtype) casts floating parameters and buffers, not integer ones", "[nn]") {
  manual_seed(6);
  TinyNet net;
  auto bn = std::make_shared<nn::BatchNorm2d>(2);  // num_batches_tracked is Int64
  Tensor x = tensor(pseudo_random(6, 7), {2, 3});
  std::vector<double> want = values(net.forward(x));
  net.to(DType::Float64);
  bn->to(DType::Float64);
  for (const Tensor& p : net.parameters()) {
    CHECK(p.dtype() == DType::Float64);
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  CHECK(net.buffer("counter").dtype() == DType::Float64);
  for (const auto& [name, b] : bn->named_buffers()) {
    INFO(name);
    CHECK(b.dtype() == (name == "num_batches_tracked" ? DType::Int64 : DType::Float64));
  }
  // float32 values are exact in float64: the same function, rounded less.
  Tensor y = net.forward(x.to(DType::Float64));
  CHECK(y.dtype() == DType::Float64);
  require_close(y, want, 1e-6, 1e-6);
  y.sum().backward();
  CHECK(net.parameter("scale").grad().dtype() == DType::Float64);
  require_error([&] { net.to(DType::Int64); }, {"TinyNet.to", "floating dtype", "Int64"});
}

TEST_CASE("Module: to(device) and to(dtype) keep each parameter's and buffer's identity, moving its gradient",
          "[nn]") {
  CpuDevicesGuard devices(2);
  const Device cpu1("cpu:1");
  manual_seed(6);
  TinyNet net;
  const std::vector<Tensor> before = net.parameters();  // handles taken before the moves
  const Tensor counter = net.buffer("counter");
  net.forward(tensor(pseudo_random(6, 7), {2, 3})).sum().backward();
  const std::vector<double> grad = values(before[0].grad());
  net.to(cpu1);
  const std::vector<Tensor> after = net.parameters();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    CHECK(before[i].is_same(after[i]));
    CHECK(before[i].device() == cpu1);
  }
  CHECK(counter.is_same(net.buffer("counter")));
  CHECK(counter.device() == cpu1);
  CHECK(before[0].grad().device() == cpu1);
  CHECK(values(before[0].grad()) == grad);
  net.to(DType::Float64);
  CHECK(before[0].is_same(net.parameters()[0]));
  CHECK(before[0].dtype() == DType::Float64);
  CHECK(before[0].grad().dtype() == DType::Float64);
}

TEST_CASE("Module: a tensor two modules share moves once and stays shared", "[nn]") {
  CpuDevicesGuard devices(2);
  const Device cpu1("cpu:1");
  const Tensor w = tensor({1.0f, 2.0f}, {2});
  auto a = std::make_shared<Scaling>(w), b = std::make_shared<Scaling>(w);
  nn::Sequential both{a, b};
  both.to(cpu1);
  CHECK(b->parameter("w").is_same(a->parameter("w")));
  CHECK(w.device() == cpu1);
  CHECK(values(both.forward(tensor({1.0f, 1.0f}, {2}, {.device = cpu1}))) == std::vector<double>{1.0, 4.0});
}

TEST_CASE("Tensor::set_data refuses a tensor an op produced", "[nn]") {
  Tensor leaf = tensor({1.0, 2.0}, {2}).requires_grad_();
  Tensor produced = leaf * 2.0;
  require_error([&] { produced.set_data(tensor({3.0, 4.0}, {2})); }, {"set_data", "leaf", "mul"});
  require_error([&] { leaf.set_data(tensor(std::vector<int64_t>{1}, {1}, {.dtype = DType::Int64})); },
                {"set_data", "floating", "Int64"});
}

TEST_CASE("Module: operator<< prints the tree of modules, each child under its name", "[nn]") {
  manual_seed(1);
  auto model = nn::mlp({4, 8, 3});
  std::ostringstream os;
  os << *model;
  CHECK(os.str() ==
        "Sequential(3 modules)\n"
        "  (0): Linear(in_features=4, out_features=8, bias=true)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=8, out_features=3, bias=true)");
  nn::Sequential outer{model};
  CHECK(outer.tree() ==
        "Sequential(1 module)\n"
        "  (0): Sequential(3 modules)\n"
        "    (0): Linear(in_features=4, out_features=8, bias=true)\n"
        "    (1): ReLU()\n"
        "    (2): Linear(in_features=8, out_features=3, bias=true)");
}

TEST_CASE("Module: a forward of several tensors is called as m(x, mask), and trains", "[nn]") {
  auto scores = std::make_shared<MaskedScores>(2);
  const Tensor x = tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {3, 2});
  const Tensor mask = gt(tensor({0.0f, 1.0f, 0.0f}, {3, 1}), 0.5);
  const Tensor want = softmax(masked_fill(matmul(x, ones({2, 1})), mask, -INFINITY), 0);
  CHECK(values((*scores)(x, mask)) == values(want));
  CHECK(values((*scores)(std::vector<Tensor>{x, mask})) == values(want));
  CHECK(values(scores->clone()->forward_many({x, mask})) == values(want));
  (*scores)(x, mask).sum().backward();
  REQUIRE(scores->parameter("q").grad().defined());
  // A one-tensor module given two, and one defining neither form, name themselves.
  require_error([&] { Scaling(ones({1}))(x, mask); }, {"Scaling", "takes 1 tensor, got 2", "forward_many"});
  require_error([&] { Formless()(x); }, {"Formless", "call each other"});
  require_error([&] { Formless()(x, mask); }, {"Formless", "takes 1 tensor, got 2"});
  require_error([&] { Looping()(x); }, {"Looping", "call each other"});
}
