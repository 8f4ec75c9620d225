// tests/golden/test_golden.cpp — multigrad against PyTorch on the golden files that
// tests/golden/make_golden.py wrote (see its docstring for what each file holds).
//
// For each case: build the same module, load PyTorch's initial state and cast it to float64
// (Module::to), run forward and backward in training mode on the float64 batch, and compare the
// output, loss, parameter and input gradients and buffers with PyTorch's float64 values; then
// two SGD (momentum, nesterov, weight decay), Adam and AdamW steps from the same state, and for
// the GPT two AdamW steps with nanoGPT's parameter groups.
//
// The tolerance, |got - want| <= 1e-9 (|want| + max(max|want|, 0.1)) over each tensor, is set by
// the error bound of float64 sums, with a margin measured on both sides. One sum of K products,
// in any order, is within gamma_K * sum |a_i b_i| of its exact value, gamma_K = K u / (1 - K u),
// u = 2^-53 (Higham, Accuracy and Stability of Numerical Algorithms, eq. 3.5): 3.5e-13 of sum
// |a_i b_i| for the longest sums here, K = 3136 (the CNN's Linear(3136, 128) and its first conv's
// weight gradient over 4 x 28 x 28 positions). For a whole network there is no such bound to
// write down: later ops amplify earlier errors (batch norm's 1/sigma, softmax, Adam's division
// by sqrt(v) + eps), so what the tolerance rests on is that estimate and these measurements:
// reversing the batch order (every sum over the batch in another order) moved PyTorch's values
// by 1.1e-12 of a tensor's largest magnitude at most (the CNN's; make_golden.py records it per
// case and refuses more than 1e-11), and multigrad's values, under OpenBLAS's Zen and Prescott
// kernels, were all within 1e-12 of PyTorch's. So 1e-9 is about 1000 times what rounding was
// seen to do. A mistake in a formula is far larger: one float32 rounding inside a float64 op
// is 6e-8 of the value it touches, 60 times the tolerance at a tensor's largest entries. The
// 0.1 floor covers tensors whose exact value is 0 (a bias before batch norm), which hold only
// the rounding of the larger terms that produced them.
// Float32 kernels are not compared with PyTorch here: they are checked op by op against float64
// references (tests/kernels, tests/autograd; GEMMs and convolutions within gamma_K sum |a b|),
// under every kernel choice of the numerics runs (tests/README.md).
#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "test_util.h"

namespace {

using mg::Tensor;
using mg::nn::Module;

std::string golden_path(const std::string& name) { return std::string(MG_SOURCE_DIR) + "/tests/golden/" + name; }

// make_golden.py's Attention: scaled_dot_product_attention of q, k and v cut from the last
// dimension of one (B, H, T, 3 E) input.
class Attention : public mg::nn::Cloneable<Attention> {
 public:
  explicit Attention(bool causal) : causal_(causal) {}
  Tensor forward(const Tensor& x) override {
    const std::vector<Tensor> qkv = mg::chunk(x, 3, -1);
    return mg::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], causal_);
  }
  std::string name() const override { return causal_ ? "Attention(causal)" : "Attention()"; }

 private:
  bool causal_;
};

// make_golden.py's Function: one op of the functional API as a module.
class Function : public mg::nn::Cloneable<Function> {
 public:
  Function(std::string op, std::function<Tensor(const Tensor&)> fn) : op_(std::move(op)), fn_(std::move(fn)) {}
  Tensor forward(const Tensor& x) override { return fn_(x); }
  std::string name() const override { return op_; }

 private:
  std::string op_;
  std::function<Tensor(const Tensor&)> fn_;
};

