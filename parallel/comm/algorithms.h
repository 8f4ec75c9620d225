// parallel/comm/algorithms.h — the all-reduce algorithms, the first thing to read about
// collectives: the ring (why all-reduce costs 2 (n - 1) / n of the tensor per rank, whatever n
// is) and the rank-ordered sum (why a deterministic all-reduce gives one device's bits).
//
// They are written over the smallest view of a group that shows them: every rank publishes the
// tensor of the current collective, reads its peers' (a copy onto its own device: a "receive"),
// and meets the others at a barrier. The local backend (local.cpp) runs them with threads and
// shared memory; NCCL runs its own ring on the GPU, and the nccl and mpi backends' deterministic
// mode folds all-gathered rows in the rank order rank_ordered_all_reduce uses
// (backend_common.h's fold_in_rank_order), so every backend gives these bits.
#pragma once

#include <functional>

#include "multigrad/core/tensor.h"
#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel::algorithms {

// What an algorithm sees of its group from one rank.
struct Ranks {
  int rank = 0;
  int size = 1;
  // Rank k's published tensor of this collective (a flat tensor of the same numel on every rank),
  // to be read only, never written.
  std::function<const Tensor&(int k)> published;
  // Returns once every rank has called it as often: what a rank wrote before it is then visible.
  std::function<void()> meet;
};

// dst = src, whether or not they share a device.
void transfer(const Tensor& src, const Tensor& dst);

// Ring all-reduce of the flat tensor `flat`, this rank's published one, in place. The tensor is
// cut into n chunks; chunk i is [i N / n, (i+1) N / n). Each rank talks only to its ring
// neighbours: it receives from rank r - 1 (and rank r + 1 receives from it).
//   reduce-scatter, steps s = 0 .. n-2: rank r sends chunk (r - s) mod n to rank r + 1, which
//     adds it into its own copy. After n - 1 steps rank r holds chunk (r + 1) mod n fully reduced.
//   all-gather, steps s = 0 .. n-2: rank r sends chunk (r + 1 - s) mod n, which is complete, to
//     rank r + 1, which overwrites its copy. After n - 1 steps every rank has every chunk.
// "Send" is the receiver reading the sender's published tensor; the meeting after each step is
// what makes the sender's chunk from the previous step visible. Within a step a rank writes chunk
// c while its successor reads its chunk c + 1, so reads never race writes. Each rank moves
// 2 (n - 1) / n of the tensor, whatever n is: why rings scale. The sums' order depends on the
// rank, so the ranks' results may differ in their last bits from one device's.
void ring_all_reduce(const Tensor& flat, ReduceOp op, const Ranks& ranks);

// Deterministic all-reduce: every rank computes t_0 + t_1 + ... + t_{n-1} itself, in that order,
// so every rank's result is bit-identical to accumulating on one device. n - 1 reads per rank of
// the whole tensor: slower than the ring for large n, which is the price.
void rank_ordered_all_reduce(const Tensor& flat, ReduceOp op, const Ranks& ranks);

}  // namespace mg::parallel::algorithms
