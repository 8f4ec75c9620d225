// parallel/tensor_parallel.h — Megatron-LM's tensor parallelism (Shoeybi et al., "Megatron-LM:
// Training Multi-Billion Parameter Language Models Using Model Parallelism", 2019) over a
// Communicator whose ranks form one tensor-parallel group: every rank sees the same batch and
// holds 1/N of each split layer.
//
// A pair of linear layers with an elementwise activation between them, Y = act(X A^T) B^T, splits
// with one all-reduce in forward and one in backward:
//   - ColumnParallelLinear holds rows [r out/N, (r+1) out/N) of A (and of its bias): rank r
//     computes its out/N features of act(X A^T) with no communication (the activation is
//     elementwise, so it applies to the shard);
//   - RowParallelLinear holds the matching columns of B: rank r computes the partial product of
//     its features, and the all-reduce sums the N partials into Y (then adds the bias, whole on
//     every rank).
// Their conjugate operators carry the gradients: copy_to_tensor_parallel (f) is the identity in
// forward and all-reduces the input's gradient in backward (each rank's shard of A contributes a
// part of dX); reduce_from_tensor_parallel (g) all-reduces in forward and is the identity in
// backward (every rank needs the whole dY).
//
// What differs from one device. A column shard's products are the same sums as the whole
// layer's; the row-parallel sum Y = sum_r Z_r B_r^T and the column-parallel dX = sum_r dZ_r A_r
// are cut at the shard boundaries and summed across ranks (in rank order with
// mg::set_deterministic), where one device sums the whole inner dimension in its GEMM's order. So
// the results are not bit-identical to one device: each such sum differs by its float32 rounding,
// at most 2 (K - 1) u sum |terms| per element (u = 2^-24, K the inner dimension: both orders are
// within (K - 1) u sum |terms| of the exact sum), and the differences propagate through the
// layers. tests/parallel/test_tensor_parallel.cpp bounds them so, layer by layer. The BLAS kernel
// may also sum a shard's columns in another order than the whole layer's (its blocking can
// depend on the matrix's shape): the same bound covers it.
//
// A GPT (tensor_parallel_gpt): each block's attention is split by heads — c_attn column-parallel
// with its q, k and v each cut (rank r computes heads [r H/N, (r+1) H/N) whole, the causal softmax
// included, with no communication), c_proj row-parallel — and its MLP as the pair above: two
// all-reduces per block in forward, two in backward. The embeddings, the layer norms and the tied
// head stay whole on every rank; their gradients come out equal on every rank (what reaches them
// has been all-reduced), so they need no communication of their own. Or (vocab_parallel) the token
// embedding is a VocabParallelEmbedding and the head, tied to it, gives this rank's columns of the
// logits (VocabParallelHead): one all-reduce more in forward (the embedding's g) and one in
// backward (the head's f), and no rank holds the (B, T, V) logits.
//
// Sequence parallelism (Korthikanti et al. 2022, Megatron-LM's --sequence-parallel;
// tensor_parallel_gpt's option). Between a block's split layers the activations (B, T, C) are
// whole on every rank above, and the layer norms, dropouts and residual adds there repeat the same
// work on every rank and keep N copies of it. With sequence parallelism rank r keeps only its
// positions [r T/N, (r+1) T/N) there: the column-parallel layer's f becomes an all-gather of the
// positions (backward: a reduce-scatter, summing the ranks' partial input gradients), the
// row-parallel layer's g a reduce-scatter (backward: an all-gather) — the same bytes as the
// all-reduce they replace, which is a reduce-scatter and an all-gather. The layer norms run on
// the rank's positions; their weight and bias, whole on every rank, enter through f, so their
// gradients (each rank's from its positions) are summed over the ranks, as are the row-parallel
// bias's. A GPT's embeddings run whole and each rank takes its positions; ln_f's output is
// all-gathered for the whole tied head (backward: each rank keeps its positions' gradient). Not
// bit-identical to plain tensor parallelism either: a layer norm's weight gradient is summed over
// each rank's positions and then over the ranks, not over all the positions in one sum.
//
// Building. The split layers are made from a whole nn::Linear (each rank takes its part of the
// same initial weights, as from one seed), so a tensor-parallel model starts as the one-device
// model does; tensor_parallel_mlp converts an nn::mlp (or nn::fashion_cnn's classifier),
// tensor_parallel_gpt an nn::GPT. The
// communicator must outlive the layers.
#pragma once

#include <memory>
#include <vector>

#include "multigrad/nn/gpt.h"
#include "multigrad/nn/layers.h"
#include "multigrad/optim/optimizer.h"
#include "multigrad/parallel/communicator.h"

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

// How a parameter of a tensor-parallel module is cut among the ranks: along `dim` (-1: whole on
// every rank), in `parts` equal blocks each split among the ranks (parts 3 for a fused q, k, v
// projection: rank r holds the r-th slice of each of q, k and v).
struct TensorParallelSplit {
  int dim = -1;
  int64_t parts = 1;
};

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

// An nn::mlp (Linear, activation, Linear, ... ) with each pair of Linear layers split as above
// (column, then row); a last odd Linear stays whole on every rank (replicated), and so do the
// layers that are not Linear: nn::fashion_cnn's convolutions, batch norms and pools, computed on
// the whole batch by every rank (their gradients come out whole: the column-parallel layer's
// input gradient is summed over the ranks).
std::shared_ptr<nn::Sequential> tensor_parallel_mlp(const nn::Sequential& mlp, Communicator& comm);
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

}  // namespace mg::parallel
