// train/run.h — a training run, as `multigrad train` runs it on one process or rank: its layout
// (train/parallelize.h), optimizer and learning-rate schedule, the epochs of train_steps with
// their evaluations, the checkpoints it writes and the one it resumes from, the --metrics file,
// and what it reports at the end. It says what happens through a RunLog (train/log.h).
//
// Reproducibility: the initial parameters come from mg::manual_seed(--seed), and the order of
// the training examples in epoch e from (seed, e) alone (data::RandomSampler), never from the
// worker count. A checkpoint holds the model (parameters and buffers), the optimizer state,
// the step and the global RNG state; `epoch-<E>.safetensors` is written after epoch E, so a
// resumed run replays epochs E+1... exactly as an uninterrupted one would, bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "multigrad/parallel/comm/communicator.h"
#include "multigrad/parallel/data/ddp.h"
#include "multigrad/parallel/timeline.h"
#include "multigrad/train/log.h"
#include "multigrad/train/options.h"
#include "multigrad/train/setup.h"
#include "multigrad/train/step.h"

namespace mg::train {

// What one process or rank reports at the end.
struct RunReport {
  Totals test;
  int64_t context = 0;  // --model gpt: tokens per example
  double tokens_per_byte = 1;  // --model gpt: of the validation text
  double flops_per_token = 0;  // --model gpt: nn::GPT::flops_per_token
  double samples_per_s = 0;
  std::string params_sha256;
  std::optional<parallel::DDPStats> ddp;
  std::optional<double> zero_comm_ms_per_step;  // --parallel zero1, zero2, zero3
  std::optional<double> tp_comm_ms_per_step;    // tp, a mesh's tp
  std::optional<std::pair<double, int64_t>> loss_scale;  // --precision fp16: the last, and the steps skipped
  std::optional<std::pair<double, double>> bubble;  // pipeline: measured, formula
  std::string bubble_formula;                       // pipeline: the formula, as text
  std::vector<parallel::TimelineEvent> trace;        // the last step's, with --trace
  std::optional<int64_t> ledger_entries;             // --ledger: the entries of its step (main rank)
};

// Trains `net` (built from the seed, not yet moved) on `devices` — DataParallel's devices, or the
// one device of this process or rank, or the pipeline's stage devices — and evaluates it. Only the
// main process or rank 0 tells `log` (may be null), writes metrics and checkpoints; every rank of
// a run over ranks calls it with its communicator (`comm`: null for one process).
RunReport run(const RunOptions& o, const DataSets& data, std::shared_ptr<nn::Module> net,
              const std::vector<Device>& devices, parallel::Communicator* comm, RunLog* log);

}  // namespace mg::train
