// train/log.h — what a run says as it goes. The train layer prints nothing: it tells the RunLog
// it was given (only the main rank is given one), and the CLI's prints (cli/train.cpp: lines on
// stdout, warnings on stderr, a progress bar per epoch). A research program passes its own, or
// none. Errors are not said: they are thrown.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace mg::train {

class RunLog {
 public:
  virtual ~RunLog() = default;
  // A line of the run's account ("epoch 1/3: train loss ...", "resume: from ...").
  virtual void line(const std::string& text) {}
  // Something the user should know while the run goes on ("--resume skips ...").
  virtual void warning(const std::string& text) {}
  // An epoch's training: `samples` examples to train on; after each step, `done` of them with the
  // running loss and accuracy (every rank's, as last summed); then its end.
  virtual void epoch_started(int64_t epoch, int64_t last_epoch, int64_t samples) {}
  virtual void progressed(int64_t done, double loss, double accuracy) {}
  virtual void epoch_trained() {}
  // How often, in tenths of an epoch, the data-parallel ranks sum their running totals for it.
  static constexpr int64_t kSums = 10;
};

// `value` with `digits` decimals, as a run's lines print their numbers.
inline std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

}  // namespace mg::train
