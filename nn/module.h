// nn/module.h — Module: the base of every layer and model.
//
// A Module owns three ordered registries: parameters (leaf tensors with requires_grad, what an
// optimizer updates), buffers (state that is saved but not trained: BatchNorm's running
// statistics) and children (sub-modules). Registration order is kept, and names are dotted
// paths as in PyTorch: a module's own entries first, then each child's under "<child>.":
// "0.weight", "fc1.bias", "3.running_mean".
//
// Layers read their tensors from the registries on every forward (weight() is
// parameter("weight")), never from copies, so to(device), load_state_dict and clone() act on
// what forward uses. to(device) and to(dtype) move the data in place (Tensor::set_data): a
// parameter keeps its identity, so handles obtained from parameters() before the move (an
// optimizer's, a wrapper's) see the moved tensor, as in PyTorch; a gradient moves along.
//
// forward takes one tensor; a module that takes several (attention with a mask, a mixture of
// experts' tokens and routing) overrides forward_many instead, and is called as m(x, mask) or
// m(std::vector<Tensor>{...}). Each form's default hands over to the other: a one-tensor module
// called with several tensors, a module that defines neither, or one whose override calls the
// other form on itself is an error naming it. (The parallel
// wrappers, DataParallel, DDP and Pipeline, feed their module one tensor.)
//
// clone() is a deep copy for replicas (data parallelism): same structure and hyper-parameters,
// copied parameters and buffers, shared with nothing. A custom module gets it by deriving from
// Cloneable<Self> and keeping its sub-modules in the registry (child<M>("name")), not in
// pointer members of its own.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "multigrad/core/device.h"
#include "multigrad/core/dtype.h"
#include "multigrad/core/tensor.h"

namespace mg::nn {

// Parameters and buffers by dotted name; std::map so io::save_safetensors takes it as is.
using StateDict = std::map<std::string, Tensor>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;

  virtual Tensor forward(const Tensor& input);                // default: forward_many({input})
  virtual Tensor forward_many(const std::vector<Tensor>& inputs);  // default: forward(inputs[0])
  Tensor operator()(const Tensor& input) { return forward(input); }
  Tensor operator()(const std::vector<Tensor>& inputs) { return forward_many(inputs); }
  template <class... Rest>
  Tensor operator()(const Tensor& first, const Tensor& second, const Rest&... rest) {
    return forward_many({first, second, rest...});
  }
  // The layer's name and hyper-parameters, as PyTorch prints them: "Linear(in=4, out=3)".
  virtual std::string name() const = 0;
  // The tree: name(), then each child on lines of its own as "(name): ...", indented by two
  // spaces a level, in registration order (what operator<< prints, as print(model) in PyTorch).
  std::string tree() const;

  // ---- registries, recursive, registration order (own entries, then each child's) ----
  std::vector<Tensor> parameters() const;
  NamedTensors named_parameters() const;
  std::vector<Tensor> buffers() const;
  NamedTensors named_buffers() const;
  std::vector<std::shared_ptr<Module>> children() const;  // direct children only
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // This module's own entries (not its children's), for layers: throws naming a missing one.
  const Tensor& parameter(const std::string& name) const;
  const Tensor& buffer(const std::string& name) const;
  std::shared_ptr<Module> child(const std::string& child_name) const;
  template <class M>
  std::shared_ptr<M> child(const std::string& child_name) const;

  // ---- state ----
  // Moves every parameter and buffer to `device` in place (see the header comment): the same
  // tensors, now on `device`, with their requires_grad and their gradients moved along.
  void to(const Device& device);
  // Casts every floating-point parameter and buffer to the floating dtype `dtype` (as PyTorch's
  // module.to(torch.float64)); integer buffers keep theirs. Same rules as to(device).
  void to(DType dtype);
  // Training mode (dropout active, batch norm uses and updates batch statistics), recursively.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Parameters and buffers under their dotted names, detached (sharing storage with the module).
  StateDict state_dict() const;
  // Copies each entry of `state` into the module's tensor of that name (converting dtype and
  // device; without recording on the tape). A shape mismatch is always an error; with strict, so
  // are missing and unexpected keys. Every error names the key (and both shapes).
  void load_state_dict(const StateDict& state, bool strict = true);

  // A deep copy: same structure, independent copies of every parameter and buffer.
  std::shared_ptr<Module> clone() const;

 protected:
  Module() = default;
  Module(const Module&) = default;  // shallow: clone() deepens it
  Module& operator=(const Module&) = delete;

  // Registration (in constructors). Names are unique within one module and contain no '.'.
  // A parameter becomes a leaf that requires grad.
  void register_parameter(const std::string& name, Tensor value);
  void register_buffer(const std::string& name, Tensor value);
  void register_module(const std::string& name, std::shared_ptr<Module> module);

 private:
  // A shallow copy of the most derived type (Cloneable provides it).
  virtual std::shared_ptr<Module> shallow_copy() const = 0;
  void check_new_name(const std::string& name) const;
  // Gives every parameter and buffer t, recursively, convert(t)'s data in place unless that is
  // nullopt (to(device) and to(dtype)); a parameter's gradient is converted too.
  void convert_tensors(const std::function<std::optional<Tensor>(const Tensor&)>& convert);
  void collect(const std::string& prefix, bool params, NamedTensors& out) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Gives a module type its clone(): `class MyNet : public mg::nn::Cloneable<MyNet>`.
template <class Derived>
class Cloneable : public Module {
 private:
  std::shared_ptr<Module> shallow_copy() const override {
    return std::make_shared<Derived>(static_cast<const Derived&>(*this));
  }
};

template <class M>
std::shared_ptr<M> Module::child(const std::string& child_name) const {
  std::shared_ptr<Module> untyped = child(child_name);
  auto typed = std::dynamic_pointer_cast<M>(untyped);
  MG_CHECK(typed != nullptr, name(), ": child '", child_name, "' is a ", untyped->name(),
           ", not the type asked for");
  return typed;
}

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace mg::nn
