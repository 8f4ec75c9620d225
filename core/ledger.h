// core/ledger.h — the CUDA ledger's controls, and the training-step phases its entries carry.
//
// The ledger is the simulated build's record of the CUDA work a process asks for: every kernel
// launch, cuBLAS and cuDNN call, NCCL call, copy, allocation and host synchronisation, one JSON
// object per line (sim/ledger.h; docs/simulator.md, "The ledger"). Only the simulated build
// (-DMG_CUDA_SIM=ON) keeps one: the simulator is the CUDA runtime there, so nothing escapes it.
// `multigrad train --ledger FILE --ledger-step N` writes one step's; MG_CUDA_SIM_LEDGER=FILE in the
// environment writes everything from the process's first CUDA call.
#pragma once

#include <cstdint>
#include <string>

namespace mg {

// Whether this build keeps a ledger (the simulated CUDA build).
bool cuda_ledger_available();
// Starts writing the ledger to `path` (replacing it). Throws naming the path when it cannot be
// opened, and in a build without the simulator, saying which build has one.
void cuda_ledger_start(const std::string& path);
// Stops writing; returns the number of entries written.
int64_t cuda_ledger_stop();

// What the recorded step trained, written as the ledger's "step" entry for a cost model
// (sim/cost_model.h): its number, its tokens (0: not a language model), the model's training
// FLOPs per token, the precision; the entry also says whether kernels ran (record-only mode).
struct LedgerStep {
  int64_t step = 0;
  int64_t tokens = 0;
  double flops_per_token = 0;
  std::string precision = "fp32";
};
void cuda_ledger_note_step(const LedgerStep& s);

// The part of a training step the calling thread is in while a StepPhase lives ("forward",
// "backward", "clip", "optimizer", ...; a string literal, kept as a pointer): the ledger's
// entries made on this thread carry it. Nested, the inner one holds until it ends. Costs a
// thread-local write.
class StepPhase {
 public:
  explicit StepPhase(const char* name);
  ~StepPhase();
  StepPhase(const StepPhase&) = delete;
  StepPhase& operator=(const StepPhase&) = delete;

 private:
  const char* previous_;
};
// The calling thread's phase, or null outside any.
const char* current_step_phase();

}  // namespace mg
