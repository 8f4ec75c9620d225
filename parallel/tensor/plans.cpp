// parallel/tensor/plans.cpp — tensor_parallel_mlp and tensor_parallel_gpt (plans.h).
#include "multigrad/parallel/tensor/plans.h"

#include "multigrad/core/error.h"
#include "multigrad/parallel/tensor/layers.h"
#include "multigrad/parallel/tensor/vocab.h"

namespace mg::parallel {

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

}  // namespace mg::parallel
