// parallel/tensor/state.h — how each parameter of a tensor-parallel model is cut among the ranks, and
// the gather and shard of model and optimizer state that checkpoints need (tensor_parallel.h has
// the design note).
#pragma once

#include <cstdint>
#include <vector>

#include "multigrad/nn/module.h"
#include "multigrad/optim/optimizer.h"
#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

// How a parameter of a tensor-parallel module is cut among the ranks: along `dim` (-1: whole on
// every rank), in `parts` equal blocks each split among the ranks (parts 3 for a fused q, k, v
// projection: rank r holds the r-th slice of each of q, k and v).
struct TensorParallelSplit {
  int dim = -1;
  int64_t parts = 1;
};

// Per parameter of a tensor-parallel module (parameters() order, recursively), how it is cut:
// ColumnParallelLinear's weight and bias along 0 (in its parts), RowParallelLinear's weight along
// 1, VocabParallelEmbedding's weight along 0; every other parameter whole.
std::vector<TensorParallelSplit> tensor_parallel_splits(const nn::Module& tp);
// The whole tensor this rank holds the shard of (collective: all-gathered); dim -1: shard itself.
Tensor gather_shards(const Tensor& shard, TensorParallelSplit split, Communicator& comm);
// This rank's shard of a whole tensor, as a new tensor; dim -1: a copy.
Tensor shard_of(const Tensor& whole, TensorParallelSplit split, const Communicator& comm);

// Checkpoints. The model state of the one-device model the ranks' shards make up, under its names
// (collective), and the reverse: a one-device model's state loaded into this rank's shards. The
// same for an optimizer's state, keyed "<parameter index>.<name>" with the index into
// `optimizer_params` (Optimizer::params(): its groups' order, which need not be tp's): a tensor
// shaped as its parameter's shard is gathered or cut as the parameter, any other (Adam's step
// count) kept.
nn::StateDict gather_tensor_parallel_state(const nn::Module& tp, Communicator& comm);
void load_tensor_parallel_state(nn::Module& tp, const nn::StateDict& whole, const Communicator& comm);
optim::OptimizerState gather_tensor_parallel_state(const nn::Module& tp, const std::vector<Tensor>& optimizer_params,
                                                   const optim::OptimizerState& mine, Communicator& comm);
optim::OptimizerState shard_tensor_parallel_state(const nn::Module& tp, const std::vector<Tensor>& optimizer_params,
                                                  const optim::OptimizerState& whole, const Communicator& comm);

// Throws unless `features` split evenly among the ranks, naming the layer and which features.
void check_splits(int64_t features, const Communicator& comm, const char* layer, const char* which);

}  // namespace mg::parallel
