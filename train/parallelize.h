// train/parallelize.h — one model laid out over the ranks of a run, as picotron and torchtitan
// compose the parallelisms: tensor parallelism first (each rank keeps its shards of the layers),
// then pipeline stages (each stage a run of layers), then data parallelism over what is left
// (DataParallel, DDP, or ZeRO in the optimizer). One call each into parallel/.
//
// Which ranks split what comes as communicators (`Groups`): a mesh's dimensions (mesh_groups),
// or one communicator in one role. A rank that holds no group runs alone, on `devices`: one
// device, DataParallel's devices, or a pipeline's stage devices as threads of this process.
//
//   const Plan plan{.data = "ddp"};
//   auto m = parallelize({net}, {comm.device()}, mesh_groups(mesh, comm), plan);  // unique_ptr
//   auto optimizer = make_optimizer(*m, plan, groups_of, factory);  // zero1..3 wrap the factory's
//   train_step(*m, *optimizer, batch, {.grad_accum = 4}, metrics, step);  // train/step.h
//
// The batch is cut as parallel/data/micro_batches.h cuts it, and every piece's mean loss is scaled by
// its share of the batch, so with --deterministic collectives every layout ends bit-identical to
// the same batch on one device with --grad-accum (tests/train/).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "multigrad/core/device.h"
#include "multigrad/nn/module.h"
#include "multigrad/optim/grad_scaler.h"
#include "multigrad/optim/optimizer.h"
#include "multigrad/parallel/comm/communicator.h"
#include "multigrad/parallel/comm/counting.h"
#include "multigrad/parallel/data/data_parallel.h"
#include "multigrad/parallel/data/ddp.h"
#include "multigrad/parallel/mesh.h"
#include "multigrad/parallel/pipeline/pipeline.h"
#include "multigrad/parallel/data/zero.h"

namespace mg::train {

// A model as the step feeds it.
struct Model {
  std::shared_ptr<nn::Module> net;
  bool flatten_input = false;  // the MLP takes (N, 784), the loader gives (N, 1, 28, 28)
};

// The ranks that split the work; null where nobody does.
struct Groups {
  parallel::Communicator* world = nullptr;  // every rank of the run
  parallel::Communicator* dp = nullptr;     // split each batch (DDP, ZeRO, pipelines side by side)
  parallel::Communicator* tp = nullptr;     // split the layers
  parallel::Communicator* pp = nullptr;     // one pipeline stage each (null: stages as threads here)
};

// A mesh's dimensions named dp, tp and pp, in those roles; `world` is the mesh's communicator.
Groups mesh_groups(const parallel::DeviceMesh& mesh, parallel::Communicator& world);

// How the model is laid out.
struct Plan {
  // How each batch is split across data-parallel replicas: "none", "dp" (DataParallel over the
  // devices), "ddp" (DistributedDataParallel over groups.dp; with a pipeline, the pipelines'
  // gradients summed after each step), or "zero1", "zero2", "zero3" (make_optimizer's
  // ZeroOptimizer over groups.dp). Gradients are sums of the pieces' share-scaled losses.
  std::string data = "none";
  bool pipeline = false;            // stages over groups.pp, or one per device as threads
  parallel::PipelineOptions pipeline_options{};
  bool sequence_parallel = false;   // a GPT's tensor parallelism (Megatron's sequence parallelism)
  std::optional<double> bucket_cap_mb{};  // DDP's buckets, ZeRO's units (default 25 MiB)
  std::optional<optim::GradScalerOptions> loss_scaling{};  // fp16: dynamic loss scaling
};

// "zero1", "zero2" or "zero3".
bool sharded(const Plan& plan);

// One rank's (or one process's) part of the model, and what each mode needs to run a step of it.
// Mode-specific members are null where the mode is off.
struct ParallelModel {
  // tp's collectives are timed by this counter (tp_comm_ms_per_step). Declared before `model`, it
  // outlives the layers that keep a pointer to it.
  std::unique_ptr<parallel::CountingCommunicator> tp_counter;
  Model model;                                             // this rank's part: tp shards, or the whole
  Groups groups;                                           // groups.tp is the counter, if any
  std::shared_ptr<parallel::DataParallel> dp;              // data "dp"
  std::shared_ptr<parallel::DistributedDataParallel> ddp;  // data "ddp" without a pipeline
  std::shared_ptr<parallel::Pipeline> pipeline;            // plan.pipeline
  parallel::ZeroOptimizer* zero = nullptr;                 // data "zero1..3": set by make_optimizer
  std::shared_ptr<nn::Module> whole;                 // tp: the one-device model (current after model_state())
  std::shared_ptr<nn::Sequential> whole_layers;      // tp: its layers, named as the shards are
  parallel::Communicator* vocab = nullptr;           // a GPT's tp: logits are this rank's vocabulary columns
  std::optional<optim::GradScaler> scaler;           // plan.loss_scaling
  double tp_comm_ms = 0;                             // tp: its collectives' time in the steps so far
  int64_t tp_steps = 0;

