// parallel/pipeline/pipeline.h — pipeline model parallelism: a Sequential cut into stages on devices, fed
// micro-batches by a schedule (schedule.h), one thread per stage (docs/design.md).
//
// Stages. Pipeline cuts the model at the given layer indices (or, by default, where the
// parameter counts come out most even) and moves stage s to devices[s]; the stages share the
// model's modules, so the model's parameters() are the pipeline's. With the interleaved schedule
// (PipelineOptions::chunks = v >= 2) the model is cut into p v pieces, the virtual stages, and
// piece j goes to devices[j mod p]: stage s runs pieces s, s + p, s + 2 p, ... (its chunks), and
// a micro-batch goes round the devices v times (schedule.h).
//
// A step. step(inputs, targets) cuts the batch into micro-batches (parallel/data/micro_batches.h)
// and runs the schedule: one thread per stage (parallel::run_ranks over the stage devices, or
// PipelineOptions::run_ranks, so stages talk through a Communicator's send and recv), each
// executing its action list:
//   forward k:  stage 0 reads micro-batch k's rows; a later stage receives the previous
//               stage's output as a fresh leaf that requires grad; the stage's forward is
//               recorded on that thread's tape and kept until backward k; the last stage
//               computes the loss, cross_entropy_flat scaled by (rows / batch rows) and
//               then by step()'s loss_scale (fp16's, optim/grad_scaler.h) unless it is 1;
//               batch rows are step()'s batch_rows when a data-parallel replica of the
//               pipeline trains on its part of a larger batch;
//   backward k: the last stage starts from its loss, the others from the gradient the next
//               stage sent for their output; a stage then sends its input leaf's gradient back.
// (With chunks, "stage" here reads "virtual stage": each chunk's forward and backward of each
// micro-batch are actions of their own.)
// Gradients accumulate into the parameters' .grad in micro-batch order on every stage, so with
// mg::set_deterministic(true) a step equals one device running `--grad-accum m` bit for bit.
// Activations cross devices by send/recv in every backend (a tensor is sent as a small shape
// header, then its data), so the same runtime serves one process (stage threads over the local
// backend, or NCCL's: run_ranks_nccl) or one process per stage (over the communicator given:
// MPI, or NCCL's nccl_world).
//
// Exchanges. A send over NCCL completes only once its receiver has posted the receive, and a
// rank's operations run in order, so in 1F1B's steady state — stage s sends activation k to
// s + 1 and then waits for gradient j from it, while s + 1 sends gradient j and then waits for
// activation k — two blocking sends would wait for each other. A send followed by a receive
// that schedule.h's find_exchanges() picks (from two different stages, or from one whose
// list has the counterparts adjacent too) runs as one exchange: Communicator::send_recv of the
// two headers, then of the two tensors, each pair's halves in flight together (Megatron's
// batched isend/irecv). Every other send or receive runs alone. simulate() runs each schedule
// with these exchanges under rendezvous, and GPipe, 1F1B and interleaved 1F1B run over
// rendezvous sends in the tests (run_ranks' LocalOptions::rendezvous_sends).
//
// Random draws (dropout). A step's stages draw on threads (or in processes) of their own, each
// from a generator that starts at the step's state (the caller's): stage s with Philox key
// seed + s * 0x9E3779B97F4A7C15 (stage 0 with the seed itself), so no two stages draw the same
// numbers (Megatron offsets each pipeline rank's seed likewise), and each stage's draws follow
// its schedule's order, whatever the other stages do meanwhile. After the step the caller's
// generator continues past the most blocks any stage drew — the same state on every rank of a
// pipeline of processes (one all-reduce of a count), so a checkpoint's state serves them all. So
// with dropout a step is reproducible, but not one device's `--grad-accum m`: one device draws
// micro-batch by micro-batch through every layer.
//
// Timeline. Every stage records each action's start and end (an exchange as one event, "send
// activation 3 + recv grad 1"); measured_bubble() is the fraction of stage time not spent in
// forward or backward (over every step so far), beside the formula (p-1)/(v m+p-1); events() (the
// last step's) feed the Chrome trace (parallel/timeline.h).
//
// Tied weights. A layer may multiply by another layer's weight (nn::TiedLinear: GPT's lm head by
// the token embedding's matrix). The weight is trained by the stage that holds its owner; when
// the user is another (virtual) stage, each step (1) the owner's rank sends the weight to the
// user's, where a leaf copy (the TiedLinear's stand-in) serves the step's forwards; (2) both
// sides keep their gradient of the weight per micro-batch — the owner's backward k runs with
// the weight's gradient set aside, so it holds micro-batch k's alone; (3) at the end the user
// sends its m gradients to the owner, which adds each micro-batch's two (user's + owner's, the
// sum one device's backward pass forms at the leaf) to the weight's gradient in micro-batch
// order, as `--grad-accum m` does. The tie keeps the bit-identity for m gradients of the weight's
// size held on each side until the step's end, and m + 1 transfers of that size per step.
// (Megatron instead all-reduces the two stages' summed gradients once per step: fewer bytes,
// but a sum in another order than one device's.)
//
// Errors, before any work: fewer layers than (virtual) stages, cut indices out of order, a batch
// with fewer rows than micro-batches, interleaving with one chunk or with m not a multiple of p.
// A stage that throws fails the step on every stage promptly (run_ranks' abort: nothing waits
// forever in a receive).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "multigrad/nn/layers.h"
#include "multigrad/optim/optimizer.h"
#include "multigrad/parallel/comm/communicator.h"
#include "multigrad/parallel/pipeline/schedule.h"
#include "multigrad/parallel/timeline.h"

