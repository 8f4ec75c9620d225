// parallel/zero.cpp — ZeRO stage 1: the sharded update and the gathered state (parallel/zero.h).
#include "parallel/zero.h"

#include <algorithm>
#include <chrono>
#include <set>

#include <nlohmann/json.hpp>

#include "autograd/factory.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/error.h"

namespace mg::parallel {
namespace {

// "<index>.<name>" of an optimizer state key, split.
std::pair<size_t, std::string> split_key(const std::string& key) {
  const size_t dot = key.find('.');
  return {std::stoul(key.substr(0, dot)), key.substr(dot + 1)};
}

bool is_group_option(const std::string& name) { return name == "groups" || name.rfind("group.", 0) == 0; }

}  // namespace

ZeroOptimizer::ZeroOptimizer(std::vector<optim::ParamGroup> groups, Communicator& comm, const MakeOptimizer& make,
                             ReduceOp reduce_op)
    : Optimizer(groups, "ZeroOptimizer"), comm_(comm), reduce_op_(reduce_op) {
  const DType dtype = params_[0].dtype();
  int64_t numel = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    MG_CHECK(p.dtype() == dtype, name_, ": parameter ", i, " is ", p.dtype(), ", parameter 0 ", dtype,
             " (one flat buffer holds them all)");
    MG_CHECK(p.device() == comm.device(), name_, ": parameter ", i, " is on ", p.device(), ", the communicator's device is ",
             comm.device());
    flat_offset_.push_back(numel);
    numel += p.numel();
  }
  const int64_t size = comm.size(), rank = comm.rank();
  shard_ = (numel + size - 1) / size;
  MG_CHECK(numel >= size, name_, ": ", numel, " parameter elements cannot be shared among ", size, " ranks");

  NoGradGuard no_grad;
  const TensorOptions options{.dtype = dtype, .device = comm.device()};
  flat_params_ = zeros({size * shard_}, options);
  flat_grads_ = zeros({size * shard_}, options);
  shard_grad_ = zeros({shard_}, options);
  shard_params_ = zeros({shard_}, options);
  // Rank 0's values into the flat buffer, which every parameter then views (the memory it had is
  // freed), and each parameter's gradient born in the flat gradient buffer (autograd's gradient
  // destinations).
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    comm.broadcast(p.detach(), 0)->wait();
    copy_(slice_of(flat_params_, i), p.detach().flatten());
    TensorImpl& impl = *p.unsafe_impl();
    impl.storage = flat_params_.storage();
    impl.offset = flat_offset_[i];
    impl.strides = contiguous_strides(impl.shape);
    set_grad_destination(p, slice_of(flat_grads_, i).view(p.shape()));
  }

  // This rank's shard, cut at the parameters' boundaries: each piece, a view of the flat
  // parameters, goes into its parameter's group.
  const int64_t begin = rank * shard_, end = std::min(numel, begin + shard_);
  std::vector<optim::ParamGroup> inner_groups;
  size_t param = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    inner_groups.push_back({.params = {}, .weight_decay = groups[g].weight_decay});
    for (size_t k = 0; k < groups[g].params.size(); ++k, ++param) {
      const int64_t from = std::max(begin, flat_offset_[param]);
      const int64_t to = std::min(end, flat_offset_[param] + params_[param].numel());
      if (from >= to) continue;
      segments_.push_back({param, from - flat_offset_[param], to - from, from - begin});
      Tensor piece = flat_params_.slice(0, from, to);
      piece.requires_grad_();
      pieces_.push_back(piece);
      inner_groups.back().params.push_back(piece);
    }
    segments_in_group_.push_back(inner_groups.back().params.size());
  }
  inner_ = make(std::move(inner_groups));
}

Tensor ZeroOptimizer::slice_of(const Tensor& flat, size_t param) const {
  return flat.slice(0, flat_offset_[param], flat_offset_[param] + params_[param].numel());
}

void ZeroOptimizer::step() {
  NoGradGuard no_grad;
  // 1. The gradients are in the flat buffer already, unless one was set by hand; the padding past
  // the last parameter stays 0.
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    // Skipping it, as an unsharded optimizer would, needs every rank to know: DDP's rule instead.
    MG_CHECK(g.defined(), name_, ".step: parameter ", i, " (shape ", params_[i].shape(), ") has no gradient on rank ",
             comm_.rank(), "; every rank must give every parameter one");
    const Tensor slot = slice_of(flat_grads_, i);
    if (!(g.storage() == slot.storage() && g.offset() == slot.offset())) copy_(slot, g.flatten());
  }
  // 2. This rank's shard of their sum.
  using Clock = std::chrono::steady_clock;
  const auto milliseconds = [](Clock::time_point since) {
    return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
  };
  auto start = Clock::now();
  comm_.reduce_scatter(shard_grad_, flat_grads_, reduce_op_)->wait();
  comm_ms_ += milliseconds(start);
  // 3. Its update, in place in the flat parameters.
  for (size_t k = 0; k < segments_.size(); ++k) {
    const Segment& s = segments_[k];
    pieces_[k].set_grad(shard_grad_.slice(0, s.in_shard, s.in_shard + s.length));
  }
  inner_->step();
  // 4. Every rank's updated shard into the flat parameters, which the parameters view.
  const int64_t begin = comm_.rank() * shard_;
  copy_(shard_params_, flat_params_.slice(0, begin, begin + shard_));
  start = Clock::now();
  comm_.all_gather(flat_params_, shard_params_)->wait();
  comm_ms_ += milliseconds(start);
  ++steps_;
  flat_params_.storage()->bump_version();  // the parameters changed in place (autograd/tape.h)
}

