// parallel/tensor/layers.h — the split layers: column- and row-parallel linear layers, and sequence
// parallelism's layer norm, dropout and GPT embedding (tensor_parallel.h has the design note).
#pragma once

#include <string>

#include "multigrad/nn/gpt.h"
#include "multigrad/nn/layers.h"
#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

// This rank's out/N features of `full` (out divisible by the ranks): of each of `parts` equal
// blocks of the features, its 1/N (parts 1: features [r out/N, (r+1) out/N)).
// sequence_parallel: the input is this rank's positions (B, T/N, in), all-gathered first.
class ColumnParallelLinear : public nn::Cloneable<ColumnParallelLinear> {
 public:
  ColumnParallelLinear(const nn::Linear& full, Communicator& comm, int64_t parts = 1, bool sequence_parallel = false);
  Tensor forward(const Tensor& input) override;  // (*, in) -> (*, out / N)
  std::string name() const override;
  int64_t parts() const { return parts_; }

 private:
  Communicator* comm_;
  int64_t in_features_, out_features_, parts_;
  bool has_bias_, sequence_parallel_;
};

// `full` with this rank's in/N input features (in divisible by the ranks): the input is the
// matching shard of the features (a ColumnParallelLinear's output); the output is whole, or with
// sequence_parallel this rank's positions (B, T/N, out) of it.
class RowParallelLinear : public nn::Cloneable<RowParallelLinear> {
 public:
  RowParallelLinear(const nn::Linear& full, Communicator& comm, bool sequence_parallel = false);
  Tensor forward(const Tensor& input) override;  // (*, in / N) -> (*, out)
  std::string name() const override;

 private:
  Communicator* comm_;
  int64_t in_features_, out_features_;
  bool has_bias_, sequence_parallel_;
};

// Sequence parallelism's layer norm: `full`'s weight and bias (the same tensors, whole on every
// rank) over this rank's positions (B, T/N, C), through f (their gradients summed over the
// ranks); gather_output: the result all-gathered to (B, T, C) for layers that run whole.
class SequenceParallelLayerNorm : public nn::Cloneable<SequenceParallelLayerNorm> {
 public:
  SequenceParallelLayerNorm(const nn::LayerNorm& full, Communicator& comm, bool gather_output);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  Communicator* comm_;
  Shape normalized_shape_;
  double eps_;
  bool gather_output_;
};

// Sequence parallelism's dropout: `full`'s probability and training mode on this rank's positions
// (B, T/N, *) of the whole (B, T, *): its mask is those positions' of the mask `full` would draw
// for the whole, and every rank's generator advances as for the whole (autograd/nn_ops.h's
// dropout of a DrawSlice), so the ranks together apply one device's mask.
class SequenceParallelDropout : public nn::Cloneable<SequenceParallelDropout> {
 public:
  SequenceParallelDropout(const nn::Dropout& full, Communicator& comm);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  Communicator* comm_;
  double p_;
};

// Sequence parallelism's GPT input layer: nn::GPTEmbedding over the same wte, wpe and drop (its
// children, by their names), whole on every rank, then this rank's positions (B, T/N, C). With a
// VocabParallelEmbedding for wte, its partial rows are reduce-scattered to the rank's positions
// instead (half an all-reduce's bytes), the rank's positions' rows of wpe pass through f, and
// drop applies to the rank's positions as SequenceParallelDropout does.
class SequenceParallelEmbedding : public nn::Cloneable<SequenceParallelEmbedding> {
 public:
  SequenceParallelEmbedding(const nn::GPTEmbedding& full, Communicator& comm);
  Tensor forward(const Tensor& indices) override;  // (B, T) Int64 -> (B, T/N, C)
  std::string name() const override;

 private:
  Communicator* comm_;
};

}  // namespace mg::parallel
