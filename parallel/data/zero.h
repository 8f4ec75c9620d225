// parallel/data/zero.h — ZeRO stages 1, 2 and 3 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
// Training Trillion Parameter Models", 2020): data parallelism whose optimizer state (stage 1),
// gradients (stage 2) and parameters (stage 3, PyTorch's FSDP) are sharded across the ranks, over
// any Communicator.
//
// Units. The constructor lays the parameters out in units with DDP's own layout (buckets.h:
// reverse_buckets and flat_layout): reverse registration order (backward produces the last
// layers' gradients first), a unit closing once it holds bucket_cap_mb. So stage 2 reads as DDP's
// buckets with a reduce-scatter in place of the all-reduce. Each unit is one flat buffer, padded
// with zeros to size x chunk elements, and each of its parameters becomes a view of it (as FSDP's
// flat parameters). Rank r owns elements [r chunk, (r + 1) chunk) of every unit: its shard. (The
// units and their collectives are zero_units.h's, stage 3's layers zero3.cpp's.) Every rank holds the
// whole model and computes the gradients of its part of the batch, as with DDP; then, in place of
// DDP's all-reduce and a replicated update:
//   1. each unit's gradients are reduce-scattered (reduce_op): rank r receives the reduced
//      gradient of its chunk of the unit;
//      stage 1: in step(), from a flat gradient buffer per unit in which the gradients are born
//        (autograd's gradient destinations, as DDP's buckets), which stays allocated;
//      stage 2: during backward, as soon as a unit's last gradient is final (on_grad_ready), from a
//        buffer the gradients are copied into, in unit order on every rank; the parameters'
//        gradients are then dropped, and the buffer once its reduce-scatter is done (at most
//        kUnitsInFlight in flight: launching another first waits for the oldest), so a rank holds
//        the full gradients of a few units at a time instead of the model's. After backward no
//        parameter has a .grad: the reduced shards are inside the optimizer.
//   2. step() updates the shard with the inner optimizer (SGD, Adam, AdamW from `make`), whose
//      parameters are the pieces of the parameters in the shard ("segments": views of the units)
//      and whose state is of those pieces only: 1/size of it per rank;
//   3. step() all-gathers each unit's updated chunks into the unit, which the parameters view.
// Parameter groups carry over (a segment is in its parameter's group), so AdamW's weight decay on
// matrices only works as without sharding.
//
// Stage 3. The units are the model's layers instead: the optimizer is built over a Sequential,
// and each of its children that has parameters is a unit (bucket_cap_mb is not used), in reverse
// order as above. A rank keeps only its chunk of each unit (the parameters' bytes are released:
// core/storage.h), which the inner optimizer updates in place; step 3 above goes. The model runs
// through model(), whose forward, child by child:
//   - all-gathers the child's unit into its flat buffer (restored), which the parameters view,
//     the next child's all-gather started first (prefetch: it overlaps this child's forward);
//   - runs the child, releases the unit, and puts an identity node on the child's output whose
//     backward — the first of the child's nodes to run in backward — all-gathers the unit again
//     (and starts the previous child's);
//   - when the unit's last gradient is final, releases it again and reduce-scatters the gradients
//     as stage 2 does.
// So a rank holds its shards, one or two gathered units, and stage 2's gradients in flight. The
// parameters are readable only while gathered: gather_parameters() gathers every unit (for a
// checkpoint of the model, or an evaluation outside model()), until the next forward or step.
// A layer that uses an earlier layer's weight (nn::TiedLinear: a GPT's head over its token
// embedding) keeps that layer's unit gathered from its forward until its backward (FSDP's root
// unit); any other parameter in two layers is refused.
// Bytes per step: an all-gather in forward, one in backward and the reduce-scatter, 3 (N-1)/N P B
// per rank, 1.5x DDP's all-reduce.
//
// Gradient accumulation. Stage 1 accumulates in the flat buffers and reduces once, in step().
// Stages 2 and 3 reduce at every backward outside no_sync(): inside its scope the gradients
// accumulate in the parameters' .grad (full size, as DDP's no_sync), and the first backward after
// it reduces the sum — the micro-batch order of DDP and of stage 1.
//
// Equivalence with one device. The updates are elementwise, so updating a segment gives the bits
// that updating the whole parameter gives; with mg::set_deterministic(true) reduce_scatter sums in
// rank order, the order DDP's all-reduce and --grad-accum use. So stages 1 and 2 over N ranks end
// bit-identical to DDP, and to one device accumulating the same N micro-batches. Stage 3 computes
// with the same parameter values, gathered instead of kept: the same bits again.
//
// Memory per rank, P parameters of B bytes each, N ranks, K optimizer state tensors per parameter
// (1 for SGD with momentum, 2 for Adam), padding aside: the parameters (P B, as DDP's); the
// gradients, P B in stage 1 (as DDP's buckets) and in stage 2 only the units in flight; the reduced
// shard P B / N; the optimizer state K P B / N (DDP: K P B); and in step() a chunk to all-gather
// from, P B / N at most. So against DDP stage 1 saves K P B (1 - 1/N) - P B / N (Adam on 4 ranks:
// 1.25 P B), and stage 2 about P B more, less its units in flight; stage 3 P B (1 - 1/N) more, less
// the one or two units gathered.
//
// Checkpoints. state_dict() gathers the shards (every rank must call it): it is the state an
// unsharded optimizer of the same kind over the same parameters would hold, so a checkpoint
// loads into another world size, another stage, or a plain optimizer, and back; load_state_dict()
// takes such a state and keeps this rank's pieces.
//
// Every parameter needs a gradient at each step, on every rank (DDP's rule for unused
// parameters). All parameters must have one floating dtype, on comm.device(); build the
// optimizer after moving the model there (moving it later would move the parameters out of the
// units). The constructor broadcasts rank 0's parameters, so the replicas start identical.
// Lifetimes: the communicator must outlive the optimizer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "multigrad/nn/layers.h"
#include "multigrad/optim/optimizer.h"
#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

