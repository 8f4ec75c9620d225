// parallel/zero.h — ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
// Training Trillion Parameter Models", 2020): data parallelism whose optimizer state is sharded
// across the ranks, over any Communicator.
//
// Flat buffers. The constructor moves every parameter into one flat buffer (registration order,
// padded with zeros to size x shard elements): each parameter becomes a view of it, as FSDP's
// flat parameters are, and its gradient is born in a second flat buffer of the same layout
// (autograd's gradient destinations, as DDP's buckets). Every rank holds the whole model and
// computes the gradients of its part of the batch, as with DDP; ZeroOptimizer::step() then, in
// place of DDP's all-reduce and a replicated update:
//   1. reduce-scatters the flat gradients: rank r receives the summed (reduce_op) gradient of its
//      shard, flat elements [r shard, (r + 1) shard);
//   2. updates its shard with the inner optimizer (SGD, Adam, AdamW from `make`), whose
//      parameters are the pieces of the parameters in the shard ("segments": views of the flat
//      parameters) and whose state is of those pieces only: 1/size of it per rank;
//   3. all-gathers the updated shards into the flat parameters, which the parameters view.
// Parameter groups carry over (a segment is in its parameter's group), so AdamW's weight decay on
// matrices only works as without sharding.
//
// Equivalence with one device. The updates are elementwise, so updating a segment gives the bits
// that updating the whole parameter gives; with mg::set_deterministic(true) reduce_scatter sums in
// rank order, the order DDP's all-reduce and --grad-accum use. So ZeRO-1 over N ranks ends
// bit-identical to DDP, and to one device accumulating the same N micro-batches.
//
// Memory per rank, P parameters of B bytes each, N ranks: the flat parameters and gradients
// (2 P B, as DDP's parameters and buckets), the shard's reduced gradient and a copy of the shard
// to all-gather from (2 P B / N), and the optimizer state (K P B / N for K state tensors per
// parameter: 1 for SGD with momentum, 2 for Adam). DDP holds K P B of optimizer state instead:
// ZeRO-1 saves K P B (1 - 1/N) - 2 P B / N (nothing for Adam on 2 ranks, P B on 4).
//
// Checkpoints. state_dict() gathers the shards (every rank must call it): it is the state an
// unsharded optimizer of the same kind over the same parameters would hold, so a checkpoint
// loads into another world size, or into a plain optimizer, and back; load_state_dict() takes
// such a state and keeps this rank's pieces.
//
// Every parameter needs a gradient at each step, on every rank (DDP's rule for unused
// parameters). All parameters must have one floating dtype, on comm.device(); build the
// optimizer after moving the model there (moving it later would move the parameters out of the
// flat buffer). The constructor broadcasts rank 0's parameters, so the replicas start identical.
// Lifetimes: the communicator must outlive the optimizer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "optim/optimizer.h"
#include "parallel/communicator.h"

namespace mg::parallel {

class ZeroOptimizer : public optim::Optimizer {
 public:
  // Builds the optimizer of one rank's shard from its parameter groups.
  using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

  ZeroOptimizer(std::vector<optim::ParamGroup> groups, Communicator& comm, const MakeOptimizer& make,
                ReduceOp reduce_op = ReduceOp::Avg);

  void step() override;
  optim::OptimizerState state_dict() const override;
  void load_state_dict(const optim::OptimizerState& state) override;
  double lr() const override { return inner_->lr(); }
  void set_lr(double lr) override { inner_->set_lr(lr); }

  // Elements of the flat parameter space this rank updates (the last rank's may be padding).
  int64_t shard_numel() const { return shard_; }
  // Steps taken, and the milliseconds their reduce-scatters and all-gathers took, waits included
  // (stage 1 overlaps none of it with backward).
  int64_t steps() const { return steps_; }
  double comm_ms() const { return comm_ms_; }

 private:
  // The part of parameter `param` in this rank's shard: its flat elements [offset, offset +
  // length), which are the shard's elements [in_shard, in_shard + length).
  struct Segment {
    size_t param = 0;
    int64_t offset = 0, length = 0, in_shard = 0;
  };

  // A parameter's elements in a flat buffer.
  Tensor slice_of(const Tensor& flat, size_t param) const;

  Communicator& comm_;
  ReduceOp reduce_op_;
  std::vector<int64_t> flat_offset_;  // per parameter
  int64_t shard_ = 0;                 // elements per rank; size x shard_ >= every parameter's
  std::vector<Segment> segments_;
  std::vector<size_t> segments_in_group_;  // per parameter group
  std::vector<Tensor> pieces_;             // per segment: its view of flat_params_, updated by inner_
  std::unique_ptr<optim::Optimizer> inner_;
  Tensor flat_params_, flat_grads_;   // (size x shard_): what the parameters and their gradients view
  Tensor shard_grad_, shard_params_;  // (shard_): the reduced gradient of this rank's shard; its copy to gather
  int64_t steps_ = 0;
  double comm_ms_ = 0;
};

}  // namespace mg::parallel
