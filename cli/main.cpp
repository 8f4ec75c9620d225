// cli/main.cpp — the `multigrad` command: parses the arguments, runs the chosen subcommand,
// and maps every failure to one line on stderr and a non-zero exit status (CLI11's codes for
// bad arguments, 1 for errors while running).
#include <exception>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace {

// CLI11's default failure message adds a second line pointing at --help; keep it to one.
std::string one_line_failure(const CLI::App*, const CLI::Error& e) {
  return std::string("multigrad: ") + e.what() + " (see --help)\n";
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

  mg::cli::add_devices_command(app);

  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) throw CLI::RequiredError("A subcommand");
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "multigrad: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