// The inner state is keyed by segment. A state tensor shaped as its segment (a moment, a
// momentum buffer) is that segment's slice of the parameter's; any other (Adam's step count) is
// the parameter's as a whole, the same in each of its segments.
optim::OptimizerState ZeroOptimizer::state_dict() const {
  NoGradGuard no_grad;
  const optim::OptimizerState mine = inner_->state_dict();
  // What each rank holds: per-element state names, and the per-parameter values (as JSON).
  std::set<std::string> elementwise;
  nlohmann::json whole = nlohmann::json::array();  // [param, name, dtype, value] per value
  for (const auto& [key, t] : mine.tensors) {
    const auto [k, name] = split_key(key);
    const Segment& s = segments_[k];
    if (is_floating(t.dtype()) && t.shape() == Shape{s.length}) {
      elementwise.insert(name);
    } else {
      MG_CHECK(t.numel() == 1, name_, ".state_dict: state '", name, "' of shape ", t.shape(), " is neither per element "
               "nor one value per parameter");
      whole.push_back({s.param, name, int(t.dtype()), to(t, DType::Float64).item<double>()});
    }
  }
  std::set<std::string> all_names;
  for (const std::string& text : all_gather_text(comm_, nlohmann::json(elementwise).dump()))
    for (const std::string& n : nlohmann::json::parse(text).get<std::vector<std::string>>()) all_names.insert(n);

  optim::OptimizerState full;
  for (const auto& [name, value] : mine.options)
    if (!is_group_option(name)) full.options[name] = value;
  save_groups(full);
  for (const std::string& name : all_names) {
    // This rank's pieces of the state into its shard, then every rank's shard into the flat buffer.
    Tensor shard = zeros({shard_}, {.dtype = flat_params_.dtype(), .device = flat_params_.device()});
    for (size_t k = 0; k < segments_.size(); ++k) {
      const auto it = mine.tensors.find(std::to_string(k) + "." + name);
      if (it == mine.tensors.end()) continue;
      copy_(shard.slice(0, segments_[k].in_shard, segments_[k].in_shard + segments_[k].length), it->second);
    }
    Tensor flat = Tensor::empty(flat_params_.shape(), flat_params_.options());
    comm_.all_gather(flat, shard)->wait();
    for (size_t i = 0; i < params_.size(); ++i) {
      full.tensors[std::to_string(i) + "." + name] = clone(slice_of(flat, i).view(params_[i].shape()));
    }
  }
  for (const std::string& text : all_gather_text(comm_, whole.dump())) {
    for (const auto& row : nlohmann::json::parse(text)) {
      full.tensors[std::to_string(row[0].get<size_t>()) + "." + row[1].get<std::string>()] =
          to(tensor(std::vector<double>{row[3].get<double>()}, {}), DType(row[2].get<int>()));
    }
  }
  return full;
}

void ZeroOptimizer::load_state_dict(const optim::OptimizerState& state) {
  NoGradGuard no_grad;
  GroupWeightDecays groups = read_groups(state);
  optim::OptimizerState mine;
  for (const auto& [name, value] : state.options)
    if (!is_group_option(name)) mine.options[name] = value;
  if (state.options.count("groups")) {
    mine.options["groups"] = double(segments_in_group_.size());
    for (size_t g = 0; g < segments_in_group_.size(); ++g) {
      const std::string prefix = "group." + std::to_string(g) + ".";
      mine.options[prefix + "size"] = double(segments_in_group_[g]);
      if (groups[g]) mine.options[prefix + "weight_decay"] = *groups[g];
    }
  }
  for (const auto& [key, t] : state.tensors) {
    const auto [param, name] = split_key(key);
    MG_CHECK(param < params_.size(), name_, ".load_state_dict: key '", key, "' refers to parameter ", param,
             " but the optimizer has ", params_.size());
    for (size_t k = 0; k < segments_.size(); ++k) {
      const Segment& s = segments_[k];
      if (s.param != param) continue;
      const bool elementwise = is_floating(t.dtype()) && t.shape() == params_[param].shape();
      mine.tensors[std::to_string(k) + "." + name] =
          elementwise ? clone(t.flatten().slice(0, s.offset, s.offset + s.length)) : clone(t);
    }
  }
  inner_->load_state_dict(mine);
  set_groups(std::move(groups));
}

}  // namespace mg::parallel
