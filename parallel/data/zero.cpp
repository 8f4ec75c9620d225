// parallel/data/zero.cpp — ZeRO stages 1-3: the units, the sharded update, stage 3's forward and the
// gathered state (parallel/data/zero.h).
#include "multigrad/parallel/data/zero.h"

#include <algorithm>
#include <chrono>
#include <set>

#include <nlohmann/json.hpp>

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"
#include "multigrad/parallel/data/buckets.h"
#include "multigrad/parallel/data/grad_norm.h"

namespace mg::parallel {
namespace {

using Clock = std::chrono::steady_clock;
// Stage 2's reduce-scatters in flight at once: each holds its unit's full gradients until done;
// two let one run while backward computes the next unit's gradients.
constexpr size_t kUnitsInFlight = 2;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

bool is_group_option(const std::string& name) { return name == "groups" || name.rfind("group.", 0) == 0; }

}  // namespace

struct ZeroUnit {
  std::vector<size_t> params;    // indices into the parameters, in the order they fill the unit
  std::vector<int64_t> offsets;  // each one's first element in flat_params
  int64_t chunk = 0;             // elements per rank: the unit is size x chunk, zero-padded
  Tensor flat_params;            // (size x chunk): what its parameters view; stage 3: released but around use
  Tensor flat_grads;             // (size x chunk): stage 1's gradient destinations; stage 2's while in flight
  Tensor shard_grad;             // (chunk): this rank's reduced gradient
  Tensor shard_params;           // (chunk): stage 3: this rank's part of flat_params, kept
  int pending = 0;               // stages 2, 3: gradients not final yet in this backward
  int to_release = 0;            // stage 3: gradients not final yet since the backward gathered it
  std::shared_ptr<Work> work;    // its reduce-scatter, until waited for
  std::shared_ptr<Work> gather;  // stage 3: its all-gather, until waited for
  Clock::time_point launched, gather_launched;
};

// The units, their reductions and gathers, the gradient hooks of stages 2 and 3 (zero.h).
class ZeroUnits {
 public:
  // `layers`: stage 3's units, each a child's parameters (indices), in forward order.
  ZeroUnits(const std::vector<Tensor>& params, Communicator& comm, const ZeroOptions& options, const char* name,
            const std::vector<std::vector<size_t>>& layers = {})
      : params_(params), comm_(comm), options_(options), name_(name), unit_of_(params.size()),
        ready_(params.size(), false) {
    const DType dtype = params_[0].dtype();
    int64_t numel = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i];
      MG_CHECK(p.dtype() == dtype, name_, ": parameter ", i, " is ", p.dtype(), ", parameter 0 ", dtype,
               " (one dtype for all the units)");
      MG_CHECK(p.device() == comm.device(), name_, ": parameter ", i, " is on ", p.device(),
               ", the communicator's device is ", comm.device());
      numel += p.numel();
    }
    MG_CHECK(numel >= comm.size(), name_, ": ", numel, " parameter elements cannot be shared among ", comm.size(),
             " ranks");
    if (options_.stage == 3) {
      build_units({layers.rbegin(), layers.rend()});
    } else {
      build_units(reverse_buckets(params_, options_.bucket_cap_mb, options_.bucket_cap_mb));
    }
    NoGradGuard no_grad;
    // Rank 0's values into the units, which the parameters then view (the memory they had is
    // freed); stage 1's gradients are born in the flat gradient buffers.
    for (ZeroUnit& u : units_) {
      for (size_t j = 0; j < u.params.size(); ++j) {
        Tensor& p = params_[u.params[j]];
        comm.broadcast(p.detach(), 0)->wait();
        copy_(slot(u.flat_params, u, j), p.detach().flatten());
        TensorImpl& impl = *p.unsafe_impl();
        impl.storage = u.flat_params.storage();
        impl.offset = u.offsets[j];
        impl.strides = contiguous_strides(impl.shape);
        if (options_.stage == 1) set_grad_destination(p, slot(u.flat_grads, u, j).view(p.shape()));
      }
      if (options_.stage == 3) {
        u.shard_params = clone(u.flat_params.slice(0, comm.rank() * u.chunk, (comm.rank() + 1) * u.chunk));
        u.flat_params.storage()->release();
      }
    }
    if (options_.stage >= 2) prepare_buffer(0);
  }

  ~ZeroUnits() {
    for (const Tensor& p : params_) set_grad_destination(p, Tensor());
  }
  ZeroUnits(const ZeroUnits&) = delete;
  ZeroUnits& operator=(const ZeroUnits&) = delete;

  const std::vector<ZeroUnit>& units() const { return units_; }
  size_t unit_of(size_t param) const { return unit_of_[param]; }
  int64_t offset_in_unit(size_t param) const {
    const ZeroUnit& u = units_[unit_of_[param]];
    return u.offsets[size_t(std::find(u.params.begin(), u.params.end(), param) - u.params.begin())];
  }
  // Member j's elements in one of u's flat buffers.
  Tensor slot(const Tensor& flat, const ZeroUnit& u, size_t j) const {
    return flat.slice(0, u.offsets[j], u.offsets[j] + params_[u.params[j]].numel());
  }
  double comm_ms() const { return comm_ms_; }
  Communicator& comm() const { return comm_; }
  bool sync = true;  // false inside NoSync

  // The hook of stages 2 and 3: param's gradient is final in this backward.
  void on_grad_ready(size_t param) {
    ZeroUnit& mine = units_[unit_of_[param]];
    if (options_.stage == 3 && mine.to_release > 0 && --mine.to_release == 0) release(unit_of_[param]);
    if (!sync) return;
    MG_CHECK(!ready_[param], name_, ": parameter ", param, " (shape ", params_[param].shape(),
             ") got a second gradient before step(); accumulate under no_sync()");
    ready_[param] = true;
    const size_t unit = unit_of_[param];
    if (units_[unit].pending-- == int(units_[unit].params.size())) prepare_buffer(unit + 1);
    while (launched_ < units_.size() && units_[launched_].pending == 0) launch_next();
  }

  // Step 1 of zero.h for every unit not yet started, then every reduced shard in place.
  void reduce_all() {
    while (launched_ < units_.size()) launch_next();
    while (waited_ < launched_) wait_next();
    launched_ = waited_ = 0;
    std::fill(ready_.begin(), ready_.end(), false);
    for (ZeroUnit& u : units_) u.pending = int(u.params.size());
    if (options_.stage >= 2) prepare_buffer(0);
  }

  // Stage 3: unit i's all-gather started (into its restored flat buffer), unless it is gathered
  // or on its way.
  void start_gather(size_t i) {
    ZeroUnit& u = units_[i];
    if (!u.flat_params.storage()->released() || u.gather) return;
    u.flat_params.storage()->restore();
    u.gather_launched = Clock::now();
    u.gather = comm_.all_gather(u.flat_params, u.shard_params);
  }
  // Stage 3: unit i gathered.
  void gather(size_t i) {
    start_gather(i);
    ZeroUnit& u = units_[i];
    if (!u.gather) return;
    u.gather->wait();
    const auto timing = u.gather->timing();
    comm_ms_ += timing ? ms_between(timing->start, timing->end) : ms_between(u.gather_launched, Clock::now());
    u.gather.reset();
  }
  void release(size_t i) {
    ZeroUnit& u = units_[i];
    if (u.gather) gather(i);  // a prefetch nobody used: the collective still has to end
    u.flat_params.storage()->release();
    u.to_release = 0;
  }
  // Stage 3, at the start of unit i's backward (the identity node on its child's output).
  void before_backward(size_t i) {
    gather(i);
    units_[i].to_release = int(units_[i].params.size());
    if (i + 1 < units_.size()) start_gather(i + 1);
  }
  // Stage 3, after a step changed the shards: the parameters changed in place (autograd/tape.h).
  void release_all() {
    for (size_t i = 0; i < units_.size(); ++i) {
      release(i);
      units_[i].flat_params.storage()->bump_version();
    }
  }

  // Step 3: each unit's chunks from every rank.
  void gather_all() {
    NoGradGuard no_grad;
    const int64_t rank = comm_.rank();
    for (ZeroUnit& u : units_) {
      const Tensor mine = clone(u.flat_params.slice(0, rank * u.chunk, (rank + 1) * u.chunk));
      const auto start = Clock::now();
      comm_.all_gather(u.flat_params, mine)->wait();
      comm_ms_ += ms_between(start, Clock::now());
      u.flat_params.storage()->bump_version();  // the parameters changed in place (autograd/tape.h)
    }
  }

 private:
  // Each unit padded to a multiple of the ranks.
  void build_units(const std::vector<std::vector<size_t>>& all_members) {
    const int64_t size = comm_.size();
    const TensorOptions options = params_[0].options();
    for (const auto& members : all_members) {
      ZeroUnit& u = units_.emplace_back();
      int64_t numel = 0;
      for (size_t k : members) {
        unit_of_[k] = units_.size() - 1;
        u.params.push_back(k);
        u.offsets.push_back(numel);
        numel += params_[k].numel();
      }
      u.chunk = (numel + size - 1) / size;
      u.flat_params = zeros({size * u.chunk}, options);
      if (options_.stage == 1) u.flat_grads = zeros({size * u.chunk}, options);
      u.shard_grad = zeros({u.chunk}, options);
      u.pending = int(u.params.size());
    }
  }

  // Stages 2 and 3: unit i's gradient buffer (unless it has one), where its parameters' gradients are
  // born from now on (gradient destinations) — made for unit 0 before a backward and for unit
  // i + 1 when unit i's first gradient is final (a layer's weight gradient may come with the
  // previous unit's last one), so that a rank holds the buffers of the units in flight, the one
  // filling and the next. A gradient that arrives before its unit's buffer exists is copied in
  // when the unit starts.
  void prepare_buffer(size_t i) {
    if (i >= units_.size() || units_[i].flat_grads.defined()) return;
    ZeroUnit& u = units_[i];
    u.flat_grads = zeros({comm_.size() * u.chunk}, u.flat_params.options());
    for (size_t j = 0; j < u.params.size(); ++j) {
      const Tensor& p = params_[u.params[j]];
      set_grad_destination(p, slot(u.flat_grads, u, j).view(p.shape()));
    }
  }

  // Starts the next unit's reduce-scatter (in unit order only, so every rank issues the same
  // collectives), from its gradients (step 1 of zero.h).
  void launch_next() {
    if (options_.stage >= 2 && launched_ - waited_ >= kUnitsInFlight) wait_next();
    const size_t i = launched_++;
    ZeroUnit& u = units_[i];
    NoGradGuard no_grad;
    if (options_.stage >= 2) prepare_buffer(i);  // started by step(), with no gradient final yet
    for (size_t j = 0; j < u.params.size(); ++j) {
      const Tensor& p = params_[u.params[j]];
      const Tensor g = p.grad();
      // Skipping it, as an unsharded optimizer would, needs every rank to know: DDP's rule instead.
      MG_CHECK(g.defined(), name_, ".step: parameter ", u.params[j], " (shape ", p.shape(), ") has no gradient on rank ",
               comm_.rank(), "; every rank must give every parameter one");
      const Tensor place = slot(u.flat_grads, u, j);
      if (!(g.storage() == place.storage() && g.offset() == place.offset())) copy_(place, g.flatten());
      if (options_.stage >= 2) {  // the buffer, in flight, holds it now
        p.set_grad(Tensor());
        set_grad_destination(p, Tensor());
      }
    }
    u.launched = Clock::now();
    u.work = comm_.reduce_scatter(u.shard_grad, u.flat_grads, options_.reduce_op);
  }

  void wait_next() {
    ZeroUnit& u = units_[waited_++];
    u.work->wait();
    const auto timing = u.work->timing();
    comm_ms_ += timing ? ms_between(timing->start, timing->end) : ms_between(u.launched, Clock::now());
    u.work.reset();
    if (options_.stage >= 2) u.flat_grads = Tensor();
  }

  std::vector<Tensor> params_;
  Communicator& comm_;
  ZeroOptions options_;
  const char* name_;
  std::vector<ZeroUnit> units_;  // reduction order
  std::vector<size_t> unit_of_;  // per parameter
  std::vector<bool> ready_;      // stages 2, 3: per parameter, in this backward
  size_t launched_ = 0, waited_ = 0;  // units, in this step
  double comm_ms_ = 0;
};

