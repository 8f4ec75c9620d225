// nn/layers.h — the layers of torch.nn, with PyTorch's defaults and initialisations.
//
// Each layer registers its tensors in the Module registries and reads them from there in
// forward (nn/module.h). Initialisation draws from the global Philox state in a fixed order
// (weight, then bias), so construction after mg::manual_seed(s) is deterministic.
//
//   Linear(in, out)        weight (out, in), bias (out): U(-1/sqrt(in), 1/sqrt(in)) both
//                          (kaiming_uniform a=sqrt(5)); y = x @ W^T + b
//   Conv2d(in, out, k)     weight (out, in/groups, k, k), bias (out): the same rule with
//                          fan_in = in/groups * k * k
//   BatchNorm2d(C)         weight 1, bias 0; buffers running_mean 0, running_var 1,
//                          num_batches_tracked (Int64 scalar, +1 per training forward)
//   LayerNorm(shape)       weight 1, bias 0 of `shape`
//   Embedding(V, D)        weight (V, D) ~ N(0, 1)
//   GELU                   the tanh approximation (PyTorch's nn.GELU(approximate="tanh"))
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "multigrad/autograd/nn_ops.h"
#include "multigrad/nn/module.h"

namespace mg::nn {

class Linear : public Cloneable<Linear> {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& input) override;  // (*, in) -> (*, out)
  std::string name() const override;
  const Tensor& weight() const { return parameter("weight"); }
  Tensor bias() const;  // undefined without bias

 private:
  int64_t in_features_, out_features_;
  bool has_bias_;
};

class Conv2d : public Cloneable<Conv2d> {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& input) override;  // (N, in, H, W) -> (N, out, H', W')
  std::string name() const override;
  const Tensor& weight() const { return parameter("weight"); }
  Tensor bias() const;

 private:
  int64_t in_channels_, out_channels_, kernel_size_;
  Conv2dOptions options_;
  bool has_bias_;
};

// stride 0 means stride = kernel_size (PyTorch's default).
class MaxPool2d : public Cloneable<MaxPool2d> {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  Pool2dOptions options_;
};

class AvgPool2d : public Cloneable<AvgPool2d> {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  Pool2dOptions options_;
};

class BatchNorm2d : public Cloneable<BatchNorm2d> {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& input) override;  // (N, C, H, W)
  std::string name() const override;

 private:
  int64_t num_features_;
  double eps_, momentum_;
};

class LayerNorm : public Cloneable<LayerNorm> {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;
  const Shape& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  bool elementwise_affine() const { return affine_; }

 private:
  Shape normalized_shape_;
  double eps_;
  bool affine_;
};

class Dropout : public Cloneable<Dropout> {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& input) override;  // identity in eval mode
  std::string name() const override;
  double p() const { return p_; }

 private:
  double p_;
};

class Embedding : public Cloneable<Embedding> {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;  // Int64 (*) -> (*, D)
  std::string name() const override;
  const Tensor& weight() const { return parameter("weight"); }

 private:
  int64_t num_embeddings_, embedding_dim_;
};

class ReLU : public Cloneable<ReLU> {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "ReLU()"; }
};

class GELU : public Cloneable<GELU> {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "GELU(approximate=tanh)"; }
};

class Tanh : public Cloneable<Tanh> {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Tanh()"; }
};

class Sigmoid : public Cloneable<Sigmoid> {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Sigmoid()"; }
};

class Flatten : public Cloneable<Flatten> {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  int64_t start_dim_, end_dim_;
};

// y = x @ W^T by another module's weight W (out, in): weight tying, as GPT's lm head multiplies by
// the token embedding's (V, C) matrix. W stays its owner's parameter (parameters() and
// state_dict() list it once, under the owner) and is read from the owner's registry on every
// forward, so the owner's to(device) and load_state_dict reach it. set_stand_in(t) makes forward
// use t instead (undefined: the owner's again): a pipeline whose owner and user stages run on
// different devices gives the user a copy there and returns the copy's gradient to the owner
// (parallel/pipeline/pipeline.h, "Tied weights"). Not a child of its owner: a clone() of a tree holding
// it refers to the original owner, so a model clones the module that registers the owner (the
// GPT), and builds its TiedLinear afresh (nn::GPT::layers()).
class TiedLinear : public Cloneable<TiedLinear> {
 public:
  TiedLinear(std::shared_ptr<Module> owner, std::string parameter);
  Tensor forward(const Tensor& input) override;  // (*, in) -> (*, out)
  std::string name() const override;
  const Tensor& owner_weight() const { return owner_->parameter(parameter_); }
  void set_stand_in(Tensor weight) { stand_in_ = std::move(weight); }
  const Tensor& stand_in() const { return stand_in_; }

 private:
  std::shared_ptr<Module> owner_;
  std::string parameter_;
  Tensor stand_in_;
};

// Runs its child under activation recomputation (autograd/checkpoint.h): the forward keeps only
// the input, backward runs the child again; gradients bit-identical to running it directly.
class Recomputed : public Cloneable<Recomputed> {
 public:
  explicit Recomputed(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;
};

// Runs its children in order; they are named "0", "1", ... . Pipelines cut it into stages with
// slice(), whose result shares the child modules (and so their parameters) with this one.
class Sequential : public Cloneable<Sequential> {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

  void push_back(std::shared_ptr<Module> module);
  Sequential& add(std::shared_ptr<Module> module) {
    push_back(std::move(module));
    return *this;
  }
  size_t size() const { return named_children().size(); }
  // The i-th child; at() checks the index, operator[] too (an mg::Error, never UB).
  std::shared_ptr<Module> at(size_t i) const;
  std::shared_ptr<Module> operator[](size_t i) const { return at(i); }
  // Children [begin, end) as a new Sequential, renumbered from "0", sharing the modules; it
  // takes this Sequential's training mode (and sets it on those children).
  std::shared_ptr<Sequential> slice(size_t begin, size_t end) const;
};

}  // namespace mg::nn
