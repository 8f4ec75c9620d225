// parallel/tensor/layers.cpp — the split layers of layers.h.
#include "multigrad/parallel/tensor/layers.h"

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/core/error.h"
#include "multigrad/parallel/tensor/operators.h"
#include "multigrad/parallel/tensor/state.h"
#include "multigrad/parallel/tensor/vocab.h"

namespace mg::parallel {

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& full, Communicator& comm, int64_t parts,
                                           bool sequence_parallel)
    : comm_(&comm), in_features_(full.weight().size(1)), out_features_(full.weight().size(0)), parts_(parts),
      has_bias_(full.bias().defined()), sequence_parallel_(sequence_parallel) {
  MG_CHECK(parts > 0 && out_features_ % parts == 0, "ColumnParallelLinear: ", out_features_,
           " output features do not make ", parts, " equal parts");
  check_splits(out_features_ / parts, comm, "ColumnParallelLinear", "output");
  register_parameter("weight", shard_of(full.weight(), {0, parts}, comm));
  if (has_bias_) register_parameter("bias", shard_of(full.bias(), {0, parts}, comm));
}

Tensor ColumnParallelLinear::forward(const Tensor& input) {
  const Tensor x = sequence_parallel_ ? gather_from_sequence_parallel(input, *comm_, true)
                                      : copy_to_tensor_parallel(input, *comm_);
  return linear(x, parameter("weight"), has_bias_ ? parameter("bias") : Tensor());
}

std::string ColumnParallelLinear::name() const {
  return detail::str_cat("ColumnParallelLinear(in_features=", in_features_, ", out_features=", out_features_,
                         parts_ > 1 ? detail::str_cat(" in ", parts_, " parts") : "", ", bias=",
                         has_bias_ ? "true" : "false", sequence_parallel_ ? ", sequence parallel" : "", ", rank ",
                         comm_->rank(), " of ", comm_->size(), ")");
}

RowParallelLinear::RowParallelLinear(const nn::Linear& full, Communicator& comm, bool sequence_parallel)
    : comm_(&comm), in_features_(full.weight().size(1)), out_features_(full.weight().size(0)),
      has_bias_(full.bias().defined()), sequence_parallel_(sequence_parallel) {
  check_splits(in_features_, comm, "RowParallelLinear", "input");
  register_parameter("weight", shard_of(full.weight(), {1}, comm));
  if (has_bias_) register_parameter("bias", shard_of(full.bias(), {}, comm));  // whole on every rank
}

Tensor RowParallelLinear::forward(const Tensor& input) {
  const Tensor partial = linear(input, parameter("weight"));
  if (!sequence_parallel_) {
    const Tensor y = reduce_from_tensor_parallel(partial, *comm_);
    return has_bias_ ? add(y, parameter("bias")) : y;
  }
  // This rank's positions: the bias's gradient from them is summed over the ranks.
  const Tensor y = reduce_scatter_to_sequence_parallel(partial, *comm_);
  return has_bias_ ? add(y, copy_to_tensor_parallel(parameter("bias"), *comm_)) : y;
}

std::string RowParallelLinear::name() const {
  return detail::str_cat("RowParallelLinear(in_features=", in_features_, ", out_features=", out_features_,
                         ", bias=", has_bias_ ? "true" : "false", sequence_parallel_ ? ", sequence parallel" : "",
                         ", rank ", comm_->rank(), " of ", comm_->size(), ")");
}

SequenceParallelLayerNorm::SequenceParallelLayerNorm(const nn::LayerNorm& full, Communicator& comm, bool gather_output)
    : comm_(&comm), normalized_shape_(full.normalized_shape()), eps_(full.eps()), gather_output_(gather_output) {
  MG_CHECK(full.elementwise_affine(), "SequenceParallelLayerNorm: expected a LayerNorm with a weight and a bias");
  register_parameter("weight", full.parameter("weight"));  // the same tensors: shared with `full`
  register_parameter("bias", full.parameter("bias"));
}

Tensor SequenceParallelLayerNorm::forward(const Tensor& input) {
  const Tensor y = layer_norm(input, normalized_shape_, copy_to_tensor_parallel(parameter("weight"), *comm_),
                              copy_to_tensor_parallel(parameter("bias"), *comm_), eps_);
  return gather_output_ ? gather_from_sequence_parallel(y, *comm_, false) : y;
}

std::string SequenceParallelLayerNorm::name() const {
  return detail::str_cat("SequenceParallelLayerNorm(", normalized_shape_, ", eps=", eps_,
                         gather_output_ ? ", gathered output" : "", ", rank ", comm_->rank(), " of ", comm_->size(),
                         ")");
}

namespace {

// dropout(input, p, training) as applied to the whole (B, T, *) of which input is this rank's
// positions (B, T/N, *).
Tensor dropout_on_positions(const Tensor& input, double p, bool training, const Communicator& comm) {
  MG_CHECK(input.dim() >= 2, "sequence-parallel dropout: expected a rank's positions (B, T/N, ...), got ",
           input.shape());
  const int64_t here = input.size(1);
  return dropout(input, p, training, DrawSlice{1, comm.rank() * here, comm.size() * here});
}

}  // namespace

SequenceParallelDropout::SequenceParallelDropout(const nn::Dropout& full, Communicator& comm)
    : comm_(&comm), p_(full.p()) {
  train(full.is_training());
}

Tensor SequenceParallelDropout::forward(const Tensor& input) {
  return dropout_on_positions(input, p_, is_training(), *comm_);
}

std::string SequenceParallelDropout::name() const {
  return detail::str_cat("SequenceParallelDropout(p=", p_, ", rank ", comm_->rank(), " of ", comm_->size(), ")");
}

SequenceParallelEmbedding::SequenceParallelEmbedding(const nn::GPTEmbedding& full, Communicator& comm)
    : comm_(&comm) {
  for (const auto& [name, child] : full.named_children()) register_module(name, child);
}

Tensor SequenceParallelEmbedding::forward(const Tensor& indices) {
  const auto wpe = child<nn::Embedding>("wpe");
  if (const auto vocab = std::dynamic_pointer_cast<VocabParallelEmbedding>(child("wte"))) {
    MG_CHECK(indices.dim() == 2 && indices.size(1) <= wpe->weight().size(0), name(), ": expected Int64 token ids ",
             "(B, T) with T at most the context of ", wpe->weight().size(0), ", got ", indices.shape());
    const Tensor tokens = reduce_scatter_to_sequence_parallel(vocab->partial(indices), *comm_);  // (B, T/N, C)
    const int64_t here = tokens.size(1), first = comm_->rank() * here;
    const Tensor positions = arange(double(first), double(first + here), 1, {DType::Int64, indices.device()});
    const auto drop = child<nn::Dropout>("drop");
    return dropout_on_positions(add(tokens, embedding(copy_to_tensor_parallel(wpe->weight(), *comm_), positions)),
                                drop->p(), drop->is_training(), *comm_);
  }
  // GPTEmbedding's forward over this module's children (a GPTEmbedding made of them costs three
  // pointers; the children keep their own training mode), then this rank's positions.
  nn::GPTEmbedding whole(child("wte"), wpe, child<nn::Dropout>("drop"));
  return scatter_to_sequence_parallel(whole.forward(indices), *comm_);
}

std::string SequenceParallelEmbedding::name() const {
  return detail::str_cat("SequenceParallelEmbedding(rank ", comm_->rank(), " of ", comm_->size(), ")");
}

}  // namespace mg::parallel