// How stage 3 cuts a Sequential: per child with parameters, a unit of the indices of its
// parameters (forward order); each child's unit (-1: none; the units count from the last, as the
// reduction goes); and per unit, whether a later layer uses its weight (a TiedLinear).
struct LayerUnits {
  std::vector<std::vector<size_t>> members;
  std::vector<int> unit_of_child;
  std::vector<bool> shared;
};

// Stage 3's model() (zero.h): the layers, child by child, each unit gathered for its child. A unit
// whose weight a later layer uses stays gathered from its forward until its own backward has
// made its gradients final (FSDP keeps such a weight in its root unit).
class ShardedLayers : public nn::Cloneable<ShardedLayers> {
 public:
  ShardedLayers(std::shared_ptr<nn::Sequential> layers, std::shared_ptr<ZeroUnits> units, LayerUnits cut)
      : units_(std::move(units)), cut_(std::move(cut)) {
    register_module("module", std::move(layers));
  }

  Tensor forward(const Tensor& input) override {
    const auto& layers = named_children()[0].second->named_children();
    Tensor x = input;
    for (size_t c = 0; c < layers.size(); ++c) {
      const int unit = cut_.unit_of_child[c];
      if (unit < 0) {
        x = layers[c].second->forward(x);
        continue;
      }
      units_->gather(size_t(unit));
      if (unit > 0) units_->start_gather(size_t(unit - 1));  // the next child's
      x = layers[c].second->forward(x);
      if (!cut_.shared[size_t(unit)]) units_->release(size_t(unit));
      if (any_requires_grad({&x})) x = gathered_in_backward(x, size_t(unit));
    }
    // Without a backward to come (evaluation), the shared units go too.
    if (!any_requires_grad({&x}))
      for (size_t unit = 0; unit < cut_.shared.size(); ++unit)
        if (cut_.shared[unit]) units_->release(unit);
    return x;
  }
  std::string name() const override { return "ZeroStage3(" + named_children()[0].second->name() + ")"; }

