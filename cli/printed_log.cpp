// cli/printed_log.cpp — the printed lines, warnings and progress of cli/printed_log.h.
#include "cli/printed_log.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "multigrad/parallel/comm/mpi.h"

namespace mg::cli {
namespace {

constexpr double kRedrawSeconds = 0.1;  // ten redraws a second look live and cost nothing
constexpr int kBarWidth = 24;
constexpr const char* kClearToEndOfLine = "\033[K";  // a shorter redraw leaves no old tail

std::string format_duration(double seconds) {
  const auto s = int64_t(seconds + 0.5);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  } else {
    std::snprintf(text, sizeof text, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  }
  return text;
}

}  // namespace

EpochProgress::EpochProgress(std::ostream& out, bool terminal, int64_t epoch, int64_t epochs, int64_t total_samples)
    : out_(out), terminal_(terminal), epoch_(epoch), epochs_(epochs), total_(total_samples),
      start_(std::chrono::steady_clock::now()) {}

void EpochProgress::update(int64_t samples, double loss, double accuracy) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (terminal_) {
    if (samples < total_ && seconds - last_draw_ < kRedrawSeconds) return;
    last_draw_ = seconds;
    draw(samples, loss, accuracy, seconds);
    return;
  }
  const int64_t tenths = samples * kPlainSteps / total_;
  if (tenths <= tenths_shown_) return;
  tenths_shown_ = tenths;
  draw(samples, loss, accuracy, seconds);
}

void EpochProgress::draw(int64_t samples, double loss, double accuracy, double seconds) {
  const double rate = seconds > 0 ? double(samples) / seconds : 0;
  const double eta = rate > 0 ? double(total_ - samples) / rate : 0;
  char stats[160];
  std::snprintf(stats, sizeof stats, "%lld/%lld  loss %.4f  acc %.4f  %.0f samples/s  ETA %s",
                (long long)samples, (long long)total_, loss, accuracy, rate, format_duration(eta).c_str());
  char head[48];
  std::snprintf(head, sizeof head, "epoch %lld/%lld", (long long)epoch_, (long long)epochs_);
  if (terminal_) {
    const int filled = int(int64_t(kBarWidth) * samples / total_);
    out_ << '\r' << head << " [" << std::string(size_t(filled), '#')
         << std::string(size_t(kBarWidth - filled), '.') << "] " << stats << kClearToEndOfLine << std::flush;
  } else {
    out_ << head << "  " << samples * 100 / total_ << "%  " << stats << std::endl;
  }
}

void EpochProgress::finish() {
  if (terminal_) out_ << '\n' << std::flush;
}

void PrintedLog::line(const std::string& text) { std::cout << text << "\n" << std::flush; }

void PrintedLog::warning(const std::string& text) { print_error_line("multigrad ", command_, ": warning: ", text); }

void PrintedLog::epoch_started(int64_t epoch, int64_t last_epoch, int64_t samples) {
  // mpirun gives its ranks a pseudo-terminal even when its own output goes to a file or a pipe.
  const bool terminal = isatty(STDOUT_FILENO) == 1 && parallel::mpi_env_size() == 0;
  progress_.emplace(std::cout, terminal, epoch, last_epoch, samples);
}

void PrintedLog::progressed(int64_t done, double loss, double accuracy) {
  if (progress_) progress_->update(done, loss, accuracy);
}

void PrintedLog::epoch_trained() {
  if (progress_) progress_->finish();
  progress_.reset();
}

}  // namespace mg::cli
