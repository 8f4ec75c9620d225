// parallel/tensor_parallel.cpp — Megatron-LM's split linear layers and their conjugate operators
// (parallel/tensor_parallel.h).
#include "multigrad/parallel/tensor_parallel.h"

#include <algorithm>
#include <functional>
#include <string>

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"

namespace mg::parallel {
namespace {

// The sum of t over the ranks, in a new tensor.
Tensor summed(const Tensor& t, Communicator& comm) {
  Tensor out = t.clone();
  comm.all_reduce(out)->wait();
  return out;
}

void check_splits(int64_t features, const Communicator& comm, const char* layer, const char* which) {
  MG_CHECK(features % comm.size() == 0, layer, ": ", features, " ", which, " features do not split among ",
           comm.size(), " ranks");
}

// Sequence parallelism's collectives along dimension 1 of (B, T, *): the communicator gathers and
// scatters along dimension 0, so the positions go first, (T, B, *), and back.
Tensor positions_first(const Tensor& x) {
  MG_CHECK(x.dim() >= 2, "sequence parallelism: expected (B, T, ...) activations, got ", x.shape());
  return x.transpose(0, 1).contiguous();
}

int64_t positions_here(int64_t length, const Communicator& comm) {
  MG_CHECK(length % comm.size() == 0, "sequence parallelism: ", length, " positions do not split among ",
           comm.size(), " ranks");
  return length / comm.size();
}

// (B, T/N, *) on each rank -> (B, T, *), rank r's positions at [r T/N, (r+1) T/N).
Tensor all_gather_positions(const Tensor& x, Communicator& comm) {
  NoGradGuard no_grad;
  const Tensor mine = positions_first(x.detach());
  Shape shape = mine.shape();
  shape[0] *= comm.size();
  const Tensor all = Tensor::empty(shape, mine.options());
  comm.all_gather(all, mine)->wait();
  return all.transpose(0, 1).contiguous();
}

// (B, T, *) on each rank -> this rank's positions (B, T/N, *) summed over the ranks.
Tensor reduce_scatter_positions(const Tensor& x, Communicator& comm) {
  NoGradGuard no_grad;
  const Tensor all = positions_first(x.detach());
  Shape shape = all.shape();
  shape[0] = positions_here(shape[0], comm);
  const Tensor mine = Tensor::empty(shape, all.options());
  comm.reduce_scatter(mine, all)->wait();
  return mine.transpose(0, 1).contiguous();
}

// This rank's positions (B, T/N, *) of (B, T, *).
Tensor positions_of_rank(const Tensor& x, const Communicator& comm) {
  MG_CHECK(x.dim() >= 2, "sequence parallelism: expected (B, T, ...) activations, got ", x.shape());
  const int64_t here = positions_here(x.size(1), comm);
  return x.slice(1, comm.rank() * here, (comm.rank() + 1) * here).contiguous();
}

}  // namespace

Tensor copy_to_tensor_parallel(const Tensor& input, Communicator& comm) {
  const Tensor out = input.detach();
  if (any_requires_grad({&input})) {
    Communicator* c = &comm;
    record("copy_to_tensor_parallel", {out}, {input},
           [c](const TensorList& grads) -> TensorList { return {summed(grads[0], *c)}; }, Saves::None);
  }
  return out;
}

Tensor reduce_from_tensor_parallel(const Tensor& input, Communicator& comm) {
  const Tensor out = summed(input.detach(), comm);
  if (any_requires_grad({&input}))
    record("reduce_from_tensor_parallel", {out}, {input}, [](const TensorList& grads) { return grads; }, Saves::None);
  return out;
}

Tensor scatter_to_sequence_parallel(const Tensor& input, Communicator& comm) {
  const Tensor out = positions_of_rank(input.detach(), comm);
  if (any_requires_grad({&input})) {
    Communicator* c = &comm;
    record("scatter_to_sequence_parallel", {out}, {input},
           [c](const TensorList& grads) -> TensorList { return {all_gather_positions(grads[0], *c)}; }, Saves::None);
  }
  return out;
}

Tensor gather_from_sequence_parallel(const Tensor& input, Communicator& comm, bool reduce_scatter_backward) {
  const Tensor out = all_gather_positions(input, comm);
  if (any_requires_grad({&input})) {
    Communicator* c = &comm;
    record("gather_from_sequence_parallel", {out}, {input},
           [c, reduce_scatter_backward](const TensorList& grads) -> TensorList {
             return {reduce_scatter_backward ? reduce_scatter_positions(grads[0], *c)
                                             : positions_of_rank(grads[0], *c)};
           },
           Saves::None);
  }
  return out;
}

Tensor reduce_scatter_to_sequence_parallel(const Tensor& input, Communicator& comm) {
  const Tensor out = reduce_scatter_positions(input, comm);
  if (any_requires_grad({&input})) {
    Communicator* c = &comm;
    record("reduce_scatter_to_sequence_parallel", {out}, {input},
           [c](const TensorList& grads) -> TensorList { return {all_gather_positions(grads[0], *c)}; }, Saves::None);
  }
  return out;
}

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

VocabParallelEmbedding::VocabParallelEmbedding(const nn::Embedding& full, Communicator& comm)
    : comm_(&comm), num_embeddings_(full.weight().size(0)), embedding_dim_(full.weight().size(1)) {
  check_splits(num_embeddings_, comm, "VocabParallelEmbedding", "vocabulary");
  register_parameter("weight", shard_of(full.weight(), {0}, comm));
}

Tensor VocabParallelEmbedding::forward(const Tensor& indices) {
  return reduce_from_tensor_parallel(partial(indices), *comm_);
}

Tensor VocabParallelEmbedding::partial(const Tensor& indices) {
  MG_CHECK(indices.dtype() == DType::Int64, name(), ": expected Int64 ids, got ", indices.dtype());
  const int64_t rows = num_embeddings_ / comm_->size(), first = comm_->rank() * rows;
  MG_CHECK(indices.numel() == 0 ||
               (min(indices).item<int64_t>() >= 0 && max(indices).item<int64_t>() < num_embeddings_),
           name(), ": an id is outside [0, ", num_embeddings_, ")");
  const Tensor& weight = parameter("weight");
  // (*) 1 where this shard holds the id, else 0; the id's row here (row 0, masked out, elsewhere).
  const Tensor here = mul(mg::to(ge(indices, double(first)), DType::Int64),
                          mg::to(lt(indices, double(first + rows)), DType::Int64));
  const Tensor local = mul(sub(indices, first), here);
  return mul(embedding(weight, local), unsqueeze(mg::to(here, weight.dtype()), -1));  // (*, D)
}

std::string VocabParallelEmbedding::name() const {
  return detail::str_cat("VocabParallelEmbedding(", num_embeddings_, ", ", embedding_dim_, ", rank ", comm_->rank(),
                         " of ", comm_->size(), ")");
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, Communicator& comm) {
  MG_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0) &&
               targets.dtype() == DType::Int64,
           "vocab_parallel_cross_entropy: expected logits (N, V/ranks) and Int64 targets (N), got ", logits.shape(),
           " and ", targets.shape(), " ", targets.dtype());
  const int64_t columns = logits.size(1), first = comm.rank() * columns, vocab = columns * comm.size();
  MG_CHECK(targets.numel() == 0 || (min(targets).item<int64_t>() >= 0 && max(targets).item<int64_t>() < vocab),
           "vocab_parallel_cross_entropy: a target is outside [0, ", vocab, ")");
  Tensor row_max = max(logits.detach(), {1}, true);  // (N, 1); the shift does not change the gradient
  comm.all_reduce(row_max, ReduceOp::Max)->wait();
  const Tensor shifted = sub(logits, row_max);                                                  // (N, V/ranks)
  const Tensor sum_exp = reduce_from_tensor_parallel(sum(exp(shifted), {1}), comm);             // (N)
  const Tensor columns_here = arange(double(first), double(first + columns), 1, {DType::Int64, logits.device()});
  const Tensor is_target = to(eq(unsqueeze(targets, 1), columns_here), logits.dtype());        // (N, V/ranks)
  const Tensor target_logit = reduce_from_tensor_parallel(sum(mul(shifted, is_target), {1}), comm);  // (N)
  return mean(sub(log(sum_exp), target_logit));
}

