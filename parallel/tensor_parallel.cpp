// parallel/tensor_parallel.cpp — Megatron-LM's split linear layers and their conjugate operators
// (parallel/tensor_parallel.h).
#include "parallel/tensor_parallel.h"

#include <functional>
#include <string>

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

void check_splits(int64_t features, const Communicator& comm, const char* layer, const char* which) {
  MG_CHECK(features % comm.size() == 0, layer, ": ", features, " ", which, " features do not split among ",
           comm.size(), " ranks");
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
  check_splits(out_features_, comm, "ColumnParallelLinear", "output");
  register_parameter("weight", shard_of(full.weight(), 0, comm));
  if (has_bias_) register_parameter("bias", shard_of(full.bias(), 0, comm));
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
  check_splits(in_features_, comm, "RowParallelLinear", "input");
  register_parameter("weight", shard_of(full.weight(), 1, comm));
  if (has_bias_) register_parameter("bias", shard_of(full.bias(), -1, comm));  // whole on every rank
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

std::vector<int> tensor_parallel_split_dims(const nn::Sequential& tp) {
  std::vector<int> dims;
  for (size_t i = 0; i < tp.size(); ++i) {
    const auto layer = tp.at(i);
    const size_t n = layer->parameters().size();
    if (std::dynamic_pointer_cast<ColumnParallelLinear>(layer)) {
      dims.insert(dims.end(), n, 0);
    } else if (std::dynamic_pointer_cast<RowParallelLinear>(layer)) {
      dims.push_back(1);                   // the weight
      dims.insert(dims.end(), n - 1, -1);  // the bias, whole
    } else {
      dims.insert(dims.end(), n, -1);
    }
  }
  return dims;
}

Tensor gather_shards(const Tensor& shard, int dim, Communicator& comm) {
  if (dim < 0) return shard;
  NoGradGuard no_grad;
  const int64_t n = comm.size();
  Tensor moved = shard.detach().contiguous();
  if (dim > 0) moved = moved.transpose(0, dim).contiguous();  // the cut dimension first
  Shape shape = moved.shape();
  shape[0] *= n;
  Tensor whole = Tensor::empty(shape, moved.options());
  comm.all_gather(whole, moved)->wait();
  return dim > 0 ? whole.transpose(0, dim).contiguous() : whole;
}

Tensor shard_of(const Tensor& whole, int dim, const Communicator& comm) {
  NoGradGuard no_grad;
  if (dim < 0) return whole.detach().clone();
  const int64_t n = whole.size(dim) / comm.size();
  MG_CHECK(n * comm.size() == whole.size(dim), "shard_of: dimension ", dim, " of shape ", whole.shape(),
           " does not split among ", comm.size(), " ranks");
  return whole.detach().slice(dim, comm.rank() * n, (comm.rank() + 1) * n).clone();
}

nn::StateDict gather_tensor_parallel_state(const nn::Sequential& tp, Communicator& comm) {
  const std::vector<int> dims = tensor_parallel_split_dims(tp);
  nn::StateDict whole = tp.state_dict();  // the buffers (whole on every rank) and the parameters
  size_t k = 0;
  for (const auto& [name, p] : tp.named_parameters()) whole[name] = gather_shards(p, dims[k++], comm);
  return whole;
}

void load_tensor_parallel_state(nn::Sequential& tp, const nn::StateDict& whole, const Communicator& comm) {
  const std::vector<int> dims = tensor_parallel_split_dims(tp);
  nn::StateDict mine = whole;
  size_t k = 0;
  for (const auto& [name, p] : tp.named_parameters()) {
    const auto it = whole.find(name);
    MG_CHECK(it != whole.end(), "load_tensor_parallel_state: no '", name, "' in the state");
    mine[name] = shard_of(it->second, dims[k++], comm);
  }
  tp.load_state_dict(mine);
}

namespace {

// Each tensor of `state` keyed by a parameter index, through fn(tensor, that parameter's split
// dimension, its shard's shape).
optim::OptimizerState map_parameter_state(const nn::Sequential& tp, const optim::OptimizerState& state,
                                          const std::function<Tensor(const Tensor&, int, const Shape&)>& fn) {
  const std::vector<int> dims = tensor_parallel_split_dims(tp);
  const std::vector<Tensor> params = tp.parameters();
  optim::OptimizerState out{{}, state.options};
  for (const auto& [key, t] : state.tensors) {
    const size_t k = optim::split_state_key(key).first;
    MG_CHECK(k < params.size(), "tensor-parallel optimizer state: key '", key, "' names parameter ", k, " of ",
             params.size());
    out.tensors[key] = fn(t, dims[k], params[k].shape());
  }
  return out;
}

}  // namespace

optim::OptimizerState gather_tensor_parallel_state(const nn::Sequential& tp, const optim::OptimizerState& mine,
                                                   Communicator& comm) {
  return map_parameter_state(tp, mine, [&](const Tensor& t, int dim, const Shape& shard) {
    return t.shape() == shard ? gather_shards(t, dim, comm) : t;
  });
}

optim::OptimizerState shard_tensor_parallel_state(const nn::Sequential& tp, const optim::OptimizerState& whole,
                                                  const Communicator& comm) {
  return map_parameter_state(tp, whole, [&](const Tensor& t, int dim, const Shape& shard) {
    return dim >= 0 && t.dim() == int64_t(shard.size()) && t.shape() != shard ? shard_of(t, dim, comm) : t;
  });
}

}  // namespace mg::parallel
