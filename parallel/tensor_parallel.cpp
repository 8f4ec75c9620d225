// parallel/tensor_parallel.cpp — Megatron-LM's split linear layers and their conjugate operators
// (parallel/tensor_parallel.h).
#include "parallel/tensor_parallel.h"

#include "autograd/nn_ops.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/error.h"

namespace mg::parallel {
namespace {

// The sum of t over the ranks, in a new tensor.
Tensor summed(const Tensor& t, Communicator& comm) {
  Tensor out = t.clone();
  comm.all_reduce(out)->wait();
  return out;
}

// Rows [begin, end) of a detached copy of t, as a new leaf.
Tensor part(const Tensor& t, int64_t dim, int64_t begin, int64_t end) {
  NoGradGuard no_grad;
  return t.detach().slice(dim, begin, end).clone();
}

int64_t shard_size(int64_t features, const Communicator& comm, const char* layer, const char* which) {
  MG_CHECK(features % comm.size() == 0, layer, ": ", features, " ", which, " features do not split among ",
           comm.size(), " ranks");
  return features / comm.size();
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

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& full, Communicator& comm)
    : comm_(&comm), in_features_(full.weight().size(1)), out_features_(full.weight().size(0)),
      has_bias_(full.bias().defined()) {
  const int64_t n = shard_size(out_features_, comm, "ColumnParallelLinear", "output");
  const int64_t begin = comm.rank() * n;
  register_parameter("weight", part(full.weight(), 0, begin, begin + n));
  if (has_bias_) register_parameter("bias", part(full.bias(), 0, begin, begin + n));
}

Tensor ColumnParallelLinear::forward(const Tensor& input) {
  return linear(copy_to_tensor_parallel(input, *comm_), parameter("weight"), has_bias_ ? parameter("bias") : Tensor());
}

std::string ColumnParallelLinear::name() const {
  return detail::str_cat("ColumnParallelLinear(in_features=", in_features_, ", out_features=", out_features_,
                         ", bias=", has_bias_ ? "true" : "false", ", rank ", comm_->rank(), " of ", comm_->size(), ")");
}

RowParallelLinear::RowParallelLinear(const nn::Linear& full, Communicator& comm)
    : comm_(&comm), in_features_(full.weight().size(1)), out_features_(full.weight().size(0)),
      has_bias_(full.bias().defined()) {
  const int64_t n = shard_size(in_features_, comm, "RowParallelLinear", "input");
  const int64_t begin = comm.rank() * n;
  register_parameter("weight", part(full.weight(), 1, begin, begin + n));
  if (has_bias_) register_parameter("bias", part(full.bias(), 0, 0, out_features_));
}

Tensor RowParallelLinear::forward(const Tensor& input) {
  const Tensor y = reduce_from_tensor_parallel(linear(input, parameter("weight")), *comm_);
  return has_bias_ ? add(y, parameter("bias")) : y;
}

std::string RowParallelLinear::name() const {
  return detail::str_cat("RowParallelLinear(in_features=", in_features_, ", out_features=", out_features_,
                         ", bias=", has_bias_ ? "true" : "false", ", rank ", comm_->rank(), " of ", comm_->size(), ")");
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

}  // namespace mg::parallel
