// parallel/tensor/vocab.h — vocabulary parallelism: the token embedding and the tied head split by the
// vocabulary, and the loss and argmax computed from the ranks' columns of the logits, never
// gathered (tensor_parallel.h has the design note).
#pragma once

#include <memory>
#include <string>

#include "multigrad/nn/layers.h"
#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

// Rows [r V/N, (r+1) V/N) of `full`'s table (V divisible by the ranks; Megatron's
// VocabParallelEmbedding): ids outside them give zero rows here, and g's all-reduce sums the ranks'
// rows into every id's embedding, whole on every rank. Its weight's gradient is this rank's rows'.
class VocabParallelEmbedding : public nn::Cloneable<VocabParallelEmbedding> {
 public:
  VocabParallelEmbedding(const nn::Embedding& full, Communicator& comm);
  Tensor forward(const Tensor& indices) override;  // Int64 (*) in [0, V) -> (*, D)
  std::string name() const override;
  // forward before g's all-reduce: this rank's rows, zero for the ids the others hold.
  Tensor partial(const Tensor& indices);

 private:
  Communicator* comm_;
  int64_t num_embeddings_, embedding_dim_;
};

// cross_entropy over logits split along the vocabulary (Megatron's vocab-parallel cross-entropy):
// `logits` (N, V/N) are this rank's columns [r V/N, (r+1) V/N) of (N, V), `targets` (N) Int64 in
// [0, V). The mean over n of log sum_v exp(logits[n, v]) - logits[n, targets[n]], from three
// all-reduces of (N) vectors — the row maxima (max), the sums of exponentials (g: sum) and the
// target's logit (g: sum, from the rank that holds it) — never the (N, V) logits. Backward: this
// rank's (softmax - one-hot) / N, from the same composition. Collective; the same loss on every rank.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, Communicator& comm);

// The GPT's tied head over a VocabParallelEmbedding: this rank's columns [r V/N, (r+1) V/N) of
// the logits, (*, C) -> (*, V/N), its input through f (the ranks' input gradients summed). Its
// logits go to vocab_parallel_cross_entropy and vocab_parallel_argmax, never gathered.
class VocabParallelHead : public nn::TiedLinear {
 public:
  VocabParallelHead(std::shared_ptr<VocabParallelEmbedding> embedding, Communicator& comm);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  std::shared_ptr<Module> shallow_copy() const override { return std::make_shared<VocabParallelHead>(*this); }
  Communicator* comm_;
};

// The index of each row's largest logit over the whole vocabulary, from this rank's columns
// (*, V/N) of it: (*) Int64, the lowest index among equal largest values (argmax's). Two
// all-reduces of (*) values. Collective.
Tensor vocab_parallel_argmax(const Tensor& logits, Communicator& comm);

}  // namespace mg::parallel
