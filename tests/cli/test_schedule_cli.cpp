// tests/cli/test_schedule_cli.cpp — `multigrad schedule`, run as a user would: the built binary
// (MG_CLI_PATH) through the shell; its whole output for a small case, its `key: value` lines,
// and bad flags.
#include <map>
#include <string>
#include <vector>

#include "cli/run_cli.h"
#include "test_util.h"

namespace {

using mg::test::CliResult;
using mg::test::lines;
using mg::test::run_cli;

using mg::test::contains;

// The "key: value" lines of the output (the value is the rest of the line).
std::map<std::string, std::string> key_values(const std::string& out) {
  std::map<std::string, std::string> values;
  for (const std::string& line : lines(out)) {
    const size_t colon = line.find(": ");
    if (colon != std::string::npos && line.find(' ') == colon + 1) values[line.substr(0, colon)] = line.substr(colon + 2);
  }
  return values;
}

// A failed run: non-zero exit, nothing on stdout, one line on stderr containing every part.
void require_one_line_error(const CliResult& r, const std::vector<std::string>& parts) {
  {
    INFO("stdout: " << r.out);
    CHECK(r.out.empty());
  }
  mg::test::require_one_line_error(r, parts);
}

}  // namespace

TEST_CASE("schedule cli: 1f1b with 2 stages and 3 micro-batches, the whole output", "[cli][schedule]") {
  const CliResult r = run_cli("schedule --stages 2 --micro-batches 3 --schedule 1f1b");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  CHECK(r.out ==
        "1f1b: 2 stages, 3 micro-batches, 8 slots (F3/B3: forward/backward of micro-batch 3, .: idle)\n"
        "stage 0 | F0 F1 .  B0 F2 B1 .  B2\n"
        "stage 1 | .  F0 B0 F1 B1 F2 B2 .\n"
        "bubble_fraction: 0.2500 (formula (p-1)/(m+p-1) = 0.2500)\n"
        "peak_activations: 2 (stage 0)\n");
}

TEST_CASE("schedule cli: bubble_fraction and peak_activations for gpipe and 1f1b, 4 stages, 8 micro-batches",
          "[cli][schedule]") {
  for (const std::string name : {"gpipe", "1f1b"}) {
    const CliResult r = run_cli("schedule --stages 4 --micro-batches 8 --schedule " + name);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.status == 0);
    const std::map<std::string, std::string> values = key_values(r.out);
    REQUIRE(values.count("bubble_fraction") == 1);
    REQUIRE(values.count("peak_activations") == 1);
    CHECK(std::stod(values.at("bubble_fraction")) == Approx(3.0 / 11.0).margin(1e-4));
    CHECK(values.at("bubble_fraction") == "0.2727 (formula (p-1)/(m+p-1) = 0.2727)");
    CHECK(std::stoi(values.at("peak_activations")) == (name == "gpipe" ? 8 : 4));
    // A title, one row per stage, the two summary lines.
    const std::vector<std::string> out = lines(r.out);
    REQUIRE(out.size() == 1 + 4 + 2);
    CHECK(out[0].rfind(name + ": 4 stages, 8 micro-batches, 22 slots", 0) == 0);
    for (int s = 0; s < 4; ++s) CHECK(out[size_t(1 + s)].rfind("stage " + std::to_string(s) + " | ", 0) == 0);
  }
}

TEST_CASE("schedule cli: interleaved with 2 stages, 2 micro-batches and 2 chunks, the whole output",
          "[cli][schedule]") {
  const CliResult r = run_cli("schedule --stages 2 --micro-batches 2 --schedule interleaved --chunks 2");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  CHECK(r.out ==
        "interleaved: 2 stages, 2 micro-batches, 2 chunks per stage, 10 slots (F3.1/B3.1: forward/backward of "
        "micro-batch 3 through chunk 1, .: idle)\n"
        "stage 0 | F0.0 F1.0 F0.1 F1.1 .    B0.1 .    B1.1 B0.0 B1.0\n"
        "stage 1 | .    F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0 .\n"
        "bubble_fraction: 0.2000 (formula (p-1)/(v m+p-1) = 0.2000)\n"
        "peak_activations: 4 chunks (stage 0)\n");
  // --chunks defaults to 2 with interleaved.
  CHECK(run_cli("schedule --stages 2 --micro-batches 2 --schedule interleaved").out == r.out);
}

TEST_CASE("schedule cli: interleaved shrinks the bubble v times, 4 stages, 8 micro-batches",
          "[cli][schedule]") {
  for (int v : {2, 4}) {
    const CliResult r = run_cli("schedule --stages 4 --micro-batches 8 --schedule interleaved --chunks " +
                                std::to_string(v));
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.status == 0);
    const std::map<std::string, std::string> values = key_values(r.out);
    CHECK(std::stod(values.at("bubble_fraction")) == Approx(3.0 / (8.0 * v + 3.0)).margin(1e-4));
    // Stage 0 warms up with 2 (p - 1) + (v - 1) p chunk-forwards, then one more.
    CHECK(values.at("peak_activations") == std::to_string(6 + (v - 1) * 4 + 1) + " chunks (stage 0)");
  }
}

TEST_CASE("schedule cli: --schedule defaults to 1f1b", "[cli][schedule]") {
  const CliResult r = run_cli("schedule --stages 3 --micro-batches 5");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.rfind("1f1b: 3 stages, 5 micro-batches", 0) == 0);
  CHECK(key_values(r.out).at("peak_activations") == "3 (stage 0)");
}

TEST_CASE("schedule cli: bad flags are one clear line and a non-zero exit", "[cli][schedule]") {
  require_one_line_error(run_cli("schedule --stages 0 --micro-batches 4"), {"multigrad schedule: ", "--stages", "at least 1", "0"});
  require_one_line_error(run_cli("schedule --stages 2 --micro-batches -3"), {"--micro-batches", "at least 1", "-3"});
  require_one_line_error(run_cli("schedule --stages two --micro-batches 4"), {"--stages", "two"});
  require_one_line_error(run_cli("schedule --stages 2.5 --micro-batches 4"), {"--stages", "2.5"});
  require_one_line_error(run_cli("schedule --stages 1001 --micro-batches 4"), {"--stages", "at most 1000", "1001"});
  require_one_line_error(run_cli("schedule --stages 2 --micro-batches 4 --schedule zero-bubble"),
                         {"--schedule", "zero-bubble"});
  require_one_line_error(run_cli("schedule --micro-batches 4"), {"--stages", "required"});
  require_one_line_error(run_cli("schedule --stages 2"), {"--micro-batches", "required"});
  require_one_line_error(run_cli("schedule --stages 2 --micro-batches 4 --chunks 2"),
                         {"--chunks 2 is for --schedule interleaved", "--schedule 1f1b"});
  require_one_line_error(run_cli("schedule --stages 2 --micro-batches 3 --schedule interleaved"),
                         {"--micro-batches 3 is not a multiple of --stages 2"});
  require_one_line_error(run_cli("schedule --stages 1 --micro-batches 3 --schedule interleaved"), {"stages=1"});
  require_one_line_error(run_cli("schedule --stages 2 --micro-batches 4 --schedule interleaved --chunks 1"),
                         {"chunks=1"});
  require_one_line_error(run_cli("schedule --stages 2 --micro-batches 600 --schedule interleaved"),
                         {"--chunks 2 x --micro-batches 600", "1000"});
}
