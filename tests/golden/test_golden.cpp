// tests/golden/test_golden.cpp — multigrad against PyTorch on the golden files that
// tests/golden/make_golden.py wrote (see its docstring for what each file holds).
//
// For each case: build the same module, load PyTorch's initial state, run forward and backward
// in training mode, and compare the output, loss, parameter and input gradients and buffers;
// then two SGD (momentum, nesterov, weight decay), Adam and AdamW steps from the same state.
// Float32 throughout; values agree within 1e-5 relative (see require_matches for the floor).
// Adam's step lr * m / (sqrt(v) + eps) is about +-lr whatever the gradient's size, so where the
// gradient is small its sign, and so the step, turn on float32 rounding in any implementation
// (a ReLU-dead input, a pooled-away position, a second-step gradient near 0). Where |grad| is
// below 1e-2 of the tensor's largest, Adam/AdamW results are only checked to have moved at
// most lr per step (plus AdamW's decay); elsewhere to 1e-5 relative plus 1e-3 of a step.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "test_util.h"

namespace {

using mg::Tensor;
using mg::nn::Module;

std::string golden_path(const std::string& name) { return std::string(MG_SOURCE_DIR) + "/tests/golden/" + name; }

std::shared_ptr<Module> build(const std::string& c) {
  using namespace mg::nn;
  static const std::map<std::string, std::function<std::shared_ptr<Module>()>> table = {
      {"linear", [] { return std::make_shared<Linear>(7, 5); }},
      {"linear_ce", [] { return std::make_shared<Linear>(7, 5); }},
      {"conv2d", [] { return std::make_shared<Conv2d>(3, 4, 3, 1, 1); }},
      {"conv2d_strided_groups", [] { return std::make_shared<Conv2d>(4, 6, 3, 2, 1, 1, 2); }},
      {"conv2d_dilated", [] { return std::make_shared<Conv2d>(2, 3, 3, 1, 2, 2); }},
      {"maxpool2d", [] { return std::make_shared<MaxPool2d>(2); }},
      {"avgpool2d", [] { return std::make_shared<AvgPool2d>(3, 2, 1); }},
      {"batchnorm2d", [] { return std::make_shared<BatchNorm2d>(3); }},
      {"layernorm", [] { return std::make_shared<LayerNorm>(mg::Shape{3, 4}); }},
      {"embedding", [] { return std::make_shared<Embedding>(10, 4); }},
      {"relu", [] { return std::make_shared<ReLU>(); }},
      {"gelu", [] { return std::make_shared<GELU>(); }},
      {"tanh", [] { return std::make_shared<Tanh>(); }},
      {"sigmoid", [] { return std::make_shared<Sigmoid>(); }},
      {"flatten", [] { return std::make_shared<Flatten>(); }},
      {"mlp", [] { return mlp({784, 256, 128, 10}); }},
      {"cnn", [] { return fashion_cnn(); }},
  };
  return table.at(c)();
}

// |got - want| <= rtol |want| + atol elementwise, with atol = rtol * max(max|want|, 0.1):
// entries near zero carry the float32 rounding of the larger terms that produced them
// (a conv bias before batch norm has a true gradient of 0 and gets only that rounding).
void require_matches(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  const double rtol = 1e-5;
  double scale = 0.1;
  for (double v : w) scale = std::max(scale, std::abs(v));
  const double atol = rtol * scale;
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": multigrad " << g[i] << ", PyTorch " << w[i]);
    REQUIRE(std::abs(g[i] - w[i]) <= rtol * std::abs(w[i]) + atol);
  }
}

struct Golden {
  std::map<std::string, Tensor> t;
  std::string loss;

  explicit Golden(const std::string& c) {
    mg::io::SafetensorsFile f = mg::io::load_safetensors(golden_path(c + ".safetensors"));
    t = f.tensors;
    loss = f.metadata.at("loss");
  }
  // Every entry "prefix.<name>" as name -> tensor.
  mg::nn::StateDict with_prefix(const std::string& prefix) const {
    mg::nn::StateDict out;
    for (const auto& [k, v] : t)
      if (k.rfind(prefix + ".", 0) == 0) out[k.substr(prefix.size() + 1)] = v;
    return out;
  }
};

Tensor loss_of(const Golden& g, const Tensor& output) {
  return g.loss == "cross_entropy" ? mg::cross_entropy(output, g.t.at("target")) : mg::mse_loss(output, g.t.at("target"));
}

std::shared_ptr<Module> fresh(const std::string& c, const Golden& g) {
  auto model = build(c);
  model->load_state_dict(g.with_prefix("state"));
  model->train();
  return model;
}