struct ZeroOptions {
  int stage = 1;              // 1: optimizer state sharded; 2: gradients too; 3: parameters too
  double bucket_cap_mb = 25;  // MiB of parameters per unit (the header); stages 1 and 2
  // Avg is PyTorch's. Sum leaves the scaling to the caller, as DDPOptions::reduce_op says.
  ReduceOp reduce_op = ReduceOp::Avg;
};

class ZeroUnits;

class ZeroOptimizer : public optim::Optimizer {
 public:
  // Builds the optimizer of one rank's shard from its parameter groups.
  using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

  ZeroOptimizer(std::vector<optim::ParamGroup> groups, Communicator& comm, const MakeOptimizer& make,
                ZeroOptions options = {});
  // Stage 3 (the header): the groups' parameters must be those of `layers`' children.
  ZeroOptimizer(std::vector<optim::ParamGroup> groups, Communicator& comm, const MakeOptimizer& make,
                ZeroOptions options, std::shared_ptr<nn::Sequential> layers);
  ~ZeroOptimizer() override;

  // Stage 3: the model to run in place of the layers (its forward gathers each unit for its
  // child); it holds the layers as its child "module".
  nn::Module& model();
  // Stage 3: every unit's parameters gathered (collective), until the next forward or step.
  void gather_parameters();
  // Stage 3: after the gathered parameters were changed (a checkpoint loaded into the model), this
  // rank's chunks of them become its shards. Every rank must have made the same change.
  void scatter_parameters();

  void step() override;
  // Also forgets gradients reduced for a step that did not run (GradScaler skipped it).
  void zero_grad(bool set_to_none = true) override;
  // This rank's reduced gradient shards (the units' padding included, zero), reducing the
  // gradients first (step() then does not again). Collective.
  std::vector<Tensor> step_gradients() override;
  // Clipping by the global L2 norm over every rank's shard (parallel/data/grad_norm.h): reduces the
  // gradients first (step() then does not again) and scales this rank's reduced shard by
  // optim::clip_grad_norm's rule. Returns the norm, the same on every rank and bit-identical to
  // clip_grad_norm's over the whole gradients on one device. Collective.
  double clip_grad_norm(double max_norm);
  // The same when the ranks of `comm` (this optimizer's and others: a mesh's whole communicator)
  // each hold a part of the gradients: parameter i's shard counts where counted[i] (tensor
  // parallelism: a tp shard on every tp rank, a parameter replicated over tp on tp rank 0 only),
  // summed over `comm`. Collective over `comm`.
  double clip_grad_norm(double max_norm, Communicator& comm, const std::vector<bool>& counted);
  optim::OptimizerState state_dict() const override;
  void load_state_dict(const optim::OptimizerState& state) override;
  double lr() const override { return inner_->lr(); }
  void set_lr(double lr) override { inner_->set_lr(lr); }

  // Stages 2 and 3: in this guard's scope backward only accumulates (the header); stage 1 needs none.
  class NoSync {
   public:
    explicit NoSync(ZeroOptimizer& zero);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    ZeroOptimizer& zero_;
    bool previous_;
  };

  int stage() const { return options_.stage; }
  // Elements of the units this rank updates (padding included).
  int64_t shard_numel() const;
  // The units in reduction order, each as its parameters' indices (registration order).
  std::vector<std::vector<size_t>> unit_params() const;
  // Steps taken, and the milliseconds their reduce-scatters (from start to end on the backend
  // where it says, else from launch to wait) and all-gathers (their waits) took.
  int64_t steps() const { return steps_; }
  double comm_ms() const;

 private:
  // The part of parameter `param` in this rank's chunk of unit `unit`: the parameter's elements
  // [offset, offset + length), which are the chunk's elements [in_chunk, in_chunk + length).
  struct Segment {
    size_t param = 0, unit = 0;
    int64_t offset = 0, length = 0, in_chunk = 0;
  };

  ZeroOptions options_;
  std::shared_ptr<ZeroUnits> units_;  // the gradient hooks and stage 3's nodes hold it weakly
  std::shared_ptr<nn::Module> model_;  // stage 3
  std::vector<Segment> segments_;
  std::vector<Tensor> pieces_;        // per segment: its view of its unit, updated by inner_
  std::vector<size_t> segments_in_group_;  // per parameter group
  std::unique_ptr<optim::Optimizer> inner_;
  bool reduced_ = false;  // clip_grad_norm reduced this step's gradients already
  int64_t steps_ = 0;
};

}  // namespace mg::parallel