VocabParallelHead::VocabParallelHead(std::shared_ptr<VocabParallelEmbedding> embedding, Communicator& comm)
    : TiedLinear(std::move(embedding), "weight"), comm_(&comm) {}

Tensor VocabParallelHead::forward(const Tensor& input) {
  return TiedLinear::forward(copy_to_tensor_parallel(input, *comm_));
}

std::string VocabParallelHead::name() const {
  return detail::str_cat("VocabParallelHead(", TiedLinear::name(), ")");
}

Tensor vocab_parallel_argmax(const Tensor& logits, Communicator& comm) {
  NoGradGuard no_grad;
  const int64_t columns = logits.size(-1), vocab = columns * comm.size();
  const Tensor best = max(logits.detach(), {-1});  // (*): this rank's largest
  Tensor largest = best.clone();
  comm.all_reduce(largest, ReduceOp::Max)->wait();
  // Minus the index of this rank's first largest where it is the overall largest, else -V: the
  // maximum over the ranks is minus the lowest such index (Float64 holds every index exactly).
  const Tensor index = to(add(argmax(logits.detach(), -1), double(comm.rank() * columns)), DType::Float64);
  Tensor candidate = where(eq(best, largest), neg(index), full(index.shape(), -double(vocab), index.options()));
  comm.all_reduce(candidate, ReduceOp::Max)->wait();
  return to(neg(candidate), DType::Int64);
}

