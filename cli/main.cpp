// cli/main.cpp — the `multigrad` command: parses the arguments, runs the chosen subcommand,
// and maps every failure to one line on stderr and a non-zero exit status (CLI11's codes for
// bad arguments, 1 for errors while running: "multigrad <command>: <what went wrong>").
#include <csignal>
#include <exception>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace {

// "multigrad" or "multigrad <command>": who reports a failure.
std::string who(const CLI::App& app) {
  const auto ran = app.get_subcommands();
  return ran.empty() ? "multigrad" : "multigrad " + ran.front()->get_name();
}

// CLI11's default failure message adds a second line pointing at --help; keep it to one.
std::string one_line_failure(const CLI::App* app, const CLI::Error& e) {
  return who(*app) + ": " + e.what() + " (see --help)\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("multigrad: a from-scratch tensor engine for training on several devices",
               "multigrad");
  app.set_version_flag("--version", "multigrad " MG_VERSION);
  // One subcommand at most; none is checked after parsing so that an unknown word is reported
  // as itself (CLI11's require_subcommand would only say that a subcommand is required).
  app.require_subcommand(0, 1);
  app.failure_message(one_line_failure);

  // Under a file-size limit (ulimit -f) a write that passes it then fails with EFBIG, an error
  // naming the file, and the half-written temp file is removed; the signal would kill the process
  // mid-write and leave it behind.
  std::signal(SIGXFSZ, SIG_IGN);

  mg::cli::add_devices_command(app);
  mg::cli::add_train_command(app);
  mg::cli::add_eval_command(app);
  mg::cli::add_schedule_command(app);
  mg::cli::add_generate_command(app);
  mg::cli::add_predict_command(app);

  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) throw CLI::RequiredError("A subcommand");
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    mg::cli::print_error_line(who(app), ": ", e.what());
    return 1;
  }
  return 0;
}
