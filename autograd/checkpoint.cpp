// autograd/checkpoint.cpp — activation recomputation (see checkpoint.h).
#include "multigrad/autograd/checkpoint.h"

#include <memory>
#include <vector>

#include "multigrad/autograd/autocast.h"
#include "multigrad/core/random.h"

namespace mg {

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, const TensorList& params) {
  TensorList inputs{input};
  inputs.insert(inputs.end(), params.begin(), params.end());
  bool needs_grad = false;
  for (const Tensor& t : inputs) needs_grad = needs_grad || any_requires_grad({&t});
  if (!needs_grad) return fn(input);

  auto draws = std::make_shared<std::vector<PhiloxDraw>>();
  const Precision precision = autocast_precision();  // the recomputation rounds as the forward did
  Tensor output;
  {
    NoGradGuard no_grad;
    RngRecorder recording(*draws);
    output = fn(input);
  }
  record("checkpoint", {output}, inputs, [fn, inputs, draws, precision](const TensorList& grads) {
    // The leaves to differentiate: x as a fresh leaf over the same memory (the outer graph
    // continues from the real x), and the parameters themselves.
    TensorList wrt = inputs;
    wrt[0] = inputs[0].detach();
    if (inputs[0].requires_grad()) wrt[0].requires_grad_(true);
    Tape tape;
    TapeScope on_own_tape(tape);
    Tensor recomputed;
    {
      EnableGradGuard recording;
      AutocastGuard autocast(precision);
      RngReplay replay(*draws);
      recomputed = fn(wrt[0]);
    }
    TensorList asked, found(inputs.size());
    std::vector<size_t> where;
    for (size_t i = 0; i < wrt.size(); ++i) {
      if (!wrt[i].requires_grad()) continue;
      asked.push_back(wrt[i]);
      where.push_back(i);
    }
    if (!recomputed.requires_grad()) return found;  // nothing fn did depends on them
    const TensorList gradients = grad({recomputed}, {grads[0]}, asked);
    for (size_t k = 0; k < where.size(); ++k) found[where[k]] = gradients[k];
    return found;
  });
  return output;
}

}  // namespace mg