namespace mg::parallel {

// Runs fn on one thread per device, rank i on devices[i]: run_ranks (comm/local.h), run_ranks_nccl
// (comm/nccl.h), or one of them with options.
using RunRanks =
    std::function<void(const std::vector<Device>& devices, const std::function<void(Communicator& comm)>& fn)>;

struct PipelineOptions {
  std::string schedule = "1f1b";  // or "gpipe", or "interleaved" (with chunks >= 2)
  int micro_batches = 4;          // interleaved: a multiple of the stages
  int chunks = 1;                 // model chunks per stage (virtual stages per device): interleaved only
  // Layer indices where (virtual) stages 1..p v-1 begin (p v - 1 increasing values in
  // (0, layers)); empty: balanced by parameter count.
  std::vector<size_t> cuts{};
  std::chrono::milliseconds timeout{300'000};
  // One process: how the stage threads are started, and with them the backend they talk over;
  // empty: run_ranks (the local backend). Unused with a communicator given.
  RunRanks run_ranks{};
  // The last stage's mean loss of a micro-batch's output against its targets, and the classes the
  // output predicts; empty: cross_entropy_flat and argmax over the last dimension (another: a
  // vocabulary-parallel head's, parallel/tensor/tensor_parallel.h).
  std::function<Tensor(const Tensor& output, const Tensor& targets)> loss{};
  std::function<Tensor(const Tensor& output)> predict{};
};

// The loss and accuracy counts of one step's micro-batches.
struct PipelineStepResult {
  double loss_sum = 0;      // sum over examples of their (unscaled) cross-entropy
  int64_t correct = 0;      // predictions equal to their target
  int64_t samples = 0;      // examples (rows)
  int64_t predictions = 0;  // targets: samples, or a language model's rows x positions
};

class Pipeline {
 public:
  // One process: stage s on devices[s], a thread each.
  Pipeline(std::shared_ptr<nn::Sequential> model, std::vector<Device> devices, PipelineOptions options = {});
  // One process per stage (every rank of `comm` builds the same model and calls this): this
  // process runs stage comm.rank() on comm.device(), where the whole model is kept (the other
  // stages' layers take no part until synchronize_parameters()). `comm` must outlive it.
  // Its optimizer steps this stage's parameters only (the others have no gradient here), so a
  // checkpoint takes the state through synchronize_optimizer_state().
  Pipeline(std::shared_ptr<nn::Sequential> model, Communicator& comm, PipelineOptions options = {});

