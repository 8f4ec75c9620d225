// cli/checkpoint_folder.h — the folder of `multigrad train --checkpoint-dir`: how its
// checkpoints are named, which one a run resumes from, and which ones --keep-last keeps.
//
// Names: epoch-<E>.safetensors after epoch E, step-<S>.safetensors after a step S inside an
// epoch (--checkpoint-every, or the last step of --max-steps). A name puts its checkpoint at a
// step of the run: S, or E times the batches of an epoch. Other files in the folder are left alone.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "multigrad/core/device.h"
#include "multigrad/io/checkpoint.h"

namespace mg::cli {

// A checkpoint's info keys under which its run's settings are recorded ("run.--lr").
inline constexpr std::string_view kRunInfoPrefix = "run.";

std::string epoch_checkpoint_path(const std::string& dir, int64_t epoch);
std::string step_checkpoint_path(const std::string& dir, int64_t step);

struct CheckpointFile {
  std::string path;
  int64_t step = 0;  // where its name puts it
};

// The checkpoints in `dir` (none when it does not exist), furthest into the run first. A name
// whose number does not fit a step of the run is an error naming the file.
std::vector<CheckpointFile> checkpoints_in(const std::string& dir, int64_t batches_per_epoch);

// Deletes the checkpoints at steps up to `step` except the `keep` furthest of them; those past
// `step` (an interrupted run's that a resumed one has not reached yet, or unreadable ones it
// skipped) are left for the run to overwrite.
void keep_last_checkpoints(const std::string& dir, int64_t batches_per_epoch, int64_t step, int64_t keep);

// A run without --resume into `dir` claims it: a folder that holds checkpoints would mix two runs
// (a later --resume could continue the other one, --keep-last delete its files), so it is refused,
// naming the furthest checkpoint and the settings (`mine`: flag and value, as recorded under
// kRunInfoPrefix) it was written with that differ, unless `overwrite`: then the main rank removes
// them first, saying so on stdout.
void claim_checkpoint_folder(const std::string& dir, bool overwrite, int64_t batches_per_epoch,
                             const std::vector<std::pair<std::string, std::string>>& mine, bool main);

// io::load_checkpoint, with one notice line on stderr (when `say`) for a file that carries no
// checksums (an older multigrad's): it loads, unchecked.
io::Checkpoint load_checkpoint_noting(const std::string& path, const Device& device, bool say = true);

}  // namespace mg::cli
