// autograd/derivatives.h — helpers for writing an op's forward and backward (internal to
// autograd/; the nn ops use them too).
//
// The pattern every one-output differentiable op follows (differentiable() below):
//   - nothing requires grad: run the forward, build no closure, record nothing;
//   - else run the forward untracked (the ops it is made of do not record), then record one
//     node whose backward gets the output gradient and the saved output.
// A backward captures what it needs by value. It must never capture the output tensor itself
// (the node would own the tensor that owns the node); it gets out.detach() instead (under
// create_graph, live_output's tensor: tape.h), and an undefined tensor when `saves` says it reads
// no output. A backward that needs an input's shape
// but not its values captures shell_of(input) (tape.h), so the input's memory can go.
#pragma once

#include <initializer_list>
#include <utility>

#include "multigrad/autograd/tape.h"
#include "multigrad/core/tensor.h"

namespace mg::detail {

// Runs an op's forward without recording the ops it is made of: the caller records the op as
// one node.
template <class F>
Tensor untracked(F&& forward) {
  NoGradGuard no_grad;
  return std::forward<F>(forward)();
}

// forward() computes the op; make_backward() is called only when the op records and returns
// the backward, a callable (const Tensor& grad, const Tensor& out) -> TensorList with one
// gradient per input (undefined = zero). An output that is one of the inputs (an op that had
// nothing to do) or is not floating is returned unrecorded. `saves`: what the backward reads
// (record() in tape.h); Saves::None for a gradient that does not depend on the values.
// `twice`: under grad mode the backward is made of differentiable ops on the op's inputs, its
// output and the output gradient, so create_graph records through it (tape.h, Higher-order
// gradients).
template <class Forward, class MakeBackward>
Tensor differentiable(const char* name, std::initializer_list<const Tensor*> inputs, Forward&& forward,
                      MakeBackward&& make_backward, Saves saves = Saves::InputsAndOutputs, bool twice = false) {
  if (!any_requires_grad(inputs)) return forward();
  Tensor out = untracked(std::forward<Forward>(forward));
  if (!is_floating(out.dtype())) return out;
  TensorList list;
  list.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    if (out.is_same(*t)) return out;
    list.push_back(*t);
  }
  Tensor saved = reads_outputs(saves) ? out.detach() : Tensor();
  record(name, {out}, list,
         [backward = make_backward(), saved = std::move(saved)](const TensorList& grads) {
           return backward(grads[0], live_output(saved));
         },
         saves, twice);
  return out;
}

// What a backward keeps of input t: t itself when `saves` says it reads the inputs, else its shell.
inline Tensor kept_input(const Tensor& t, Saves saves) { return reads_inputs(saves) ? t : shell_of(t); }

// The gradient of a broadcast: sums `grad` over the dims that broadcasting to grad's shape
// added (leading dims) or expanded (size 1 in `shape`), giving a tensor of `shape`.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace mg::detail
