// cli/schedule.cpp — `multigrad schedule`: a pipeline schedule (parallel/pipeline/schedule.h) drawn as a
// text timeline in unit time, one row per stage, then `key: value` lines: the simulated bubble
// fraction beside the formula's (p-1)/(v m+p-1), and the most micro-batches (with chunks:
// micro-batch chunks) in flight on stage 0 (the activations it holds). `--svg FILE` also writes
// the timeline as a picture (schedule.h's draw_svg), the bubble in its title. Arithmetic only: no
// device, no data. The output is assembled first and printed whole, so an error leaves stdout
// empty.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "multigrad/core/error.h"
#include "multigrad/parallel/pipeline/schedule.h"

namespace mg::cli {
namespace {

// The drawing has 2 (m + p - 1) columns and p rows: past this it is megabytes of text that
// nobody reads.
constexpr int kMaxCount = 1000;

struct ScheduleOptions {
  int stages = 0;
  int micro_batches = 0;
  std::string schedule = "1f1b";
  int chunks = 0;  // 0: 1, or 2 for interleaved
  std::string svg;  // a path: the timeline as SVG too
};

// A whole number from 1 to kMaxCount, with a message that says which bound was crossed.
CLI::Validator count_check() {
  const std::string range = "1.." + std::to_string(kMaxCount);
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "expected a whole number, got '" + text + "'";
        if (value < 1) return "must be at least 1, got " + text;
        if (value > kMaxCount) return "must be at most " + std::to_string(kMaxCount) + ", got " + text;
        return "";
      },
      range);
}

std::string fixed4(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", value);
  return text;
}

void run_schedule(const ScheduleOptions& o) {
  const bool interleaved = o.schedule == "interleaved";
  MG_CHECK(o.chunks == 0 || interleaved, "--chunks ", o.chunks, " is for --schedule interleaved (got --schedule ",
           o.schedule, ")");
  const int v = o.chunks != 0 ? o.chunks : interleaved ? 2 : 1;
  MG_CHECK(!interleaved || o.micro_batches % o.stages == 0, "--micro-batches ", o.micro_batches,
           " is not a multiple of --stages ", o.stages, " (interleaved takes the micro-batches in rounds of p)");
  MG_CHECK(v * o.micro_batches <= kMaxCount, "--chunks ", v, " x --micro-batches ", o.micro_batches,
           " is more than the ", kMaxCount, " forwards per stage that are drawn");
  const parallel::Timeline timeline =
      parallel::simulate(parallel::make_schedule(o.schedule, o.stages, o.micro_batches, v));
  std::ostringstream heading;
  heading << o.schedule << ": " << o.stages << " stages, " << o.micro_batches << " micro-batches";
  if (v > 1) heading << ", " << v << " chunks per stage";
  std::ostringstream bubble;
  bubble << fixed4(timeline.bubble_fraction) << (v > 1 ? " (formula (p-1)/(v m+p-1) = " : " (formula (p-1)/(m+p-1) = ")
         << fixed4(parallel::formula_bubble(o.stages, o.micro_batches, v)) << ")";
  std::ostringstream out;
  out << heading.str() << ", ";
  const char* cells = v > 1 ? "F3.1/B3.1: forward/backward of micro-batch 3 through chunk 1"
                            : "F3/B3: forward/backward of micro-batch 3";
  out << timeline.slots[0].size() << " slots (" << cells << ", .: idle)\n";
  out << parallel::draw(timeline) << "bubble_fraction: " << bubble.str() << "\n"
      << "peak_activations: " << timeline.peak_activations << (v > 1 ? " chunks (stage 0)\n" : " (stage 0)\n");
  if (!o.svg.empty()) {
    std::ofstream file(o.svg, std::ios::binary | std::ios::trunc);
    MG_CHECK(file, "--svg ", o.svg, ": cannot open it for writing");
    file << parallel::draw_svg(timeline, heading.str() + ": bubble " + bubble.str());
    file.close();
    MG_CHECK(file, "--svg ", o.svg, ": the write failed");
    out << "svg: " << o.svg << "\n";
  }
  std::cout << out.str();
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto options = std::make_shared<ScheduleOptions>();
  CLI::App* cmd = app.add_subcommand(
      "schedule", "Draw a pipeline schedule in unit time, with its bubble and stage 0's peak activations");
  cmd->add_option("--stages", options->stages, "pipeline stages (p)")->required()->check(count_check());
  cmd->add_option("--micro-batches", options->micro_batches, "micro-batches per global batch (m)")
      ->required()
      ->check(count_check());
  cmd->add_option("--schedule", options->schedule,
                  "gpipe (all forwards, then all backwards), 1f1b (PipeDream-flush) or interleaved "
                  "(Megatron's interleaved 1F1B: --chunks model chunks per stage)")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))
      ->capture_default_str();
  cmd->add_option("--chunks", options->chunks,
                  "model chunks per stage (virtual stages per device), for --schedule interleaved; default 2")
      ->check(count_check());
  cmd->add_option("--svg", options->svg, "also write the timeline as an SVG picture to this file");
  cmd->callback([options] { run_schedule(*options); });
}

}  // namespace mg::cli