void check_forward_backward(const std::string& c) {
  Golden g(c);
  auto model = fresh(c, g);
  Tensor x = g.t.at("input").clone();
  const bool float_input = mg::is_floating(x.dtype());
  if (float_input) x.requires_grad_();
  Tensor out = model->forward(x);
  require_matches(out, g.t.at("output"), "output");
  Tensor loss = loss_of(g, out);
  require_matches(loss, g.t.at("loss"), "loss");
  loss.backward();
  for (const auto& [name, p] : model->named_parameters()) {
    REQUIRE(p.grad().defined());
    require_matches(p.grad(), g.t.at("grad." + name), "grad." + name);
  }
  for (const auto& [name, b] : model->named_buffers()) require_matches(b, g.t.at("buffer_after." + name), "buffer " + name);
  if (float_input) require_matches(x.grad(), g.t.at("input_grad"), "input_grad");
}

template <class Opt, class Options>
void check_steps(const std::string& c, const std::string& prefix, const Options& options) {
  Golden g(c);
  if (g.with_prefix(prefix).empty()) return;  // no parameters, or a case without this optimizer
  auto model = fresh(c, g);
  Opt opt(model->parameters(), options);
  constexpr int kSteps = 2;
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    loss_of(g, model->forward(g.t.at("input"))).backward();
    opt.step();
  }
  const bool adam = prefix != "sgd";
  for (const auto& [name, p] : model->named_parameters()) {
    const Tensor& want = g.t.at(prefix + "." + name);
    if (!adam) {
      require_matches(p, want, prefix + "." + name);
      continue;
    }
    std::vector<double> got = p.template to_vector<double>(), ref = want.template to_vector<double>();
    std::vector<double> grad = g.t.at("grad." + name).template to_vector<double>();
    std::vector<double> before = g.t.at("state." + name).template to_vector<double>();
    double largest = 0;
    for (double v : grad) largest = std::max(largest, std::abs(v));
    for (size_t i = 0; i < got.size(); ++i) {
      INFO(prefix << "." << name << " element " << i << ": multigrad " << got[i] << ", PyTorch " << ref[i]
                  << ", gradient " << grad[i]);
      if (std::abs(grad[i]) >= 1e-2 * largest)
        REQUIRE(std::abs(got[i] - ref[i]) <= 1e-5 * std::abs(ref[i]) + 1e-3 * options.lr);
      else
        REQUIRE(std::abs(got[i] - before[i]) <=
                kSteps * options.lr * (1 + 1e-3 + options.weight_decay * std::abs(before[i])));
    }
  }
}

void check_case(const std::string& c) {
  check_forward_backward(c);
  check_steps<mg::optim::SGD>(c, "sgd", mg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-4});
  check_steps<mg::optim::Adam>(c, "adam", mg::optim::AdamOptions{.lr = 1e-3});
  check_steps<mg::optim::AdamW>(c, "adamw", mg::optim::AdamWOptions{.lr = 1e-3, .weight_decay = 1e-2});
}

}  // namespace

TEST_CASE("golden: Linear with MSE matches PyTorch", "[golden]") { check_case("linear"); }
TEST_CASE("golden: Linear with cross-entropy matches PyTorch", "[golden]") { check_case("linear_ce"); }
TEST_CASE("golden: Conv2d matches PyTorch", "[golden]") { check_case("conv2d"); }
TEST_CASE("golden: Conv2d with stride, padding and groups matches PyTorch", "[golden]") { check_case("conv2d_strided_groups"); }
TEST_CASE("golden: dilated Conv2d matches PyTorch", "[golden]") { check_case("conv2d_dilated"); }
TEST_CASE("golden: MaxPool2d matches PyTorch", "[golden]") { check_case("maxpool2d"); }
TEST_CASE("golden: AvgPool2d matches PyTorch", "[golden]") { check_case("avgpool2d"); }
TEST_CASE("golden: BatchNorm2d in training matches PyTorch", "[golden]") { check_case("batchnorm2d"); }
TEST_CASE("golden: LayerNorm matches PyTorch", "[golden]") { check_case("layernorm"); }
TEST_CASE("golden: Embedding matches PyTorch", "[golden]") { check_case("embedding"); }
TEST_CASE("golden: ReLU matches PyTorch", "[golden]") { check_case("relu"); }
TEST_CASE("golden: GELU (tanh) matches PyTorch", "[golden]") { check_case("gelu"); }
TEST_CASE("golden: Tanh matches PyTorch", "[golden]") { check_case("tanh"); }
TEST_CASE("golden: Sigmoid matches PyTorch", "[golden]") { check_case("sigmoid"); }
TEST_CASE("golden: Flatten matches PyTorch", "[golden]") { check_case("flatten"); }
TEST_CASE("golden: the MLP matches PyTorch", "[golden]") { check_case("mlp"); }
TEST_CASE("golden: the Fashion-MNIST CNN matches PyTorch", "[golden]") { check_case("cnn"); }
