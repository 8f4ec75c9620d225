// nn/layers.cpp — the layers of nn/layers.h: construction (PyTorch's initialisations) and
// forward over the functional API (autograd/ops.h, autograd/nn_ops.h).
#include "multigrad/nn/layers.h"

#include <cmath>

#include "multigrad/autograd/checkpoint.h"
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/nn/init.h"

namespace mg::nn {
namespace {

using detail::str_cat;

// Kaiming uniform with a = sqrt(5) on the weight and U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the
// bias: the default initialisation of PyTorch's Linear and Conv2d.
const double kDefaultKaimingSlope = std::sqrt(5.0);

void init_weight_and_bias(const Tensor& weight, const Tensor& bias) {
  init::kaiming_uniform_(weight, kDefaultKaimingSlope);
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(double(init::fan_in_and_fan_out(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

const char* bool_str(bool b) { return b ? "true" : "false"; }

}  // namespace

// ---- Linear ----

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_features_(in_features), out_features_(out_features), has_bias_(bias) {
  MG_CHECK(in_features > 0 && out_features >= 0, "Linear: invalid sizes in_features=", in_features,
           ", out_features=", out_features);
  register_parameter("weight", empty({out_features, in_features}));
  if (bias) register_parameter("bias", empty({out_features}));
  init_weight_and_bias(weight(), this->bias());
}

Tensor Linear::bias() const { return has_bias_ ? parameter("bias") : Tensor(); }

Tensor Linear::forward(const Tensor& input) {
  MG_CHECK(input.dim() >= 1 && input.size(-1) == in_features_, name(), ": expected an input whose last dim is ",
           in_features_, ", got shape ", input.shape());
  return linear(input, weight(), bias());
}

std::string Linear::name() const {
  return str_cat("Linear(in_features=", in_features_, ", out_features=", out_features_, ", bias=", bool_str(has_bias_),
                 ")");
}

// ---- Conv2d ----

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride, int64_t padding,
               int64_t dilation, int64_t groups, bool bias)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      options_{{stride, stride}, {padding, padding}, {dilation, dilation}, groups},
      has_bias_(bias) {
  MG_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && stride > 0 && padding >= 0 && dilation > 0,
           "Conv2d: invalid arguments in_channels=", in_channels, ", out_channels=", out_channels,
           ", kernel_size=", kernel_size, ", stride=", stride, ", padding=", padding, ", dilation=", dilation);
  MG_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0, "Conv2d: groups=", groups,
           " must divide in_channels=", in_channels, " and out_channels=", out_channels);
  register_parameter("weight", empty({out_channels, in_channels / groups, kernel_size, kernel_size}));
  if (bias) register_parameter("bias", empty({out_channels}));
  init_weight_and_bias(weight(), this->bias());
}

Tensor Conv2d::bias() const { return has_bias_ ? parameter("bias") : Tensor(); }

Tensor Conv2d::forward(const Tensor& input) { return conv2d(input, weight(), bias(), options_); }

std::string Conv2d::name() const {
  return str_cat("Conv2d(", in_channels_, ", ", out_channels_, ", kernel_size=", kernel_size_,
                 ", stride=", options_.stride[0], ", padding=", options_.padding[0], ", dilation=",
                 options_.dilation[0], ", groups=", options_.groups, ", bias=", bool_str(has_bias_), ")");
}

// ---- pooling ----

namespace {

Pool2dOptions pool_options(const char* layer, int64_t kernel_size, int64_t stride, int64_t padding) {
  MG_CHECK(kernel_size > 0 && stride >= 0 && padding >= 0, layer, ": invalid kernel_size=", kernel_size,
           ", stride=", stride, ", padding=", padding);
  const int64_t s = stride == 0 ? kernel_size : stride;
  return {{kernel_size, kernel_size}, {s, s}, {padding, padding}};
}

std::string pool_name(const char* layer, const Pool2dOptions& o) {
  return str_cat(layer, "(kernel_size=", o.kernel_size[0], ", stride=", o.stride[0], ", padding=", o.padding[0], ")");
}

}  // namespace

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : options_(pool_options("MaxPool2d", kernel_size, stride, padding)) {}
Tensor MaxPool2d::forward(const Tensor& input) { return max_pool2d(input, options_); }
std::string MaxPool2d::name() const { return pool_name("MaxPool2d", options_); }

AvgPool2d::AvgPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : options_(pool_options("AvgPool2d", kernel_size, stride, padding)) {}
Tensor AvgPool2d::forward(const Tensor& input) { return avg_pool2d(input, options_); }
std::string AvgPool2d::name() const { return pool_name("AvgPool2d", options_); }

// ---- normalisation ----

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum)
    : num_features_(num_features), eps_(eps), momentum_(momentum) {
  MG_CHECK(num_features > 0, "BatchNorm2d: num_features must be positive, got ", num_features);
  MG_CHECK(eps > 0 && momentum >= 0 && momentum <= 1, "BatchNorm2d: invalid eps=", eps, " or momentum=", momentum);
  register_parameter("weight", ones({num_features}));
  register_parameter("bias", zeros({num_features}));
  register_buffer("running_mean", zeros({num_features}));
  register_buffer("running_var", ones({num_features}));
  register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::Int64}));
}

