// core/ledger.cpp — core/ledger.h: in the simulated build, calls into sim/ledger.h; elsewhere the
// phases are kept (current_step_phase) and the ledger is refused.
#include "multigrad/core/ledger.h"

#include "multigrad/core/error.h"

#if MG_CUDA_SIM
#include "multigrad/sim/ledger.h"
#endif

namespace mg {
namespace {

// The calling thread's phase: in the simulated build the ledger's own context, which its entries
// read; elsewhere a thread-local of its own.
const char*& phase_slot() {
#if MG_CUDA_SIM
  return sim::ledger::context().phase;
#else
  thread_local const char* phase = nullptr;
  return phase;
#endif
}

}  // namespace

bool cuda_ledger_available() {
#if MG_CUDA_SIM
  return true;
#else
  return false;
#endif
}

void cuda_ledger_start(const std::string& path) {
#if MG_CUDA_SIM
  const std::string error = sim::ledger::start(path);
  MG_CHECK(error.empty(), "the CUDA ledger: ", error);
#else
  MG_CHECK(false, "the CUDA ledger (", path,
           ") is kept by the simulated CUDA build only (cmake -DMG_CUDA_SIM=ON, as make test builds build-sim/)");
#endif
}

int64_t cuda_ledger_stop() {
#if MG_CUDA_SIM
  return sim::ledger::stop();
#else
  return 0;
#endif
}

void cuda_ledger_note_step(const LedgerStep& s) {
#if MG_CUDA_SIM
  sim::ledger::record_step(s.step, s.tokens, s.flops_per_token, s.precision);
#else
  (void)s;
#endif
}

StepPhase::StepPhase(const char* name) : previous_(phase_slot()) { phase_slot() = name; }

StepPhase::~StepPhase() { phase_slot() = previous_; }

const char* current_step_phase() { return phase_slot(); }

}  // namespace mg
