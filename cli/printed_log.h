// cli/printed_log.h — what a run says (train/log.h), printed: its lines on stdout, its warnings
// as one line on stderr, and the per-epoch progress of `multigrad train`.
//
// On a terminal, one bar per epoch redrawn in place with '\r' (at most every kRedrawSeconds, so
// printing never costs training time); otherwise (a pipe, a log file) a plain line each time
// another tenth of the epoch is done, so logs stay short and readable. Both show the running
// mean loss and accuracy over the epoch so far, samples/s and the time left in the epoch. "The
// epoch" is what the run trains of it: a run that --max-steps ends inside it, or one resumed
// inside it, counts toward its own last (first) step, and its epochs end at the one it ends in.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "multigrad/train/log.h"

namespace mg::cli {

class EpochProgress {
 public:
  static constexpr int64_t kPlainSteps = train::RunLog::kSums;  // plain lines when the ranks sum: every tenth

  EpochProgress(std::ostream& out, bool terminal, int64_t epoch, int64_t epochs, int64_t total_samples);
  // After each batch: `samples` done so far this epoch, and their mean loss and accuracy.
  void update(int64_t samples, double loss, double accuracy);
  // Ends the epoch's bar (a terminal's line is closed with '\n').
  void finish();

 private:
  void draw(int64_t samples, double loss, double accuracy, double seconds);

  std::ostream& out_;
  bool terminal_;
  int64_t epoch_, epochs_, total_;
  std::chrono::steady_clock::time_point start_;
  double last_draw_ = -1;  // seconds since start_ at the last redraw (terminal)
  int64_t tenths_shown_ = 0;  // tenths of the epoch already reported (plain lines)
};

// The CLI's RunLog: `command` names the command in warnings ("multigrad train: warning: ...").
class PrintedLog final : public train::RunLog {
 public:
  explicit PrintedLog(std::string command) : command_(std::move(command)) {}
  void line(const std::string& text) override;
  void warning(const std::string& text) override;
  void epoch_started(int64_t epoch, int64_t last_epoch, int64_t samples) override;
  void progressed(int64_t done, double loss, double accuracy) override;
  void epoch_trained() override;

 private:
  std::string command_;
  std::optional<EpochProgress> progress_;
};

}  // namespace mg::cli
