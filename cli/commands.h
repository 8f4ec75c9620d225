// cli/commands.h — the subcommands of `multigrad`, one file each.
//
// A command adds itself to the app and sets the callback that runs it. A command that fails
// throws (mg::Error, or a CLI::Error for bad arguments); main.cpp turns either into one line
// on stderr and a non-zero exit status.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>

#include "multigrad/core/error.h"

namespace mg::cli {

// Writes one line to stderr in one piece. std::cerr flushes after every <<, and under mpirun the
// ranks' output streams merge: a line written piece by piece can be cut by another rank's output.
template <class... Args>
void print_error_line(const Args&... args) {
  std::cerr << detail::str_cat(args..., "\n") << std::flush;
}

void add_devices_command(CLI::App& app);   // cli/devices.cpp
void add_train_command(CLI::App& app);     // cli/train.cpp
void add_eval_command(CLI::App& app);      // cli/eval.cpp
void add_schedule_command(CLI::App& app);  // cli/schedule.cpp
void add_generate_command(CLI::App& app);  // cli/generate.cpp
void add_predict_command(CLI::App& app);   // cli/predict.cpp

}  // namespace mg::cli
