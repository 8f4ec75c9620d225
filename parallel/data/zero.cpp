// parallel/data/zero.cpp — ZeroOptimizer: the sharded update and the gathered state (zero.h);
// the units it runs through are zero_units.h's, stage 3's layers zero3.cpp's.
#include "multigrad/parallel/data/zero.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "multigrad/parallel/data/grad_norm.h"
#include "multigrad/parallel/data/zero_units.h"

namespace mg::parallel {
namespace {

bool is_group_option(const std::string& name) { return name == "groups" || name.rfind("group.", 0) == 0; }

}  // namespace

ZeroOptimizer::ZeroOptimizer(std::vector<optim::ParamGroup> groups, Communicator& comm, const MakeOptimizer& make,
                             ZeroOptions options)
    : ZeroOptimizer(std::move(groups), comm, make, options, nullptr) {}

ZeroOptimizer::ZeroOptimizer(std::vector<optim::ParamGroup> groups, Communicator& comm, const MakeOptimizer& make,
                             ZeroOptions options, std::shared_ptr<nn::Sequential> layers)
    : Optimizer(groups, "ZeroOptimizer"), options_(options) {
  MG_CHECK(options_.stage >= 1 && options_.stage <= 3, name_, ": stage ", options_.stage, " is not 1, 2 or 3");
  MG_CHECK(options_.bucket_cap_mb > 0, name_, ": bucket_cap_mb ", options_.bucket_cap_mb, " is not positive");
  MG_CHECK((options_.stage == 3) == (layers != nullptr), name_, ": stage ", options_.stage,
           options_.stage == 3 ? " needs the layers whose parameters it shards" : " takes no layers (stage 3 does)");
  if (layers) {
    LayerUnits cut = layer_units(*layers, params_, name_);
    units_ = std::make_shared<ZeroUnits>(params_, comm, options_, name_, cut.members);
    model_ = sharded_layers(std::move(layers), units_, std::move(cut));
  } else {
    units_ = std::make_shared<ZeroUnits>(params_, comm, options_, name_);
  }
  if (options_.stage >= 2) {
    std::weak_ptr<ZeroUnits> weak = units_;
    for (size_t i = 0; i < params_.size(); ++i) {
      on_grad_ready(params_[i], [weak, i](const Tensor&) {
        if (auto units = weak.lock()) units->on_grad_ready(i);
      });
    }
  }

  // This rank's chunk of each unit, cut at the parameters' boundaries: each piece, a view of its
  // unit, goes into its parameter's group.
  const int64_t rank = comm.rank();
  std::vector<optim::ParamGroup> inner_groups;
  size_t param = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    inner_groups.push_back({.params = {}, .weight_decay = groups[g].weight_decay});
    for (size_t k = 0; k < groups[g].params.size(); ++k, ++param) {
      const size_t unit = units_->unit_of(param);
      const ZeroUnit& u = units_->units()[unit];
      const int64_t offset = units_->offset_in_unit(param);
      const int64_t from = std::max(rank * u.chunk, offset);
      const int64_t to = std::min((rank + 1) * u.chunk, offset + params_[param].numel());
      if (from >= to) continue;
      segments_.push_back({param, unit, from - offset, to - from, from - rank * u.chunk});
      Tensor piece = options_.stage == 3 ? u.shard_params.slice(0, from - rank * u.chunk, to - rank * u.chunk)
                                         : u.flat_params.slice(0, from, to);
      piece.requires_grad_();
      pieces_.push_back(piece);
      inner_groups.back().params.push_back(piece);
    }
    segments_in_group_.push_back(inner_groups.back().params.size());
  }
  inner_ = make(std::move(inner_groups));
}

ZeroOptimizer::~ZeroOptimizer() = default;

int64_t ZeroOptimizer::shard_numel() const {
  int64_t n = 0;
  for (const ZeroUnit& u : units_->units()) n += u.chunk;
  return n;
}

std::vector<std::vector<size_t>> ZeroOptimizer::unit_params() const {
  std::vector<std::vector<size_t>> out;
  for (const ZeroUnit& u : units_->units()) out.push_back(u.params);
  return out;
}

double ZeroOptimizer::comm_ms() const { return units_->comm_ms(); }

nn::Module& ZeroOptimizer::model() {
  MG_CHECK(model_, name_, ".model: stage ", options_.stage, " keeps every parameter; run the model itself");
  return *model_;
}

void ZeroOptimizer::gather_parameters() {
  if (options_.stage != 3) return;
  for (size_t i = 0; i < units_->units().size(); ++i) units_->start_gather(i);
  for (size_t i = 0; i < units_->units().size(); ++i) units_->gather(i);
}

