// parallel/tensor/operators.h — the conjugate operators f and g of Megatron's split layers, and sequence
// parallelism's scatter, gather and reduce-scatter of positions, each with its backward
// (tensor_parallel.h has the design note).
#pragma once

#include "multigrad/core/tensor.h"
#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

// f: the identity in forward; in backward, the gradient summed over the ranks.
Tensor copy_to_tensor_parallel(const Tensor& input, Communicator& comm);
// g: the input summed over the ranks in forward; the identity in backward.
Tensor reduce_from_tensor_parallel(const Tensor& input, Communicator& comm);

// Sequence parallelism's operators on (B, T, *) activations, rank r's positions [r T/N, (r+1) T/N)
// (T divisible by the ranks; an error names T and the ranks otherwise):
// (B, T, *), the same on every rank -> this rank's (B, T/N, *); backward: the ranks' gradients
// all-gathered into (B, T, *).
Tensor scatter_to_sequence_parallel(const Tensor& input, Communicator& comm);
// (B, T/N, *) -> (B, T, *), every rank's positions in rank order; backward: with
// reduce_scatter_backward the ranks' (B, T, *) gradients summed and each rank's positions kept
// (before a column-parallel layer, whose ranks each give a partial input gradient), else this
// rank's positions of its gradient (before layers run whole on every rank, whose gradients agree).
Tensor gather_from_sequence_parallel(const Tensor& input, Communicator& comm, bool reduce_scatter_backward);
// (B, T, *) partial sums -> this rank's positions (B, T/N, *) summed over the ranks; backward: the
// gradients all-gathered.
Tensor reduce_scatter_to_sequence_parallel(const Tensor& input, Communicator& comm);

}  // namespace mg::parallel
