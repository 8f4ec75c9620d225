// autograd/gradcheck.h — gradcheck and gradgradcheck: the tape's first and second derivatives
// held against float64 central differences, as torch.autograd's are.
#pragma once

#include <functional>

#include "multigrad/autograd/tape.h"
#include "multigrad/core/tensor.h"

namespace mg {

// Compares the gradients of sum(fn(inputs) * w) (w fixed pseudo-random weights) from backward()
// with float64 central differences, for every element of every input that requires grad.
// Inputs must be Float64 leaves. fn gets the inputs themselves, perturbed in place one element at
// a time (and restored), so it may also read them another way: a module's parameters given as
// inputs while fn calls the module's forward (PyTorch's idiom) are checked. The inputs' own
// gradients are left as they were. Refuses, naming it, an input that requires grad but does not
// reach fn's output (never read), and an output that reaches a tensor requiring grad that is not
// an input (its derivative would go unchecked). Returns true, or throws naming the input, the
// element and both values.
struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};
bool gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
               const GradcheckOptions& options = {});
// The second derivatives, as torch.autograd.gradgradcheck: gradcheck of the scalar
// sum_i <u_i, d sum(fn(inputs) * w) / d input_i> (u_i, w fixed pseudo-random weights), whose
// gradient the tape can only give through create_graph. Same inputs and refusals as gradcheck;
// an op on the way that is not twice differentiable is an error naming it.
bool gradgradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                   const GradcheckOptions& options = {});

}  // namespace mg
