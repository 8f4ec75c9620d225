// autograd/gradcheck.cpp — gradcheck and gradgradcheck (gradcheck.h): analytic first and second
// derivatives from the tape against float64 central differences.
#include "multigrad/autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"

namespace mg {

namespace {

// Fixed pseudo-random weights in [0.5, 1.5), Float64: every element matters, each with its own
// scale. `seed` picks the sequence.
Tensor fixed_weights(const Shape& shape, const Device& device, uint64_t seed) {
  std::vector<double> w(size_t(numel_of(shape)));
  uint64_t state = seed;
  for (double& v : w) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    v = 0.5 + double(state >> 11) / double(1ull << 53);
  }
  return tensor(w, shape, {.dtype = DType::Float64, .device = device});
}

constexpr uint64_t kOutputSeed = 88172645463325252ull;

// Saves the inputs' gradients, clears them for gradcheck's own backward, and puts them back.
class SavedGrads {
 public:
  explicit SavedGrads(const TensorList& inputs) : inputs_(inputs) {
    for (const Tensor& t : inputs_) {
      grads_.push_back(t.grad());
      t.set_grad(Tensor());
    }
  }
  ~SavedGrads() {
    for (size_t i = 0; i < inputs_.size(); ++i) inputs_[i].set_grad(grads_[i]);
  }
  SavedGrads(const SavedGrads&) = delete;
  SavedGrads& operator=(const SavedGrads&) = delete;

 private:
  const TensorList& inputs_;
  TensorList grads_;
};

// gradcheck's work. `every_input_read`: refuse an input that requires grad but does not reach
// the output (gradgradcheck allows it: a second derivative may be 0 by the first's form).
bool check_derivatives(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                       const GradcheckOptions& options, bool every_input_read) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    MG_CHECK(inputs[i].defined() && inputs[i].dtype() == DType::Float64, "gradcheck: input ", i,
             " has dtype ", inputs[i].defined() ? inputs[i].dtype() : DType::Float64,
             "; gradcheck needs Float64 inputs");
    MG_CHECK(!inputs[i].requires_grad() || inputs[i].is_leaf(), "gradcheck: input ", i, " (shape ",
             inputs[i].shape(), ") was produced by an op; pass leaves (detach() it and set requires_grad)");
  }
  // fn gets the inputs themselves, not copies, so a function that also reaches them another way
  // (a module's forward reading its own parameters) is checked through that way too.
  const SavedGrads saved(inputs);
  Tensor out = fn(inputs);
  MG_CHECK(is_floating(out.dtype()), "gradcheck: fn returned dtype ", out.dtype(), "; expected floating");

  // Every input that requires grad must reach the output, and nothing else that does: an input fn
  // never reads would pass with zero on both sides, and an unchecked leaf's derivative would go
  // unchecked while the call reports success.
  const std::vector<Tensor> reached = out.requires_grad() ? reachable_leaves({out}) : std::vector<Tensor>{};
  auto is_reached = [&](const Tensor& t) {
    return std::any_of(reached.begin(), reached.end(), [&](const Tensor& r) { return r.is_same(t); });
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    MG_CHECK(!every_input_read || !inputs[i].requires_grad() || is_reached(inputs[i]), "gradcheck: input ", i, " (shape ",
             inputs[i].shape(), ") requires grad, but fn's output does not depend on it: fn never reads it "
             "(a function that reads other tensors, as a module's forward reads its parameters, must be given "
             "those tensors themselves)");
  for (const Tensor& r : reached)
    MG_CHECK(std::any_of(inputs.begin(), inputs.end(), [&](const Tensor& t) { return t.is_same(r); }),
             "gradcheck: fn's output depends on a tensor that requires grad but is not among the inputs (shape ",
             r.shape(), ", dtype ", r.dtype(), "): its gradient would go unchecked; pass it as an input, or "
             "set requires_grad_(false) on it");

  const Tensor weights = fixed_weights(out.shape(), out.device(), kOutputSeed);
  auto objective = [&](const Tensor& y) { return sum(mul(to(y, DType::Float64), weights)); };

  if (out.requires_grad()) backward({objective(out)});
  std::vector<std::vector<double>> analytic;
  for (const Tensor& t : inputs) {
    const Tensor grad = t.grad();
    analytic.push_back(grad.defined() ? grad.to_vector<double>() : std::vector<double>(size_t(t.numel()), 0.0));
  }

  // Central differences, each element of an input perturbed in place and put back.
  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    const Tensor original = clone(inputs[i]);
    std::vector<double> x = inputs[i].to_vector<double>();
    auto value_at = [&](size_t k, double delta) {
      const double saved_x = x[k];
      x[k] = saved_x + delta;
      copy_(inputs[i], tensor(x, inputs[i].shape(), {.dtype = DType::Float64, .device = inputs[i].device()}));
      x[k] = saved_x;
      return objective(fn(inputs)).item<double>();
    };
    for (size_t k = 0; k < x.size(); ++k) {
      const double numeric = (value_at(k, options.eps) - value_at(k, -options.eps)) / (2 * options.eps);
      if (!(std::abs(analytic[i][k] - numeric) <= options.atol + options.rtol * std::abs(numeric))) {
        copy_(inputs[i], original);
        MG_ERROR("gradcheck: input ", i, ", element ", k, " (row-major): analytic gradient ", analytic[i][k],
                 " but numeric ", numeric, " (atol ", options.atol, ", rtol ", options.rtol, ")");
      }
    }
    copy_(inputs[i], original);
  }
  return true;
}

}  // namespace

bool gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
               const GradcheckOptions& options) {
  return check_derivatives(fn, inputs, options, true);
}

bool gradgradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                   const GradcheckOptions& options) {
  TensorList wrt;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) wrt.push_back(t);
  MG_CHECK(!wrt.empty(), "gradgradcheck: no input requires grad");
  // The first derivatives, recorded (create_graph), folded into one scalar with fixed weights.
  // gradcheck evaluates it under NoGradGuard for its differences: recording is switched back on.
  const auto first_derivatives = [&](const TensorList& in) -> Tensor {
    EnableGradGuard recording;
    const Tensor out = fn(in);
    MG_CHECK(out.requires_grad(), "gradgradcheck: fn's output does not depend on an input that requires grad");
    const Tensor y = sum(mul(to(out, DType::Float64), fixed_weights(out.shape(), out.device(), kOutputSeed)));
    const TensorList grads = grad({y}, {}, wrt, true, true);
    Tensor total = zeros({}, {.dtype = DType::Float64, .device = out.device()});
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined())
        total = add(total, sum(mul(grads[i], fixed_weights(grads[i].shape(), grads[i].device(), kOutputSeed + i + 1))));
    return total;
  };
  return check_derivatives(first_derivatives, inputs, options, false);
}

}  // namespace mg
