// parallel/tensor/vocab.cpp — vocabulary parallelism (vocab.h).
#include "multigrad/parallel/tensor/vocab.h"

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"
#include "multigrad/parallel/tensor/operators.h"
#include "multigrad/parallel/tensor/state.h"

namespace mg::parallel {

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

}  // namespace mg::parallel
