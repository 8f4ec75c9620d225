// autograd/checkpoint.h — activation recomputation (torch.utils.checkpoint, reentrant form).
//
// checkpoint(fn, x, params) returns fn(x) but records one node in place of fn's graph: fn runs
// without a tape, so none of its activations are kept, only x. The node's backward runs fn(x)
// again with recording on, on a tape of its own, and takes the gradients of x and of `params`
// (the leaves fn uses: a module's parameters) from that graph with grad(); the outer walk then
// treats them as it treats any op's input gradients. Memory: a model whose blocks are
// checkpointed keeps the blocks' inputs through the forward, and one block's activations at a
// time in backward, for one more forward of every block.
//
// Bit-identical to running fn directly: the recomputation repeats the same kernels on the same
// values, its random draws (dropout) replay those of the first run (core/random.h's
// RngRecorder/RngReplay), and each gradient is summed inside the node in the order the plain
// walk sums it, so a leaf's gradient arrives as one sum and the walk adds it as it would have.
// Preconditions, as PyTorch's: fn computes the same thing twice (no state that changes between
// forward and backward, the same training mode) and uses no leaf that requires grad besides x
// and `params` (another's gradient would be lost: it is reached only through the recomputation).
#pragma once

#include <functional>

#include "multigrad/autograd/tape.h"

namespace mg {

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, const TensorList& params);

}  // namespace mg