std::shared_ptr<nn::Sequential> tensor_parallel_mlp(const nn::Sequential& mlp, Communicator& comm) {
  auto out = std::make_shared<nn::Sequential>();
  bool column_next = true;  // the next Linear opens a pair
  size_t linears_left = 0;
  for (size_t i = 0; i < mlp.size(); ++i) linears_left += std::dynamic_pointer_cast<nn::Linear>(mlp.at(i)) != nullptr;
  for (size_t i = 0; i < mlp.size(); ++i) {
    const auto layer = mlp.at(i);
    const auto lin = std::dynamic_pointer_cast<nn::Linear>(layer);
    if (!lin) {
      out->push_back(layer->clone());
      continue;
    }
    if (column_next && linears_left == 1) {
      out->push_back(lin->clone());  // a last odd layer: whole on every rank
    } else if (column_next) {
      out->push_back(std::make_shared<ColumnParallelLinear>(*lin, comm));
    } else {
      out->push_back(std::make_shared<RowParallelLinear>(*lin, comm));
    }
    column_next = !column_next;
    --linears_left;
  }
  out->train(mlp.is_training());
  return out;
}

std::shared_ptr<nn::Sequential> tensor_parallel_gpt(const nn::GPT& gpt, Communicator& comm,
                                                    TensorParallelOptions options) {
  const bool sp = options.sequence_parallel;
  MG_CHECK(!options.vocab_parallel || gpt.config().vocab_size % comm.size() == 0, "tensor_parallel_gpt: a vocabulary ",
           "of ", gpt.config().vocab_size, " does not split among ", comm.size(), " ranks");
  // The token embedding, split by the vocabulary when asked; the head multiplies by its weight.
  std::shared_ptr<VocabParallelEmbedding> vocab;
  if (options.vocab_parallel)
    vocab = std::make_shared<VocabParallelEmbedding>(*gpt.child<nn::Embedding>("wte"), comm);
  // A layer norm and a residual branch's dropout on sequence shards (sp), or the GPT's own, whole.
  const auto norm = [&](const std::shared_ptr<nn::Module>& ln, bool gather_output) -> std::shared_ptr<nn::Module> {
    if (!sp) return ln;
    return std::make_shared<SequenceParallelLayerNorm>(dynamic_cast<const nn::LayerNorm&>(*ln), comm, gather_output);
  };
  const auto drop = [&](const std::shared_ptr<nn::Module>& dropout) -> std::shared_ptr<nn::Module> {
    if (!sp) return dropout;
    return std::make_shared<SequenceParallelDropout>(dynamic_cast<const nn::Dropout&>(*dropout), comm);
  };
  auto out = std::make_shared<nn::Sequential>();
  for (const auto& layer : gpt.layers()->children()) {
    const auto recomputed = std::dynamic_pointer_cast<nn::Recomputed>(layer);
    const auto inner = recomputed ? recomputed->child("module") : layer;
    const auto block = std::dynamic_pointer_cast<nn::TransformerBlock>(inner);
    if (!block) {  // the embeddings, ln_f, the tied head: gpt's own, whole (sp: their output's positions cut)
      if (auto embedding = std::dynamic_pointer_cast<nn::GPTEmbedding>(layer)) {
        if (vocab) {
          embedding = std::make_shared<nn::GPTEmbedding>(vocab, embedding->child<nn::Embedding>("wpe"),
                                                         embedding->child<nn::Dropout>("drop"));
        }
        out->push_back(sp ? std::make_shared<SequenceParallelEmbedding>(*embedding, comm)
                          : std::shared_ptr<nn::Module>(embedding));
      } else if (std::dynamic_pointer_cast<nn::LayerNorm>(layer)) {
        out->push_back(norm(layer, true));  // ln_f, before the head
      } else if (vocab && std::dynamic_pointer_cast<nn::TiedLinear>(layer)) {
        out->push_back(std::make_shared<VocabParallelHead>(vocab, comm));
      } else {
        out->push_back(layer);
      }
      continue;
    }
    const auto attn = block->child<nn::CausalSelfAttention>("attn");
    const auto mlp = block->child("mlp");
    MG_CHECK(attn->n_head() % comm.size() == 0, "tensor_parallel_gpt: ", attn->n_head(),
             " attention heads do not split among ", comm.size(), " ranks");
    const int64_t head_dim = attn->n_embd() / attn->n_head();
    auto split_attn = std::make_shared<nn::CausalSelfAttention>(
        std::make_shared<ColumnParallelLinear>(*attn->child<nn::Linear>("c_attn"), comm, 3, sp),  // [q | k | v]
        std::make_shared<RowParallelLinear>(*attn->child<nn::Linear>("c_proj"), comm, sp),
        drop(attn->child("resid_dropout")), attn->n_embd(), attn->n_head() / comm.size(), head_dim);
    auto split_mlp = std::make_shared<nn::TransformerMLP>(
        std::make_shared<ColumnParallelLinear>(*mlp->child<nn::Linear>("c_fc"), comm, 1, sp), mlp->child("gelu"),
        std::make_shared<RowParallelLinear>(*mlp->child<nn::Linear>("c_proj"), comm, sp), drop(mlp->child("dropout")),
        attn->n_embd());
    std::shared_ptr<nn::Module> split_block = std::make_shared<nn::TransformerBlock>(
        norm(block->child("ln_1"), false), split_attn, norm(block->child("ln_2"), false), split_mlp);
    out->push_back(recomputed ? std::make_shared<nn::Recomputed>(split_block) : split_block);
  }
  out->train(gpt.is_training());
  return out;
}

