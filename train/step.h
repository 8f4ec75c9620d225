// train/step.h — one optimizer step of a ParallelModel (train/parallelize.h) on one global batch,
// and evaluation.
//
// How a global batch of b examples is computed (parallel/data/micro_batches.h cuts every split):
//   none: K = grad_accum micro-batches, one after another;
//   dp:   K micro-batches one after another, each cut across the devices by DataParallel;
//   ddp:  cut across the N ranks of groups.dp; each rank's part cut into K micro-batches, all but
//         the last under no_sync(). The gradients are summed (reduce_op Sum), not averaged.
//   zero1: cut as ddp's; the rank's micro-batches accumulate locally, and the optimizer
//         (parallel::ZeroOptimizer) reduce-scatters the sum and updates the rank's shard.
//   zero2: cut as ddp's, all but the last micro-batch under the optimizer's no_sync(); the last
//         backward reduce-scatters each unit's gradients as soon as they are ready.
//   zero3: as zero2, the parameters sharded too: a layer's gathered around its forward and its
//         backward (the model runs through the optimizer's model()); before an evaluation, a
//         checkpoint or the digest every rank gathers them all (gather_parameters).
//   tp:   the layers split across groups.tp (parallel/tensor/tensor_parallel.h); every rank computes the
//         whole batch (K micro-batches) with its shards, and evaluates with the others;
//         checkpoints and the digest are of the gathered, one-device model.
//   dp x tp (a mesh): ddp's or zero's split across dp, each replica tp over its row of ranks
//         (ZeRO shards each rank's tp shards over its dp group).
//   pipeline: the batch (across a mesh's dp, this pipeline's part of it) cut into the pipeline's
//         micro-batches and run by its schedule (parallel/pipeline/pipeline.h), each stage possibly a tp
//         group; across dp the stages' gradients are then summed over the pipelines.
// Every piece's mean loss is scaled by (its size / b), so the gradients add up to the batch
// mean whatever the split; with deterministic collectives (rank-ordered sums) every layout ends
// bit-identical to grad_accum pieces on one device.
#pragma once

#include <cstdint>
#include <string>

#include "multigrad/data/data.h"
#include "multigrad/optim/optimizer.h"
#include "multigrad/train/parallelize.h"

namespace mg::train {

// A language model's predictions are per position: (B, T, V) logits against (B, T) next tokens.
// Every example has T of them, so a batch's mean over its positions weighs examples equally.
struct Totals {
  double loss_sum = 0;      // sum over examples of their (mean per position) loss
  int64_t correct = 0;      // predictions that were right
  int64_t predictions = 0;  // examples times positions
  int64_t samples = 0;
  double loss() const { return samples > 0 ? loss_sum / double(samples) : 0; }
  double accuracy() const { return predictions > 0 ? double(correct) / double(predictions) : 0; }
};

// Totals as the steps add them. The loss and correct-prediction sums of the pieces stay on their
// device (float64 and int64, added in the pieces' order: the host's double arithmetic, bit for
// bit), so adding waits for nothing; totals() reads them, one wait for the device.
class Metrics {
 public:
  // A piece's predicted classes, its targets and its mean loss (a one-element tensor).
  void add(const Tensor& predicted, const Tensor& targets, const Tensor& mean_loss);
  // Sums already on the host (a pipeline's step reports them so).
  void add(const Totals& host);
  Totals totals() const;

 private:
  Totals host_;                // examples and predictions (known from shapes), and host-added sums
  Tensor loss_sum_, correct_;  // on the device, once a piece was added
};

// The totals over every rank of `comm` (an all-reduce); as they are without one.
Totals sum_over_ranks(const Totals& mine, parallel::Communicator* comm);

// Forward and backward of this rank's pieces of one global batch (the file comment), leaving the
// gradients for the optimizer; adds those pieces' examples to `metrics`.
void run_batch(ParallelModel& m, const data::Batch& batch, int64_t grad_accum, Metrics& metrics);

// The gradients of this rank scaled to the global norm `max_norm` (optim/clip_grad.h's exact sum
// of squares, so every layout clips by the same bits): DDP's ranks each hold the whole reduced
// gradient; ZeRO's, a pipeline's and tensor parallelism's ranks hold parts and sum them
// (parallel::global_grad_norm), a parameter whole on every tp rank counted once.
void clip_gradients(ParallelModel& m, optim::Optimizer& optimizer, double max_norm);

struct StepOptions {
  int64_t grad_accum = 1;     // micro-batches per rank (a pipeline's are its options')
  double clip_grad_norm = 0;  // 0: no clipping
};

// One step: zero_grad, run_batch, clipping (of the unscaled gradients), the optimizer's step (with
// a loss scaler, unless a gradient overflowed on any rank, and the scale's update). A non-finite
// loss throws before the step, naming `step_number`, so the parameters stay as they were: that
// check reads the loss, the step's one wait for the device.
void train_step(ParallelModel& m, optim::Optimizer& optimizer, const data::Batch& batch, const StepOptions& options,
                Metrics& metrics, int64_t step_number);

// The held-out loss and accuracy of the loader's batches (eval mode, no graph). With tensor
// parallelism every rank calls it; otherwise the main rank (ParallelModel::evaluates).
Totals evaluate(ParallelModel& m, data::DataLoader& loader);

// SHA-256 over every parameter's raw bytes in parameters() order: equal digests mean
// bit-identical parameters.
std::string params_sha256(const nn::Module& net);
int64_t parameter_count(const nn::Module& net);

}  // namespace mg::train
