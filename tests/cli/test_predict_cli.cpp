// tests/cli/test_predict_cli.cpp — `multigrad predict`, run as a user would: a small ledger in a file
// predicted (every time labelled predicted), and files that are not ledgers refused in one line.
#include <fstream>
#include <string>

#include "cli/run_cli.h"
#include "io/io_test_util.h"
#include "test_util.h"

using mg::test::CliResult;
using mg::test::run_cli;

namespace {

std::string write(const mg::test::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("predict cli: a ledger's predicted time by family, and its step's tokens/s", "[cli][cost]") {
  mg::test::TempDir dir;
  const std::string ledger = write(
      dir, "step.jsonl",
      R"({"seq": 0, "event": "launch", "thread": 0, "phase": "backward", "family": "norm", "kernel": "k", )"
      R"("grid": [3, 1, 1], "block": [256, 1, 1], "device": 0, "stream": 1, "bytes": 50331648, "flops": 0})"
      "\n"
      R"({"seq": 1, "event": "step", "thread": 0, "phase": null, "step": 2, "tokens": 16384, )"
      R"("flops_per_token": 1e9, "precision": "bf16", "record_only": true})"
      "\n");
  const CliResult r = run_cli("predict " + ledger);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  CHECK(mg::test::contains(r.out, "no GPU ran this"));
  CHECK(mg::test::contains(r.out, "norm "));
  CHECK(mg::test::contains(r.out, "predicted_step_ms:"));
  CHECK(mg::test::contains(r.out, "underfilled_launches: 1"));
  CHECK(mg::test::contains(r.out, "predicted_tokens_per_s:"));
  CHECK(mg::test::contains(r.out, "recorded without running kernels"));
}

TEST_CASE("predict cli: a missing file, or one that is not a ledger, is one line naming it", "[cli][cost]") {
  mg::test::TempDir dir;
  const std::string bad = write(dir, "bad.jsonl", "{\"event\": \"launch\", \"grid\": [1, 1, 1]}\nnot json\n");
  mg::test::require_one_line_error(run_cli("predict " + bad), {"bad.jsonl:1", "'launch' entry without the fields"});
  mg::test::require_one_line_error(run_cli("predict " + dir.file("absent.jsonl")), {"absent.jsonl"});
  mg::test::require_one_line_error(run_cli("predict " + write(dir, "empty.jsonl", "")), {"empty.jsonl", "is empty"});
}