void ZeroOptimizer::scatter_parameters() {
  if (options_.stage != 3) return;
  NoGradGuard no_grad;
  const int64_t rank = units_->comm().rank();
  for (const ZeroUnit& u : units_->units()) {
    MG_CHECK(!u.flat_params.storage()->released(), name_, ".scatter_parameters: the parameters are not gathered ",
             "(call gather_parameters() before changing them)");
    copy_(u.shard_params, u.flat_params.slice(0, rank * u.chunk, (rank + 1) * u.chunk));
  }
}

ZeroOptimizer::NoSync::NoSync(ZeroOptimizer& zero) : zero_(zero), previous_(zero.units_->sync) {
  zero_.units_->sync = false;
}
ZeroOptimizer::NoSync::~NoSync() { zero_.units_->sync = previous_; }

void ZeroOptimizer::zero_grad(bool set_to_none) {
  reduced_ = false;
  Optimizer::zero_grad(set_to_none);
}

std::vector<Tensor> ZeroOptimizer::step_gradients() {
  if (!reduced_) units_->reduce_all();
  reduced_ = true;
  std::vector<Tensor> shards;
  for (const ZeroUnit& u : units_->units()) shards.push_back(u.shard_grad);
  return shards;
}

double ZeroOptimizer::clip_grad_norm(double max_norm) {
  return clip_grad_norm(max_norm, units_->comm(), std::vector<bool>(params_.size(), true));
}

double ZeroOptimizer::clip_grad_norm(double max_norm, Communicator& comm, const std::vector<bool>& counted) {
  MG_CHECK(counted.size() == params_.size(), name_, ".clip_grad_norm: ", counted.size(), " flags for ",
           params_.size(), " parameters");
  const std::vector<Tensor> shards = step_gradients();  // their padding is zero: it adds nothing to the squares
  std::vector<Tensor> pieces;  // of the counted parameters, in this rank's shards
  for (const Segment& s : segments_) {
    if (counted[s.param])
      pieces.push_back(units_->units()[s.unit].shard_grad.slice(0, s.in_chunk, s.in_chunk + s.length));
  }
  const double total = global_grad_norm(comm, optim::squares_of(pieces));
  optim::scale_to_norm(shards, total, max_norm);
  return total;
}

void ZeroOptimizer::step() {
  if (!reduced_) units_->reduce_all();
  reduced_ = false;
  NoGradGuard no_grad;
  for (size_t k = 0; k < segments_.size(); ++k) {
    const Segment& s = segments_[k];
    pieces_[k].set_grad(units_->units()[s.unit].shard_grad.slice(0, s.in_chunk, s.in_chunk + s.length));
  }
  inner_->step();
  if (options_.stage == 3) {
    units_->release_all();
  } else {
    units_->gather_all();
  }
  ++steps_;
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
    const auto [k, name] = optim::split_state_key(key);
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
  for (const std::string& text : all_gather_text(units_->comm(), nlohmann::json(elementwise).dump()))
    for (const std::string& n : nlohmann::json::parse(text).get<std::vector<std::string>>()) all_names.insert(n);

  optim::OptimizerState full;
  for (const auto& [name, value] : mine.options)
    if (!is_group_option(name)) full.options[name] = value;
  save_groups(full);
  for (const std::string& name : all_names) {
    // Per unit: this rank's pieces of the state into its chunk, then every rank's chunk into the
    // unit's layout, cut into the parameters.
    for (size_t unit = 0; unit < units_->units().size(); ++unit) {
      const ZeroUnit& u = units_->units()[unit];
      Tensor chunk = zeros({u.chunk}, u.flat_params.options());
      for (size_t k = 0; k < segments_.size(); ++k) {
        const auto it = mine.tensors.find(std::to_string(k) + "." + name);
        if (segments_[k].unit != unit || it == mine.tensors.end()) continue;
        copy_(chunk.slice(0, segments_[k].in_chunk, segments_[k].in_chunk + segments_[k].length), it->second);
      }
      Tensor flat = Tensor::empty(u.flat_params.shape(), u.flat_params.options());
      units_->comm().all_gather(flat, chunk)->wait();
      for (size_t j = 0; j < u.params.size(); ++j)
        full.tensors[std::to_string(u.params[j]) + "." + name] =
            clone(units_->slot(flat, u, j).view(params_[u.params[j]].shape()));
    }
  }
  for (const std::string& text : all_gather_text(units_->comm(), whole.dump())) {
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
    const auto [param, name] = optim::split_state_key(key);
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