 private:
  // x as an identity op whose backward gathers the unit before the child's own nodes run.
  Tensor gathered_in_backward(const Tensor& x, size_t unit) const {
    const Tensor out = x.detach();
    std::weak_ptr<ZeroUnits> weak = units_;
    record("zero3_gather", {out}, {x}, [weak, unit](const TensorList& grads) {
      if (auto units = weak.lock()) units->before_backward(unit);
      return grads;
    }, Saves::None);
    return out;
  }

  std::shared_ptr<ZeroUnits> units_;
  LayerUnits cut_;
};

namespace {

// Stage 3's units of `layers`, whose parameters are `params` (LayerUnits).
LayerUnits layer_units(const nn::Sequential& layers, const std::vector<Tensor>& params, const char* name) {
  LayerUnits cut;
  std::vector<int> child_of(params.size(), -1);
  std::vector<size_t> shared_children;  // the layers whose weight a later one uses
  const auto index_of = [&](const Tensor& p) {  // params.size(): none
    size_t k = 0;
    while (k < params.size() && params[k].unsafe_impl() != p.unsafe_impl()) ++k;
    return k;
  };
  for (size_t c = 0; c < layers.size(); ++c) {
    const auto child = layers.at(c);
    if (const auto tied = std::dynamic_pointer_cast<nn::TiedLinear>(child)) {
      const size_t k = index_of(tied->owner_weight());
      MG_CHECK(k < params.size() && child_of[k] >= 0, name, ": layer ", c, " (", child->name(),
               ") uses a weight of no earlier layer");
      shared_children.push_back(size_t(child_of[k]));
    }
    std::vector<size_t> mine;
    for (const Tensor& p : child->parameters()) {
      const size_t k = index_of(p);
      MG_CHECK(k < params.size(), name, ": a parameter of layer ", c, " (", child->name(), ", shape ", p.shape(),
               ") is in no parameter group");
      MG_CHECK(child_of[k] < 0, name, ": parameter ", k, " (shape ", p.shape(), ") is in layers ", child_of[k], " and ",
               c, "; stage 3 does not support shared parameters");
      child_of[k] = int(c);
      mine.push_back(k);
    }
    if (!mine.empty()) cut.members.push_back(std::move(mine));
  }
  for (size_t k = 0; k < params.size(); ++k)
    MG_CHECK(child_of[k] >= 0, name, ": parameter ", k, " (shape ", params[k].shape(), ") is in no layer");
  cut.unit_of_child.assign(layers.size(), -1);
  int unit = int(cut.members.size());
  for (size_t c = 0; c < layers.size(); ++c)
    if (!layers.at(c)->parameters().empty()) cut.unit_of_child[c] = --unit;
  cut.shared.assign(cut.members.size(), false);
  for (size_t c : shared_children) cut.shared[size_t(cut.unit_of_child[c])] = true;
  return cut;
}

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
    model_ = std::make_shared<ShardedLayers>(std::move(layers), units_, std::move(cut));
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