// make_golden.py's ROWS and PICKS: the indices its index-op cases read.
Tensor rows() { return mg::tensor(std::vector<int64_t>{3, 0, 3, 1}, {4}, {.dtype = mg::DType::Int64}); }
Tensor picks() {
  return mg::tensor(std::vector<int64_t>{4, 4, 0, 1, 2, 1, 1, 2, 1, 4, 4, 0}, {4, 3}, {.dtype = mg::DType::Int64});
}

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
      {"gpt_tiny", [] { return gpt(gpt_config("tiny", 40)); }},
      {"attention", [] { return std::make_shared<Attention>(false); }},
      {"attention_causal", [] { return std::make_shared<Attention>(true); }},
      {"sin", [] { return std::make_shared<Function>("sin", mg::sin); }},
      {"cos", [] { return std::make_shared<Function>("cos", mg::cos); }},
      {"erf", [] { return std::make_shared<Function>("erf", mg::erf); }},
      {"expm1", [] { return std::make_shared<Function>("expm1", mg::expm1); }},
      {"log1p", [] { return std::make_shared<Function>("log1p", mg::log1p); }},
      {"logsumexp", [] { return std::make_shared<Function>("logsumexp", [](const Tensor& x) { return mg::logsumexp(x, {1}); }); }},
      {"var", [] { return std::make_shared<Function>("var", [](const Tensor& x) { return mg::var(x, {1}); }); }},
      {"std", [] { return std::make_shared<Function>("std", [](const Tensor& x) { return mg::std(x, {1}, 0, true); }); }},
      {"masked_fill", [] {
         return std::make_shared<Function>("masked_fill",
                                           [](const Tensor& x) { return mg::masked_fill(x, mg::gt(x, 0.5), -2.0); });
       }},
      {"index_select", [] { return std::make_shared<Function>("index_select", [](const Tensor& x) { return mg::index_select(x, 1, rows()); }); }},
      {"index_add", [] { return std::make_shared<Function>("index_add", [](const Tensor& x) { return mg::index_add(x, 1, rows(), mg::slice(x, 1, 0, 4) * 3.0); }); }},
      {"gather", [] { return std::make_shared<Function>("gather", [](const Tensor& x) { return mg::gather(x, 1, picks()); }); }},
      {"scatter_add", [] {
         return std::make_shared<Function>("scatter_add", [](const Tensor& x) {
           return mg::scatter_add(x, 1, picks(), mg::slice(x, 1, 1, 4) * 2.0);
         });
       }},
      {"cumsum", [] { return std::make_shared<Function>("cumsum", [](const Tensor& x) { return mg::cumsum(x, 1); }); }},
      {"sort", [] { return std::make_shared<Function>("sort", [](const Tensor& x) { return mg::sort(x, 1, true).values; }); }},
      {"topk", [] { return std::make_shared<Function>("topk", [](const Tensor& x) { return mg::topk(x, 3, 1).values; }); }},
  };
  return table.at(c)();
}

