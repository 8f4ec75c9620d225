// nn/module.cpp — Module's registries, dotted names, device and dtype moves, train/eval, state
// dicts and deep copies (see nn/module.h).
#include "multigrad/nn/module.h"

#include <functional>
#include <optional>
#include <ostream>
#include <set>

#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"

namespace mg::nn {
namespace {

const Tensor* find(const NamedTensors& entries, const std::string& name) {
  for (const auto& [n, t] : entries)
    if (n == name) return &t;
  return nullptr;
}

}  // namespace

// ---- registries ----

void Module::check_new_name(const std::string& name) const {
  MG_CHECK(!name.empty() && name.find('.') == std::string::npos, this->name(), ": invalid entry name '", name,
           "' (non-empty, without '.')");
  bool taken = find(parameters_, name) || find(buffers_, name);
  for (const auto& [n, c] : children_) taken = taken || n == name;
  MG_CHECK(!taken, this->name(), ": the name '", name, "' is already registered");
}

void Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name);
  MG_CHECK(value.defined() && is_floating(value.dtype()), this->name(), ": parameter '", name,
           "' must be a defined floating tensor");
  MG_CHECK(value.is_leaf(), this->name(), ": parameter '", name, "' must be a leaf tensor (detach() it)");
  value.requires_grad_(true);
  parameters_.emplace_back(name, std::move(value));
}

void Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name);
  MG_CHECK(value.defined(), this->name(), ": buffer '", name, "' is undefined");
  buffers_.emplace_back(name, std::move(value));
}

void Module::register_module(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  MG_CHECK(module != nullptr, this->name(), ": child module '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool params, NamedTensors& out) const {
  for (const auto& [n, t] : params ? parameters_ : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", params, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers()) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, c] : children_) out.push_back(c);
  return out;
}

const Tensor& Module::parameter(const std::string& name) const {
  const Tensor* t = find(parameters_, name);
  MG_CHECK(t != nullptr, this->name(), ": no parameter named '", name, "'");
  return *t;
}

const Tensor& Module::buffer(const std::string& name) const {
  const Tensor* t = find(buffers_, name);
  MG_CHECK(t != nullptr, this->name(), ": no buffer named '", name, "'");
  return *t;
}

std::shared_ptr<Module> Module::child(const std::string& child_name) const {
  for (const auto& [n, c] : children_)
    if (n == child_name) return c;
  MG_ERROR(name(), ": no child module named '", child_name, "'");
}

// ---- state ----

void Module::convert_tensors(const std::function<std::optional<Tensor>(const Tensor&)>& convert) {
  NoGradGuard no_grad;
  for (auto& [n, p] : parameters_) {
    std::optional<Tensor> converted = convert(p.detach());
    if (!converted) continue;  // already there (or a tensor shared with a module converted before)
    const Tensor grad = p.grad();
    p.set_data(*converted);
    if (grad.defined()) p.set_grad(convert(grad).value_or(grad));  // PyTorch moves .grad along
  }
  for (auto& [n, b] : buffers_)
    if (std::optional<Tensor> converted = convert(b)) b.set_data(*converted);
  for (auto& [n, c] : children_) c->convert_tensors(convert);
}

void Module::to(const Device& device) {
  convert_tensors([&](const Tensor& t) -> std::optional<Tensor> {
    if (t.device() == device) return std::nullopt;
    return t.to(device);
  });
}

void Module::to(DType dtype) {
  MG_CHECK(is_floating(dtype), name(), ".to: expected a floating dtype, got ", dtype);
  convert_tensors([&](const Tensor& t) -> std::optional<Tensor> {
    if (!is_floating(t.dtype()) || t.dtype() == dtype) return std::nullopt;
    return t.to(dtype);
  });
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

StateDict Module::state_dict() const {
  StateDict out;
  for (const auto& [n, t] : named_parameters()) out.emplace(n, t.detach());
  for (const auto& [n, t] : named_buffers()) out.emplace(n, t.detach());
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  NamedTensors own = named_parameters();
  for (auto& entry : named_buffers()) own.push_back(entry);
  // Everything is checked before anything is copied: a failed load leaves the module as it was.
  std::set<std::string> own_names;
  for (const auto& [key, t] : own) {
    own_names.insert(key);
    auto it = state.find(key);
    if (it == state.end()) {
      MG_CHECK(!strict, "load_state_dict: missing key '", key, "' (the module's has shape ", t.shape(), ")");
      continue;
    }
    MG_CHECK(it->second.defined(), "load_state_dict: the tensor for key '", key, "' is undefined");
    MG_CHECK(it->second.shape() == t.shape(), "load_state_dict: shape mismatch for key '", key,
             "': the state dict has ", it->second.shape(), ", the module ", t.shape());
  }
  if (strict)
    for (const auto& [key, t] : state)
      MG_CHECK(own_names.count(key), "load_state_dict: unexpected key '", key, "' (shape ",
               t.defined() ? t.shape() : Shape{}, ") is not in ", name());
  NoGradGuard no_grad;
  for (const auto& [key, t] : own) {
    auto it = state.find(key);
    if (it != state.end()) copy_(t, it->second);
  }
}

std::shared_ptr<Module> Module::clone() const {
  NoGradGuard no_grad;
  std::shared_ptr<Module> copy = shallow_copy();
  for (auto& [n, p] : copy->parameters_) {
    Tensor fresh = p.detach().clone();
    fresh.requires_grad_(p.requires_grad());
    p = fresh;
  }
  for (auto& [n, b] : copy->buffers_) b = b.detach().clone();
  for (auto& [n, c] : copy->children_) c = c->clone();
  return copy;
}

namespace {
// The module whose default forward (forward_many) is running on this thread. Reaching the same
// default again for the same module means the two forms call each other: the module defines
// neither, or its one form calls the other on itself.
thread_local const Module* t_default_forward = nullptr;
thread_local const Module* t_default_forward_many = nullptr;

struct InDefault {
  const Module*& slot;
  const Module* previous;
  InDefault(const Module*& s, const Module* m) : slot(s), previous(s) { slot = m; }
  ~InDefault() { slot = previous; }
};

void check_not_reentered(const Module* m, const Module* running) {
  MG_CHECK(running != m, m->name(), ": forward and forward_many call each other (override one of them; an override "
           "must not call the other form on its own module)");
}
}  // namespace

Tensor Module::forward(const Tensor& input) {
  check_not_reentered(this, t_default_forward);
  InDefault in_default(t_default_forward, this);
  return forward_many({input});
}

Tensor Module::forward_many(const std::vector<Tensor>& inputs) {
  MG_CHECK(inputs.size() == 1, name(), ": forward takes 1 tensor, got ", inputs.size(),
           " (a module taking several overrides forward_many)");
  check_not_reentered(this, t_default_forward_many);
  InDefault in_default(t_default_forward_many, this);
  return forward(inputs[0]);
}

std::string Module::tree() const {
  std::string out = name();
  for (const auto& [n, c] : children_) {
    std::string child = c->tree();
    for (size_t at = child.find('\n'); at != std::string::npos; at = child.find('\n', at + 1))
      child.insert(at + 1, "  ");  // the child's own lines one level deeper
    out += "\n  (" + n + "): " + child;
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.tree(); }

}  // namespace mg::nn
