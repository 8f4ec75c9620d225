// parallel/tensor/plans.h — the plans: which layers of an MLP and of a GPT are split, and how, built from
// the one-device model's own layers (tensor_parallel.h has the design note).
#pragma once

#include <memory>

#include "multigrad/nn/gpt.h"
#include "multigrad/nn/layers.h"
#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

// An nn::mlp (Linear, activation, Linear, ... ) with each pair of Linear layers split as above
// (column, then row); a last odd Linear stays whole on every rank (replicated), and so do the
// layers that are not Linear: nn::fashion_cnn's convolutions, batch norms and pools, computed on
// the whole batch by every rank (their gradients come out whole: the column-parallel layer's
// input gradient is summed over the ranks).
std::shared_ptr<nn::Sequential> tensor_parallel_mlp(const nn::Sequential& mlp, Communicator& comm);
struct TensorParallelOptions {
  // The layer norms, residual adds and the embeddings' output on sequence shards (the header).
  bool sequence_parallel = false;
  // The token embedding and the tied head split by the vocabulary (VocabParallelEmbedding,
  // VocabParallelHead): the model's output is this rank's columns of the logits.
  bool vocab_parallel = false;
};

// gpt.layers() (nn::GPT::layers: the embeddings, the blocks, ln_f, the tied head) with every
// block's attention split by heads and its MLP by features (the header); the other layers are
// gpt's own modules, shared. n_head and 4 n_embd must divide among the ranks. sequence_parallel:
// the same parameters under the same names, the residual branches' dropouts on the ranks'
// positions (SequenceParallelDropout); the sequences' length must divide among the ranks.
// vocab_parallel: the vocabulary must divide among the ranks.
std::shared_ptr<nn::Sequential> tensor_parallel_gpt(const nn::GPT& gpt, Communicator& comm,
                                                    TensorParallelOptions options = {});

}  // namespace mg::parallel