// |got - want| <= rtol (|want| + max(max|want|, 0.1)) elementwise (see the file comment):
// entries near zero carry the rounding of the larger terms that produced them.
void require_matches(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  const double rtol = 1e-9;
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

// The batch in float64 (integer embedding indices and class targets as they are).
Tensor float64(const Tensor& t) { return mg::is_floating(t.dtype()) ? t.to(mg::DType::Float64) : t; }

// "lm": cross-entropy of (B, T, V) logits against the next tokens (B, T), over all B T positions.
Tensor loss_of(const Golden& g, const Tensor& output) {
  const Tensor target = float64(g.t.at("target"));
  if (g.loss == "lm") {
    const int64_t vocab = output.size(-1);
    return mg::cross_entropy(output.reshape({output.numel() / vocab, vocab}), target.reshape({target.numel()}));
  }
  return g.loss == "cross_entropy" ? mg::cross_entropy(output, target) : mg::mse_loss(output, target);
}

// PyTorch's initial state (float32, as it drew it), cast to float64 exactly.
std::shared_ptr<Module> fresh(const std::string& c, const Golden& g) {
  auto model = build(c);
  model->load_state_dict(g.with_prefix("state"));
  model->to(mg::DType::Float64);
  model->train();
  return model;
}

void check_forward_backward(const std::string& c) {
  Golden g(c);
  auto model = fresh(c, g);
  Tensor x = float64(g.t.at("input")).clone();
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

// With group_weight_decay, the parameters in make_golden.py's decay_groups: that weight decay on
// those of 2 or more dimensions, none on the rest.
template <class Opt, class Options>
void check_steps(const std::string& c, const std::string& prefix, const Options& options,
                 std::optional<double> group_weight_decay = std::nullopt) {
  Golden g(c);
  if (g.with_prefix(prefix).empty()) return;  // no parameters, or a case without this optimizer
  auto model = fresh(c, g);
  Opt opt = group_weight_decay ? Opt(mg::optim::weight_decay_groups(model->parameters(), *group_weight_decay), options)
                               : Opt(model->parameters(), options);
  const Tensor x = float64(g.t.at("input"));
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    loss_of(g, model->forward(x)).backward();
    opt.step();
  }
  for (const auto& [name, p] : model->named_parameters()) require_matches(p, g.t.at(prefix + "." + name), prefix + "." + name);
}

void check_case(const std::string& c) {
  check_forward_backward(c);
  check_steps<mg::optim::SGD>(c, "sgd", mg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-4});
  check_steps<mg::optim::Adam>(c, "adam", mg::optim::AdamOptions{.lr = 1e-3});
  check_steps<mg::optim::AdamW>(c, "adamw", mg::optim::AdamWOptions{.lr = 1e-3, .weight_decay = 1e-2});
  check_steps<mg::optim::AdamW>(c, "adamw_groups", mg::optim::AdamWOptions{.lr = 1e-3, .betas = {0.9, 0.95}}, 0.1);
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
TEST_CASE("golden: sin, cos, erf, expm1 and log1p match PyTorch", "[golden]") {
  for (const char* op : {"sin", "cos", "erf", "expm1", "log1p"}) check_case(op);
}
TEST_CASE("golden: logsumexp, var, std and masked_fill match PyTorch", "[golden]") {
  for (const char* op : {"logsumexp", "var", "std", "masked_fill"}) check_case(op);
}

TEST_CASE("golden: index_select, index_add, gather, scatter_add, cumsum, sort and topk match PyTorch", "[golden]") {
  for (const char* op : {"index_select", "index_add", "gather", "scatter_add", "cumsum", "sort", "topk"}) check_case(op);
}
TEST_CASE("golden: Sigmoid matches PyTorch", "[golden]") { check_case("sigmoid"); }
TEST_CASE("golden: Flatten matches PyTorch", "[golden]") { check_case("flatten"); }
TEST_CASE("golden: the MLP matches PyTorch", "[golden]") { check_case("mlp"); }
TEST_CASE("golden: the Fashion-MNIST CNN matches PyTorch", "[golden]") { check_case("cnn"); }
TEST_CASE("golden: the tiny GPT matches PyTorch", "[golden]") { check_case("gpt_tiny"); }
TEST_CASE("golden: scaled_dot_product_attention matches PyTorch", "[golden]") { check_case("attention"); }
TEST_CASE("golden: causal scaled_dot_product_attention matches PyTorch", "[golden]") {
  check_case("attention_causal");
}

namespace {

// max |a| over the elements.
double largest_magnitude(const Tensor& a) {
  double m = 0;
  for (double v : a.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// max |a - b| over the elements.
double max_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

// `steps` AdamW steps (make_golden.py's groups and settings) of the tiny GPT `model` from gpt_tiny's
// state on its batch, each step's forward and loss under autocast to `precision`, its backward after
// it, as PyTorch's scripts do. Returns each step's loss.
std::vector<double> adamw_steps(mg::nn::Module& model, const Golden& exact, mg::Precision precision, int64_t steps) {
  model.load_state_dict(exact.with_prefix("state"));
  model.train();
  mg::optim::AdamW opt(mg::optim::weight_decay_groups(model.parameters(), 0.1),
                       mg::optim::AdamWOptions{.lr = 1e-3, .betas = {0.9, 0.95}});
  std::vector<double> losses;
  for (int64_t step = 0; step < steps; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      mg::AutocastGuard autocast(precision);
      loss = loss_of(exact, model.forward(exact.t.at("input")));
    }
    loss.backward();
    opt.step();
    losses.push_back(loss.to_vector<double>()[0]);
  }
  return losses;
}

// multigrad's autocast (autograd/autocast.h's emulation) beside PyTorch's, on the tiny GPT:
// the logits, the loss and every gradient, each against the float64 values of gpt_tiny.
//
// Mixed precision is far from exact (PyTorch's own bf16 gradients are 1e-3 of their size off),
// and two implementations of it round different float32 sums, so their values cannot match
// closely; what must match is the size of the error. Both round the same operands and results
// to the same precision, and their attention kernels round the softmax weights and dS at the
// same points (kernels/attention.h); they differ in the order of float32 sums (a sum that lands
// near a rounding midpoint may round the other way: one step of the precision), an error of the
// kind both already make, so the test requires multigrad's error to be within twice PyTorch's,
// and multigrad and PyTorch to be within three times PyTorch's error apart (the triangle
// inequality on the first). Where PyTorch's error is smaller than one rounding of the value
// (u max|exact|, u = 2^-8 for bf16, 2^-11 for fp16: the loss, whose float32 reduction averages
// the rounding out), that rounding is the scale instead. Measured on a Zen 5 under every
// numerics variant's kernels: multigrad's error 0.67 to 1.3 times PyTorch's in bf16, 0.74 to 1.7
// in fp16, apart 0.05 to 1.8 times. Not rounding at all gives errors 1000 times smaller, which
// the lower bound, a quarter of PyTorch's error, refuses; so would a missing rounding in one op.
void check_autocast(mg::Precision precision, const std::string& prefix) {
  Golden exact("gpt_tiny");
  Golden theirs("gpt_tiny_autocast");
  const double u = precision == mg::Precision::BFloat16 ? 0x1p-8 : 0x1p-11;
  const auto compare = [&](const Tensor& got, const std::string& key) {
    const Tensor& torch = theirs.t.at(prefix + "." + key);
    const Tensor& want = exact.t.at(key);
    const double torch_error = max_difference(torch, want), our_error = max_difference(got, want);
    const double apart = max_difference(got, torch);
    const double largest = largest_magnitude(want);
    const double scale = std::max(torch_error, u * largest);
    INFO(prefix << "." << key << ": multigrad's error " << our_error << ", PyTorch's " << torch_error
                << ", apart " << apart << ", one rounding " << u * largest);
    CHECK(our_error <= 2 * scale);
    CHECK(apart <= 3 * scale);
    CHECK(our_error >= torch_error / 4);
  };
  auto model = build("gpt_tiny");
  model->load_state_dict(exact.with_prefix("state"));
  model->train();
  const Tensor x = exact.t.at("input");
  Tensor out, loss;
  {
    mg::AutocastGuard autocast(precision);
    out = model->forward(x);
    loss = loss_of(exact, out);
  }
  loss.backward();
  compare(out, "output");
  compare(loss, "loss");
  for (const auto& [name, p] : model->named_parameters()) compare(p.grad(), "grad." + name);
  // Two AdamW steps (nanoGPT's groups, make_golden.py's settings) on float32 master weights, each
  // step's forward and loss under autocast, its backward after it, as PyTorch's script does.
  // Adam's normalisation rules out the bound above: a step moves an element by lr m^/(sqrt(v^) +
  // eps), and where rounding flips a small gradient's sign the element moves the other way, a
  // whole step off, in PyTorch's run (2e-3 = 2 lr measured) as in multigrad's, at elements of their
  // own. What bounds every element: for t <= 2 and betas (0.9, 0.95), Cauchy-Schwarz gives
  // |m^| / sqrt(v^) <= 1.0004, so each step moves an element by at most 1.0004 lr (the decay
  // lr wd p moves both runs alike, to 1e-7), and two runs end at most 4.0008 lr apart, plus their
  // float32 roundings of the parameter (2 steps, 2 each: 4 u |p|, u = 2^-24). Each tensor's error and
  // the runs' difference must be within that; over all tensors multigrad's largest error within 4
  // times PyTorch's (a run without rounding would be 1000 times closer); and the parameters stay
  // float32 (master weights): their low 16 bits are not all zero, as a bfloat16 copy's would be.
  constexpr double lr = 1e-3;
  double ours_most = 0, torch_most = 0;
  const auto compare_step = [&](const Tensor& got, const std::string& key) {
    const Tensor& torch = theirs.t.at(prefix + "." + key);
    const Tensor& want = exact.t.at(key);
    const double largest = largest_magnitude(want);
    const double bound = 4.0008 * lr + 1e-7 + 4 * 0x1p-24 * largest;
    const double our_error = max_difference(got, want), torch_error = max_difference(torch, want);
    INFO(prefix << "." << key << ": multigrad's error " << our_error << ", PyTorch's " << torch_error << ", apart "
                << max_difference(got, torch) << ", bound " << bound);
    CHECK(torch_error <= bound);  // the bound's derivation, on PyTorch's run
    CHECK(our_error <= bound);
    CHECK(max_difference(got, torch) <= bound);
    ours_most = std::max(ours_most, our_error), torch_most = std::max(torch_most, torch_error);
    int64_t low_bits = 0;
    const std::vector<float> v = got.to_vector<float>();
    for (float f : v) low_bits += (std::bit_cast<uint32_t>(f) & 0xFFFFu) != 0;
    if (v.size() >= 64) CHECK(double(low_bits) >= 0.9 * double(v.size()));
  };
  auto trained = build("gpt_tiny");
  adamw_steps(*trained, exact, precision, 2);
  for (const auto& [name, p] : trained->named_parameters()) compare_step(p, "adamw_groups." + name);
  INFO(prefix << ": after two steps multigrad's largest error " << ours_most << ", PyTorch's " << torch_most);
  CHECK(ours_most >= torch_most / 4);
}

}  // namespace

TEST_CASE("golden: the tiny GPT under bf16 and fp16 autocast stays within PyTorch's autocast error", "[golden][autocast]") {
  check_autocast(mg::Precision::BFloat16, "bf16");
  check_autocast(mg::Precision::Float16, "fp16");
}

// Over many steps no error bound can be derived (Adam's normalisation turns a small difference
// into a whole step: see check_autocast), so the yardstick is PyTorch's own: the loss curve of 40
// AdamW steps, in float32 and under bf16 and fp16 autocast, against PyTorch's float64 curve from
// the same float32 state (make_golden_autocast.py). The rule is check_autocast's: multigrad's
// largest error within twice PyTorch's, the two curves within three times apart, and, in
// the lower precisions, multigrad's error at least a quarter of PyTorch's (a run that skipped
// a rounding would be 100 times closer). The scale is PyTorch's largest error, or one float32
// rounding of the loss where that is larger (2^-24 |L|: no float32 run can be closer).
// Measured on a Zen 5 under every numerics variant's kernels (tests/numerics/run.sh: bf16 GEMMs
// emulated or oneDNN's): multigrad's error 0.53 times PyTorch's in float32, 0.75 to 1.05 in bf16,
// 0.69 to 0.95 in fp16.
TEST_CASE("golden: 40 training steps of the tiny GPT under bf16 and fp16 stay as close to float64 as PyTorch's",
          "[golden][autocast]") {
  Golden exact("gpt_tiny");
  Golden theirs("gpt_tiny_trajectory");
  const std::vector<double> fp64 = theirs.t.at("fp64").to_vector<double>();
  const size_t steps = fp64.size();
  for (const auto& [precision, key] : {std::pair{mg::Precision::Float32, "fp32"}, {mg::Precision::BFloat16, "bf16"},
                                       {mg::Precision::Float16, "fp16"}}) {
    const std::vector<double> torch = theirs.t.at(key).to_vector<double>();
    const std::vector<double> ours = adamw_steps(*build("gpt_tiny"), exact, precision, int64_t(steps));
    double ours_most = 0, torch_most = 0, apart_most = 0, largest = 0;
    for (size_t s = 0; s < steps; ++s) {
      ours_most = std::max(ours_most, std::abs(ours[s] - fp64[s]));
      torch_most = std::max(torch_most, std::abs(torch[s] - fp64[s]));
      apart_most = std::max(apart_most, std::abs(ours[s] - torch[s]));
      largest = std::max(largest, std::abs(fp64[s]));
    }
    const double scale = std::max(torch_most, 0x1p-24 * largest);
    INFO(key << ": multigrad's largest error " << ours_most << ", PyTorch's " << torch_most << ", apart "
             << apart_most << ", scale " << scale);
    CHECK(ours_most <= 2 * scale);
    CHECK(apart_most <= 3 * scale);
    if (precision != mg::Precision::Float32) CHECK(ours_most >= torch_most / 4);
  }
}