  // One forward and backward of the whole batch (gradients left in the parameters' .grad for
  // the optimizer). inputs (B, ...) and Int64 targets (B) for logits (B, C), or (B, T) for a
  // language model's (B, T, V) (cross_entropy_flat), on any device. `loss_scale`: the loss is
  // multiplied by it before backward (GradScaler::scale's factor); the result reports it unscaled.
  // `batch_rows`: the rows of the batch that inputs are a part of (a data-parallel replica's
  // share: each micro-batch's loss counts rows / batch_rows of it); 0: inputs' own rows.
  PipelineStepResult step(const Tensor& inputs, const Tensor& targets, double loss_scale = 1.0,
                          int64_t batch_rows = 0);

  // Inference through the stages one after another (no schedule, no grad): the model's output on
  // the last stage's device (one process per stage: the whole model on this process's device,
  // current after synchronize_parameters()).
  Tensor forward(const Tensor& inputs);
  // One process per stage: every stage's parameters and buffers from the rank that trains them
  // to every rank (a collective; before evaluating or saving). Nothing to do in one process.
  void synchronize_parameters();
  // One process per stage: the optimizer state of every stage's parameters, each from the rank
  // that trains them, on every rank (a collective; before saving). `params` in the optimizer's
  // order (Optimizer::params()), `mine` this rank's state_dict(): its entries for other stages'
  // parameters (stale, or loaded from a checkpoint and never stepped here) are replaced. In one
  // process: `mine` as it is (one optimizer steps every stage).
  optim::OptimizerState synchronize_optimizer_state(const std::vector<Tensor>& params, optim::OptimizerState mine);

  int stages() const { return int(devices_.size()); }
  int chunks() const { return options_.chunks; }
  // The model's pieces, one per virtual stage j (on devices()[j mod p]; j = s without chunks).
  const std::vector<std::shared_ptr<nn::Sequential>>& stage_modules() const { return stages_; }
  const std::vector<Device>& devices() const { return devices_; }
  // Layers [begin, end) of the model that each virtual stage runs.
  const std::vector<std::pair<size_t, size_t>>& stage_layers() const { return layers_; }

  // Over every step so far: the fraction of stage-time (p x each step's span) not spent in
  // forward or backward. One process per stage: a collective over the stages' figures.
  double measured_bubble();
  // The formula's bubble for this pipeline's p, m and v: (p - 1) / (v m + p - 1).
  double formula_bubble() const;
  // The last step's actions, one lane per stage (this process's stages).
  const std::vector<TimelineEvent>& events() const { return events_; }

 private:
  Pipeline(std::shared_ptr<nn::Sequential> model, std::vector<Device> devices, PipelineOptions options,
           Communicator* comm);
  void run_stage(Communicator& comm, const Schedule& schedule, const Tensor& inputs, const Tensor& targets,
                 double loss_scale, int64_t batch_rows, PipelineStepResult& result,
                 std::vector<TimelineEvent>& lane_events);

  std::shared_ptr<nn::Sequential> model_;
  Communicator* comm_ = nullptr;  // one process per stage: this process's
  std::vector<Device> devices_;
  PipelineOptions options_;
  std::vector<std::shared_ptr<nn::Sequential>> stages_;  // per virtual stage
  std::vector<std::pair<size_t, size_t>> layers_;
  // A TiedLinear in virtual stage `user` whose weight virtual stage `owner` holds ("Tied weights").
  struct Tie {
    std::shared_ptr<nn::TiedLinear> linear;
    int owner, user;
  };
  std::vector<Tie> ties_;
  std::vector<TimelineEvent> events_;
  double busy_seconds_ = 0;   // in forwards and backwards, all stages, all steps
  double stage_seconds_ = 0;  // p x each step's span, summed
};

// Where stages 1..p-1 begin so that the largest stage's parameter count is as small as it can be
// (each stage at least one layer). Throws when the model has fewer layers than stages.
std::vector<size_t> balanced_cuts(const nn::Sequential& model, int stages);

}  // namespace mg::parallel
