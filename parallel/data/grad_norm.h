// parallel/data/grad_norm.h — what gradients spread over the ranks of a communicator, each rank holding
// a disjoint part of them (ZeRO's shards, a pipeline's stages, tensor-parallel shards), say
// together: their global L2 norm, and whether any rank's part overflowed.
#pragma once

#include "multigrad/optim/clip_grad.h"
#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

// sqrt of the sum of every rank's `mine`: their words (optim::SquareSum) all-reduced, an integer
// sum and so exact in any order. Equal, bit for bit, to clip_grad_norm's total over all the
// gradients on one device, however they are cut among the ranks. Collective.
double global_grad_norm(Communicator& comm, const optim::SquareSum& mine);

// Whether `mine` holds on any rank (an all-reduce of a flag): optim::GradScaler::step's any_rank,
// so that ranks whose gradients differ skip a step together. Collective.
bool any_rank(Communicator& comm, bool mine);

}  // namespace mg::parallel
