// parallel/data/zero_units.h — inside ZeroOptimizer (zero.h): the units, their reduce-scatters
// and gradient hooks (stages 1-3), and stage 3's gathers and releases, with the layers that
// drive them (zero3.cpp). Not part of the API: zero.cpp and zero3.cpp include it.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"
#include "multigrad/parallel/data/buckets.h"
#include "multigrad/parallel/data/zero.h"

namespace mg::parallel {
namespace zero_units {

using Clock = std::chrono::steady_clock;
// Stage 2's reduce-scatters in flight at once: each holds its unit's full gradients until done;
// two let one run while backward computes the next unit's gradients.
constexpr size_t kUnitsInFlight = 2;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// A unit: a flat buffer (buckets.h), padded to size x chunk elements, and what flows through it.
struct ZeroUnit : FlatLayout {
  int64_t chunk = 0;             // elements per rank: numel / size
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

}  // namespace zero_units

using zero_units::ZeroUnit;

// The units, their reductions and gathers, the gradient hooks of stages 2 and 3 (zero.h).
class ZeroUnits {
  using Clock = zero_units::Clock;

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
  Tensor slot(const Tensor& flat, const ZeroUnit& u, size_t j) const { return u.slot(flat, j, params_[u.params[j]]); }
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
    comm_ms_ += timing ? zero_units::ms_between(timing->start, timing->end) : zero_units::ms_between(u.gather_launched, Clock::now());
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
      comm_ms_ += zero_units::ms_between(start, Clock::now());
      u.flat_params.storage()->bump_version();  // the parameters changed in place (autograd/tape.h)
    }
  }

 private:
  // Each unit a flat layout padded to a multiple of the ranks, its members packed.
  void build_units(const std::vector<std::vector<size_t>>& all_members) {
    const int64_t size = comm_.size();
    const TensorOptions options = params_[0].options();
    for (const auto& members : all_members) {
      ZeroUnit& u = units_.emplace_back();
      static_cast<FlatLayout&>(u) = flat_layout(params_, members, 1, size);
      for (size_t k : members) unit_of_[k] = units_.size() - 1;
      u.chunk = u.numel / size;
      u.flat_params = zeros({u.numel}, options);
      if (options_.stage == 1) u.flat_grads = zeros({u.numel}, options);
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
    if (options_.stage >= 2 && launched_ - waited_ >= zero_units::kUnitsInFlight) wait_next();
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
    comm_ms_ += timing ? zero_units::ms_between(timing->start, timing->end) : zero_units::ms_between(u.launched, Clock::now());
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

// ---------------------------------------------------------------- stage 3 (zero3.cpp)

// How stage 3 cuts a Sequential: per child with parameters, a unit of the indices of its
// parameters (forward order); each child's unit (-1: none; the units count from the last, as the
// reduction goes); and per unit, whether a later layer uses its weight (a TiedLinear).
struct LayerUnits {
  std::vector<std::vector<size_t>> members;
  std::vector<int> unit_of_child;
  std::vector<bool> shared;
};

// Stage 3's units of `layers`, whose parameters are `params`; `name` for errors.
LayerUnits layer_units(const nn::Sequential& layers, const std::vector<Tensor>& params, const char* name);

// Stage 3's model() (zero.h): the layers, child by child, each unit gathered for its child.
std::shared_ptr<nn::Module> sharded_layers(std::shared_ptr<nn::Sequential> layers, std::shared_ptr<ZeroUnits> units,
                                           LayerUnits cut);

}  // namespace mg::parallel
