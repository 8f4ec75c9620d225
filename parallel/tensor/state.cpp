// parallel/tensor/state.cpp — the cut of parameters and the gather and shard of state (state.h).
#include "multigrad/parallel/tensor/state.h"

#include <algorithm>
#include <functional>

#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"
#include "multigrad/parallel/tensor/layers.h"
#include "multigrad/parallel/tensor/vocab.h"

namespace mg::parallel {

void check_splits(int64_t features, const Communicator& comm, const char* layer, const char* which) {
  MG_CHECK(features % comm.size() == 0, layer, ": ", features, " ", which, " features do not split among ",
           comm.size(), " ranks");
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
