// cli/preflight.h — before `multigrad train` builds its model: whether its steps can fit in
// memory, from a lower bound on a step's peak (parallel/memory_model.h), so that a run that
// cannot fit is refused with the numbers instead of growing until the kernel's OOM killer ends it.
//
// A rank that holds the whole model (--parallel none, dp, ddp) holds during a step at least its
// parameters and optimizer state (K values per parameter: Adam 2, SGD with momentum 1) and the
// larger of the activations its forward keeps for its rows of a micro-batch and the gradients.
// Other modes split that (state and one micro-batch's activations) among their ranks in their own
// ways; the even split is a lower bound on the largest share. CPU devices share the host's memory:
// the process's CPU devices together are checked against MemAvailable; CUDA devices against
// their GPU's free memory (logical devices on one GPU together). `multigrad eval` checks its
// batches the same way once its model is built: their logits, against what is left; `multigrad
// generate` its model and the logits of one window before it builds the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "multigrad/core/device.h"
#include "multigrad/train/options.h"
#include "multigrad/train/setup.h"

namespace mg::cli {

struct StepPlan {
  int64_t params = 0;            // the model's parameters (float32)
  int state_per_param = 0;       // optimizer values per parameter
  int64_t activation_bytes = 0;  // a lower bound for one rank's rows of one micro-batch (replicated),
                                 // or for a whole micro-batch (split)
  std::string activations_of;    // what they are of: "4 sequences of 1024 tokens"
  int64_t ranks = 1;             // that share the work
  bool replicated = true;        // each rank holds the whole model and state
  std::vector<Device> devices_here;  // this process's devices among the ranks
  // false: inference (eval, generate): no gradients and no optimizer state; `params` counts only
  // parameters not yet allocated (0 once the model is built).
  bool training = true;
  std::string remedy;  // inference: what to change when it cannot fit ("pass a smaller --batch-size")
};

// The least one rank holds during a step (the file comment).
int64_t step_bytes_per_rank(const StepPlan& plan);

// The bytes the host can give: /proc/meminfo's MemAvailable, or MG_TEST_MEMORY_AVAILABLE_MB when
// set (a test hook).
int64_t available_host_bytes();

// Throws, naming the estimate, its parts, the memory there is and what to change, when this
// process's devices cannot hold their ranks' steps.
void check_step_fits(const StepPlan& plan);

// The plan of a `multigrad train` run, from sizes alone: on `devices` (this process's; one rank per
// process when `per_process`).
StepPlan step_plan(const train::RunOptions& o, const train::DataSets& data, const std::vector<Device>& devices,
                   bool per_process);

}  // namespace mg::cli