namespace {

void collect_splits(const nn::Module& m, std::vector<TensorParallelSplit>& out) {
  size_t own = m.named_parameters().size();  // registration order: its own, then each child's
  for (const auto& child : m.children()) own -= child->named_parameters().size();
  if (const auto* column = dynamic_cast<const ColumnParallelLinear*>(&m)) {
    out.insert(out.end(), own, {0, column->parts()});
  } else if (dynamic_cast<const VocabParallelEmbedding*>(&m) != nullptr) {
    out.insert(out.end(), own, {0});
  } else if (dynamic_cast<const RowParallelLinear*>(&m) != nullptr) {
    out.push_back({1});                  // the weight
    out.insert(out.end(), own - 1, {});  // the bias, whole
  } else {
    out.insert(out.end(), own, {});
  }
  for (const auto& child : m.children()) collect_splits(*child, out);
}

}  // namespace

std::vector<TensorParallelSplit> tensor_parallel_splits(const nn::Module& tp) {
  std::vector<TensorParallelSplit> splits;
  collect_splits(tp, splits);
  return splits;
}

Tensor gather_shards(const Tensor& shard, TensorParallelSplit split, Communicator& comm) {
  if (split.dim < 0) return shard;
  NoGradGuard no_grad;
  const int64_t n = comm.size();
  Tensor moved = shard.detach().contiguous();
  if (split.dim > 0) moved = moved.transpose(0, split.dim).contiguous();  // the cut dimension first
  Shape shape = moved.shape();
  shape[0] *= n;
  Tensor whole = Tensor::empty(shape, moved.options());  // rank by rank: (N, parts, piece, ...)
  comm.all_gather(whole, moved)->wait();
  if (split.parts > 1) {  // part by part: (parts, N, piece, ...)
    Shape ranked = moved.shape();
    ranked[0] /= split.parts;
    ranked.insert(ranked.begin(), {n, split.parts});
    whole = whole.reshape(ranked).transpose(0, 1).contiguous().reshape(shape);
  }
  return split.dim > 0 ? whole.transpose(0, split.dim).contiguous() : whole;
}