  Tensor input(const Tensor& inputs) const { return model.flatten_input ? inputs.flatten(1) : inputs; }
  // Training forward, through DataParallel, DDP or zero3's sharded model if any.
  Tensor forward(const Tensor& inputs);
  // Evaluation forward: the module itself (DDP's would broadcast buffers while the other ranks
  // wait), through the stages when they are on several devices.
  Tensor predict(const Tensor& inputs);
  // The mean loss of the logits against the targets (a language model's over every position), and
  // the classes they predict; with a vocabulary-parallel head, over every tp rank's columns.
  Tensor loss(const Tensor& logits, const Tensor& targets) const;
  Tensor predicted(const Tensor& logits) const;
  // zero3: every rank gathers the whole model (until its next forward); a pipeline with a rank per
  // stage: every stage's parameters from the rank that trains them, on every rank. Collective.
  void gather_parameters();
  bool is_main() const { return groups.world == nullptr || groups.world->rank() == 0; }
  // Every rank evaluates with tensor parallelism (its forward is collective), else rank 0 alone.
  bool evaluates() const { return whole != nullptr || is_main(); }
  // The model as one device holds it: its state (tp: gathered into `whole`, collectively), and
  // loading such a state into this rank's part.
  nn::StateDict model_state() const;
  void load_model_state(const nn::StateDict& state);
  // The one-device model (tp: `whole`, current after model_state()).
  const nn::Module& one_device_model() const { return whole ? *whole : *model.net; }
  // The optimizer's state as one device's optimizer holds it (collective under ZeRO, tp and a
  // pipeline with a rank per stage), and such a state loaded into this rank's optimizer.
  optim::OptimizerState optimizer_state(optim::Optimizer& optimizer) const;
  void load_optimizer_state(optim::Optimizer& optimizer, optim::OptimizerState state);
  std::shared_ptr<nn::Sequential> tp_layers() const;
};

// Lays out `model` (built on the CPU from the run's seed, identical on every rank) over the
// groups: tensor parallelism over groups.tp, then pipeline stages, then DataParallel or DDP.
// Everything moves to `devices` (a rank's one device, DataParallel's, or the stage devices).
std::unique_ptr<ParallelModel> parallelize(Model model, const std::vector<Device>& devices, Groups groups,
                                           const Plan& plan);

// The optimizer of `m`'s parameters: `make` over `param_groups(parameters)`, or with ZeRO the
// ZeroOptimizer that shards `make`'s state over groups.dp (zero3 the layers' parameters too).
using ParamGroupsOf = std::function<std::vector<optim::ParamGroup>(std::vector<Tensor>)>;
using OptimizerOf = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;
std::unique_ptr<optim::Optimizer> make_optimizer(ParallelModel& m, const Plan& plan, const ParamGroupsOf& param_groups,
                                                 const OptimizerOf& make);

}  // namespace mg::train
