// core/ledger.cpp — core/ledger.h: in the simulated build, calls into sim/ledger.h; elsewhere the
// phases are kept (current_step_phase) and the ledger is refused.
#include "multigrad/core/ledger.h"

#include "multigrad/core/error.h"

#if MG_CUDA_SIM
#include "multigrad/sim/ledger.h"
#endif

namespace mg {
namespace {
thread_local const char* phase = nullptr;
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

StepPhase::StepPhase(const char* name) : previous_(phase) {
  phase = name;
#if MG_CUDA_SIM
  sim::ledger::context().phase = name;
#endif
}

StepPhase::~StepPhase() {
  phase = previous_;
#if MG_CUDA_SIM
  sim::ledger::context().phase = previous_;
#endif
}

const char* current_step_phase() { return phase; }

}  // namespace mg