Tensor shard_of(const Tensor& whole, TensorParallelSplit split, const Communicator& comm) {
  NoGradGuard no_grad;
  if (split.dim < 0) return whole.detach().clone();
  const int64_t size = whole.size(split.dim), n = comm.size();
  const int64_t block = size / std::max<int64_t>(split.parts, 1), piece = block / n;
  MG_CHECK(split.parts > 0 && piece * n * split.parts == size, "shard_of: dimension ", split.dim, " of shape ",
           whole.shape(), " does not split into ", split.parts, " part(s) among ", n, " ranks");
  std::vector<Tensor> pieces;  // this rank's slice of each part
  for (int64_t p = 0; p < split.parts; ++p) {
    const int64_t begin = p * block + comm.rank() * piece;
    pieces.push_back(whole.detach().slice(split.dim, begin, begin + piece));
  }
  return pieces.size() == 1 ? pieces[0].clone() : cat(pieces, split.dim);
}

nn::StateDict gather_tensor_parallel_state(const nn::Module& tp, Communicator& comm) {
  const std::vector<TensorParallelSplit> splits = tensor_parallel_splits(tp);
  nn::StateDict whole = tp.state_dict();  // the buffers (whole on every rank) and the parameters
  size_t k = 0;
  for (const auto& [name, p] : tp.named_parameters()) whole[name] = gather_shards(p, splits[k++], comm);
  return whole;
}

void load_tensor_parallel_state(nn::Module& tp, const nn::StateDict& whole, const Communicator& comm) {
  const std::vector<TensorParallelSplit> splits = tensor_parallel_splits(tp);
  nn::StateDict mine = whole;
  size_t k = 0;
  for (const auto& [name, p] : tp.named_parameters()) {
    const auto it = whole.find(name);
    MG_CHECK(it != whole.end(), "load_tensor_parallel_state: no '", name, "' in the state");
    mine[name] = shard_of(it->second, splits[k++], comm);
  }
  tp.load_state_dict(mine);
}

namespace {

// Each tensor of `state` keyed by an index into `params`, through fn(tensor, that parameter's
// split in tp, its shard's shape).
optim::OptimizerState map_parameter_state(
    const nn::Module& tp, const std::vector<Tensor>& params, const optim::OptimizerState& state,
    const std::function<Tensor(const Tensor&, TensorParallelSplit, const Shape&)>& fn) {
  const std::vector<TensorParallelSplit> in_tp = tensor_parallel_splits(tp);
  const std::vector<Tensor> tp_params = tp.parameters();
  std::vector<TensorParallelSplit> splits;  // per entry of params
  for (const Tensor& p : params) {
    size_t i = 0;
    while (i < tp_params.size() && !tp_params[i].is_same(p)) ++i;
    MG_CHECK(i < tp_params.size(), "tensor-parallel optimizer state: an optimizer parameter of shape ", p.shape(),
             " is not one of the model's");
    splits.push_back(in_tp[i]);
  }
  optim::OptimizerState out{{}, state.options};
  for (const auto& [key, t] : state.tensors) {
    const size_t k = optim::split_state_key(key).first;
    MG_CHECK(k < params.size(), "tensor-parallel optimizer state: key '", key, "' names parameter ", k, " of ",
             params.size());
    out.tensors[key] = fn(t, splits[k], params[k].shape());
  }
  return out;
}

}  // namespace

optim::OptimizerState gather_tensor_parallel_state(const nn::Module& tp, const std::vector<Tensor>& optimizer_params,
                                                   const optim::OptimizerState& mine, Communicator& comm) {
  return map_parameter_state(tp, optimizer_params, mine,
                             [&](const Tensor& t, TensorParallelSplit split, const Shape& shard) {
                               return t.shape() == shard ? gather_shards(t, split, comm) : t;
                             });
}

optim::OptimizerState shard_tensor_parallel_state(const nn::Module& tp, const std::vector<Tensor>& optimizer_params,
                                                  const optim::OptimizerState& whole, const Communicator& comm) {
  return map_parameter_state(
      tp, optimizer_params, whole, [&](const Tensor& t, TensorParallelSplit split, const Shape& shard) {
        return split.dim >= 0 && t.dim() == int64_t(shard.size()) && t.shape() != shard ? shard_of(t, split, comm) : t;
      });
}

}  // namespace mg::parallel
