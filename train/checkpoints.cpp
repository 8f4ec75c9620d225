// cli/checkpoint_folder.cpp — naming, listing and pruning checkpoints (cli/checkpoint_folder.h).
#include "multigrad/train/checkpoints.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>

#include "multigrad/core/error.h"
#include "multigrad/io/safetensors.h"
#include "multigrad/train/log.h"

namespace mg::train {

namespace fs = std::filesystem;

std::string epoch_checkpoint_path(const std::string& dir, int64_t epoch) {
  return (fs::path(dir) / ("epoch-" + std::to_string(epoch) + ".safetensors")).string();
}

std::string step_checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("step-" + std::to_string(step) + ".safetensors")).string();
}

std::vector<CheckpointFile> checkpoints_in(const std::string& dir, int64_t batches_per_epoch) {
  static const std::regex kName(R"((epoch|step)-([0-9]+)\.safetensors)");
  std::vector<CheckpointFile> found;
  if (!fs::is_directory(dir)) return found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, match, kName)) continue;
    int64_t n = 0;
    const std::string digits = match[2].str();
    const bool epoch = match[1].str() == "epoch";
    const bool fits = std::from_chars(digits.data(), digits.data() + digits.size(), n).ec == std::errc() &&
                      (!epoch || n <= std::numeric_limits<int64_t>::max() / std::max<int64_t>(batches_per_epoch, 1));
    MG_CHECK(fits, entry.path().string(), ": its ", match[1].str(), " number ", digits,
             " is too large for a checkpoint of a run (rename or remove it)");
    found.push_back({entry.path().string(), epoch ? n * batches_per_epoch : n});
  }
  std::sort(found.begin(), found.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return a.step != b.step ? a.step > b.step : a.path < b.path;
  });
  return found;
}

void keep_last_checkpoints(const std::string& dir, int64_t batches_per_epoch, int64_t step, int64_t keep) {
  int64_t kept = 0;
  for (const CheckpointFile& file : checkpoints_in(dir, batches_per_epoch)) {
    if (file.step > step) continue;
    if (kept < keep) {
      ++kept;
      continue;
    }
    std::error_code ec;
    fs::remove(file.path, ec);
    MG_CHECK(!ec, "--keep-last: cannot remove ", file.path, ": ", ec.message());
  }
}

void claim_checkpoint_folder(const std::string& dir, bool overwrite, int64_t batches_per_epoch,
                             const parallel::Settings& mine, bool main, RunLog* log) {
  if (dir.empty()) return;
  const std::vector<CheckpointFile> files = checkpoints_in(dir, batches_per_epoch);
  if (files.empty()) return;
  if (overwrite) {
    if (!main) return;
    for (const CheckpointFile& file : files) fs::remove(file.path);
    if (log)
      log->line(detail::str_cat("checkpoints: --overwrite removed ", files.size(), " checkpoint",
                                files.size() == 1 ? "" : "s", " of an earlier run from ", dir));
    return;
  }
  std::string differing;
  try {  // the settings its run recorded (an unreadable header is named as a checkpoint all the same)
    const io::Metadata meta = io::read_safetensors_metadata(files.front().path);
    for (const auto& [flag, value] : mine) {
      const auto it = meta.find("info." + std::string(kRunInfoPrefix) + flag);
      if (it != meta.end() && it->second != value)
        differing += detail::str_cat(differing.empty() ? ", written with " : ", ", flag, " ", it->second,
                                     " (this run: ", value, ")");
    }
  } catch (const Error&) {
  }
  MG_ERROR("--checkpoint-dir ", dir, " holds the checkpoints of another run (the furthest: ",
           files.front().path, ", step ", files.front().step, differing,
           "): --resume continues it, --overwrite replaces it, or choose another folder");
}

io::Checkpoint load_checkpoint_noting(const std::string& path, const Device& device, RunLog* log) {
  io::Checkpoint ck = io::load_checkpoint(path, device);
  if (log && !ck.checked)
    log->warning(path + " carries no checksums (written before multigrad recorded them): loaded unchecked");
  return ck;
}

std::optional<std::pair<CheckpointFile, io::Checkpoint>> resume_point(const std::string& dir,
                                                                      int64_t batches_per_epoch,
                                                                      const Device& device, RunLog* log) {
  const std::vector<CheckpointFile> files = checkpoints_in(dir, batches_per_epoch);
  if (files.empty()) {
    if (log) log->line(detail::str_cat("resume: no checkpoint in ", dir, " yet, starting from the beginning"));
    return std::nullopt;
  }
  std::string newest_error;
  for (const CheckpointFile& file : files) {
    try {
      return std::pair{file, load_checkpoint_noting(file.path, device, log)};
    } catch (const std::exception& e) {
      if (newest_error.empty()) newest_error = e.what();
      if (log) log->warning(detail::str_cat("--resume skips ", file.path, ": ", e.what()));
    }
  }
  MG_ERROR("--resume: none of the ", files.size(), " checkpoints in ", dir, " can be read (the newest: ",
           newest_error, ")");
}

void check_resume_settings(const std::string& path, const io::Checkpoint& ck, const parallel::Settings& mine) {
  for (const auto& [flag, value] : mine) {
    const auto recorded = ck.info.find(std::string(kRunInfoPrefix) + flag);
    MG_CHECK(recorded == ck.info.end() || recorded->second == value, "--resume: ", path, " was written with ", flag,
             " '", recorded->second, "', this run has '", value,
             "': a resumed run keeps the settings that decide its result (README: resume), or starts afresh in "
             "another --checkpoint-dir");
  }
}

namespace {

template <class T>
T info_number(const io::Checkpoint& ck, const std::string& path, const char* key) {
  const auto it = ck.info.find(key);
  MG_CHECK(it != ck.info.end(), "--resume: ", path, " records no '", key, "'");
  const std::string& text = it->second;
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  MG_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size(), "--resume: ", path, ": '", key,
           "' is '", text, "', expected a number");
  return value;
}

}  // namespace

double info_double(const io::Checkpoint& ck, const std::string& path, const char* key) {
  return info_number<double>(ck, path, key);
}
int64_t info_int(const io::Checkpoint& ck, const std::string& path, const char* key) {
  return info_number<int64_t>(ck, path, key);
}

void keep_metrics_rows(const std::string& path, int64_t epochs) {
  std::ifstream in(path);
  std::string kept, line;
  for (bool header = true; std::getline(in, line); header = false) {
    int64_t epoch = 0;
    const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), epoch);
    if (header || (ec == std::errc() && *end == ',' && epoch <= epochs)) kept += line + "\n";
  }
  in.close();
  const std::string temp = path + ".tmp";
  std::ofstream(temp, std::ios::trunc) << kept;
  std::error_code ec;
  fs::rename(temp, path, ec);
  MG_CHECK(!ec, "--metrics: cannot replace ", path, " by ", temp, ": ", ec.message());
}

}  // namespace mg::train
