// parallel/data/ddp.h — DistributedDataParallel: one model replica per rank, gradients averaged by
// all-reduce while backward is still running (docs/design.md).
//
// What a step does, as in PyTorch:
//   construction: every rank checks that all ranks hold the same parameters (names, shapes,
//     dtypes; an error names the first difference), then takes rank 0's parameters and buffers
//     (broadcast), so the replicas start identical. The gradients are laid out in buckets:
//     parameters in reverse registration order (backward produces the last layer's gradients
//     first), a bucket closing once it holds bucket_cap_mb (the first one first_bucket_mb, so
//     that communication starts early); one dtype per bucket.
//   forward: rank 0's buffers are broadcast (BatchNorm statistics), the module runs, and the
//     parameters that the output does not depend on are found (an error naming the first one,
//     unless find_unused_parameters: then they count as ready with a zero gradient).
//   backward: each parameter's gradient destination (autograd/tape.h) is its slot in a bucket,
//     so its gradient is written there (linear and conv2d compute their weights' gradients
//     there; other ops' gradients are copied in). As soon as a parameter's gradient is final (autograd's on_grad_ready
//     hook) it counts as ready; a full bucket starts its all-reduce asynchronously — buckets
//     always start in order, so every rank issues the same collectives — while backward goes on
//     computing earlier layers' gradients. When the last bucket has started, the hook waits for
//     all of them; each parameter's .grad is then a view of its bucket holding the reduced
//     gradient (PyTorch's gradient_as_bucket_view: no copy back), before backward() returns.
//     A group of one rank starts no all-reduce: its buckets already hold the result.
//   no_sync(): in its scope forwards prepare no reduction: gradients accumulate locally, and the
//     first backward after it all-reduces the accumulated sum (gradient accumulation).
//
// Equivalence with one device. With mg::set_deterministic(true) the all-reduce sums in rank
// order, so with reduce_op = Sum and each rank's loss scaled by its share of the global batch
// (what `multigrad train` does), the gradients are bit-identical to accumulating the ranks'
// micro-batches in order on one device. (A parameter used twice in one forward gets two
// gradient terms per micro-batch, summed in another order: the equivalence is within rounding
// there.)
//
// Lifetimes: the communicator must outlive the DDP object; build the optimizer from the DDP's
// (or the module's) parameters after constructing it, and move the module to comm.device()
// before.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "multigrad/nn/module.h"
#include "multigrad/parallel/comm/communicator.h"
#include "multigrad/parallel/timeline.h"

namespace mg::parallel {

struct DDPOptions {
  double bucket_cap_mb = 25;            // MiB of gradients per bucket
  double first_bucket_mb = 1;           // the first bucket's cap: the last layers start early
  bool find_unused_parameters = false;  // parameters the output does not use: zero, not an error
  bool broadcast_buffers = true;        // rank 0's buffers to every rank at each forward
  // Avg is PyTorch's. Sum leaves the scaling to the caller: each rank scales its loss by its share
  // of the global batch, which is exact for any split (see the header comment).
  ReduceOp reduce_op = ReduceOp::Avg;
};

// Totals over the backward passes that all-reduced, in milliseconds.
struct DDPStats {
  int64_t steps = 0;
  double forward_ms = 0;   // inside forward()
  double backward_ms = 0;  // from the end of forward() to the reduced gradients in place (so the loss too)
  double comm_ms = 0;      // the buckets' all-reduces, from start to end on the backend
  double hidden_ms = 0;    // the part of comm_ms before the last gradient was ready
  // The fraction of communication hidden behind backward's computation.
  double overlap() const { return comm_ms > 0 ? hidden_ms / comm_ms : 0; }
};

class Reducer;

class DistributedDataParallel : public nn::Module {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, Communicator& comm, DDPOptions options = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& input) override;
  std::string name() const override;
  nn::Module& module() const { return *module_; }

  // In this guard's scope forward prepares no all-reduce (see the header comment).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  const DDPStats& stats() const;
  // The last all-reduced step on this rank's lanes: "rank r" (forward, then backward: from the
  // end of forward to the reduced gradients in place) and "rank r all-reduce" (each bucket).
  const std::vector<TimelineEvent>& last_step_events() const;
  // The buckets in launch order, each as its parameters' dotted names (relative to module()).
  std::vector<std::vector<std::string>> bucket_names() const;

 private:
  std::shared_ptr<nn::Module> shallow_copy() const override;

  std::shared_ptr<nn::Module> module_;
  Communicator& comm_;
  DDPOptions options_;
  std::shared_ptr<Reducer> reducer_;  // the gradient hooks hold it weakly
  bool sync_ = true;                  // false inside no_sync()
};

}  // namespace mg::parallel
