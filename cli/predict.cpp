// cli/predict.cpp — `multigrad predict LEDGER`: the predicted H100 time of a ledger that the
// simulated build wrote (`multigrad train --ledger`, or MG_CUDA_SIM_LEDGER): by kernel family,
// then the step's totals, tokens/s and MFU (sim/cost_model.h). Arithmetic on the file only, so
// any build predicts any ledger. Every time it prints is labelled predicted.
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "multigrad/sim/cost_model.h"

namespace mg::cli {

void add_predict_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "predict", "predict an H100's time for a CUDA ledger (multigrad train --ledger in the simulated build)");
  cmd->add_option("ledger", *path, "the ledger: one JSON object per line")->required()->check(CLI::ExistingFile);
  cmd->callback([path] { std::cout << sim::cost::report(sim::cost::predict_file(*path)) << std::flush; });
}

}  // namespace mg::cli