Tensor BatchNorm2d::forward(const Tensor& input) {
  MG_CHECK(input.dim() == 4 && input.size(1) == num_features_, name(), ": expected an (N, ", num_features_,
           ", H, W) input, got shape ", input.shape());
  Tensor out = batch_norm(input, buffer("running_mean"), buffer("running_var"), parameter("weight"),
                          parameter("bias"), is_training(), momentum_, eps_);
  if (is_training()) {
    NoGradGuard no_grad;
    const Tensor& tracked = buffer("num_batches_tracked");
    copy_(tracked, tracked + 1.0);
  }
  return out;
}

std::string BatchNorm2d::name() const {
  return str_cat("BatchNorm2d(", num_features_, ", eps=", eps_, ", momentum=", momentum_, ")");
}

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps), affine_(elementwise_affine) {
  MG_CHECK(!normalized_shape_.empty() && numel_of(normalized_shape_) > 0,
           "LayerNorm: normalized_shape must be non-empty with no zero size, got ", normalized_shape_);
  if (affine_) {
    register_parameter("weight", ones(normalized_shape_));
    register_parameter("bias", zeros(normalized_shape_));
  }
}

Tensor LayerNorm::forward(const Tensor& input) {
  if (!affine_) return layer_norm(input, normalized_shape_, Tensor(), Tensor(), eps_);
  return layer_norm(input, normalized_shape_, parameter("weight"), parameter("bias"), eps_);
}

std::string LayerNorm::name() const {
  return str_cat("LayerNorm(", normalized_shape_, ", eps=", eps_, ", elementwise_affine=", bool_str(affine_), ")");
}

// ---- dropout, embedding ----

Dropout::Dropout(double p) : p_(p) {
  MG_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& input) { return dropout(input, p_, is_training()); }
std::string Dropout::name() const { return str_cat("Dropout(p=", p_, ")"); }

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  MG_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding: invalid sizes num_embeddings=", num_embeddings,
           ", embedding_dim=", embedding_dim);
  register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight(), 0.0, 1.0);
}
Tensor Embedding::forward(const Tensor& indices) { return embedding(weight(), indices); }
std::string Embedding::name() const { return str_cat("Embedding(", num_embeddings_, ", ", embedding_dim_, ")"); }

TiedLinear::TiedLinear(std::shared_ptr<Module> owner, std::string parameter)
    : owner_(std::move(owner)), parameter_(std::move(parameter)) {
  MG_CHECK(owner_ != nullptr, "TiedLinear: owner is null");
  MG_CHECK(owner_weight().dim() == 2, "TiedLinear: expected ", owner_->name(), "'s '", parameter_,
           "' to be a matrix (out, in), got ", owner_weight().shape());
}

Tensor TiedLinear::forward(const Tensor& input) {
  const Tensor& w = stand_in_.defined() ? stand_in_ : owner_weight();  // (out, in)
  return matmul(input, transpose(w, 0, 1));
}

std::string TiedLinear::name() const { return str_cat("TiedLinear(", owner_->name(), ".", parameter_, ")"); }

Recomputed::Recomputed(std::shared_ptr<Module> module) { register_module("module", std::move(module)); }

Tensor Recomputed::forward(const Tensor& input) {
  const std::shared_ptr<Module> m = child("module");
  return checkpoint([m](const Tensor& x) { return (*m)(x); }, input, m->parameters());
}

std::string Recomputed::name() const { return str_cat("Recomputed(", child("module")->name(), ")"); }

// ---- activations, flatten ----

Tensor ReLU::forward(const Tensor& input) { return relu(input); }
Tensor GELU::forward(const Tensor& input) { return gelu(input); }
Tensor Tanh::forward(const Tensor& input) { return tanh(input); }
Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }
Tensor Flatten::forward(const Tensor& input) { return flatten(input, start_dim_, end_dim_); }
std::string Flatten::name() const { return str_cat("Flatten(start_dim=", start_dim_, ", end_dim=", end_dim_, ")"); }

// ---- Sequential ----

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) { register_module(std::to_string(size()), std::move(module)); }

std::shared_ptr<Module> Sequential::at(size_t i) const {
  MG_CHECK(i < size(), "Sequential: index ", i, " out of range for ", size(), " modules");
  return named_children()[i].second;
}

std::shared_ptr<Sequential> Sequential::slice(size_t begin, size_t end) const {
  MG_CHECK(begin <= end && end <= size(), "Sequential::slice: [", begin, ", ", end, ") is not a range within ",
           size(), " modules");
  auto out = std::make_shared<Sequential>();
  for (size_t i = begin; i < end; ++i) out->push_back(at(i));
  out->train(is_training());
  return out;
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [n, m] : named_children()) x = m->forward(x);
  return x;
}

std::string Sequential::name() const { return str_cat("Sequential(", size(), size() == 1 ? " module)" : " modules)"); }

}  // namespace mg::nn
