// cli/checkpoint_folder.cpp — naming, listing and pruning checkpoints (cli/checkpoint_folder.h).
#include "cli/checkpoint_folder.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <limits>
#include <regex>

#include "multigrad/core/error.h"
#include "multigrad/io/safetensors.h"

namespace mg::cli {

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
                             const std::vector<std::pair<std::string, std::string>>& mine, bool main) {
  if (dir.empty()) return;
  const std::vector<CheckpointFile> files = checkpoints_in(dir, batches_per_epoch);
  if (files.empty()) return;
  if (overwrite) {
    if (!main) return;
    for (const CheckpointFile& file : files) fs::remove(file.path);
    std::cout << "checkpoints: --overwrite removed " << files.size() << " checkpoint" << (files.size() == 1 ? "" : "s")
              << " of an earlier run from " << dir << "\n";
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

io::Checkpoint load_checkpoint_noting(const std::string& path, const Device& device, bool say) {
  io::Checkpoint ck = io::load_checkpoint(path, device);
  if (say && !ck.checked)
    std::cerr << "multigrad: notice: " << path
              << " carries no checksums (written before multigrad recorded them): loaded unchecked\n";
  return ck;
}

}  // namespace mg::cli
