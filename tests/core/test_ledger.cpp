// tests/core/test_ledger.cpp — core/ledger.h on the CPU build: step phases nest and end, and the
// CUDA ledger, which only the simulated build keeps, is refused naming that build
// (tests/cuda/test_cuda_ledger.cpp runs the ledger itself on the simulator).
#include <catch2/catch.hpp>

#include "multigrad/core/ledger.h"
#include "test_util.h"

using namespace mg;

TEST_CASE("StepPhase: the innermost phase holds until it ends, then the outer one again", "[core][ledger]") {
  REQUIRE(current_step_phase() == nullptr);
  {
    const StepPhase forward("forward");
    CHECK(std::string(current_step_phase()) == "forward");
    {
      const StepPhase metrics("metrics");
      CHECK(std::string(current_step_phase()) == "metrics");
    }
    CHECK(std::string(current_step_phase()) == "forward");
  }
  CHECK(current_step_phase() == nullptr);
}

TEST_CASE("cuda_ledger_start: outside the simulated build, an error naming the file and the build that keeps one",
          "[core][ledger]") {
  if (cuda_ledger_available()) return;  // the simulated build: tests/cuda/test_cuda_ledger.cpp
  mg::test::require_error([] { cuda_ledger_start("step.jsonl"); }, {"step.jsonl", "-DMG_CUDA_SIM=ON"});
  CHECK(cuda_ledger_stop() == 0);
}
