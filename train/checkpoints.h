// train/checkpoints.h — a run's checkpoints (`multigrad train --checkpoint-dir`): how they are
// named, what their info records besides the state, which one a run resumes from and whether it
// may, which ones --keep-last keeps, and whose the folder is.
//
// Names: epoch-<E>.safetensors after epoch E, step-<S>.safetensors after a step S inside an
// epoch (--checkpoint-every, or the last step of --max-steps). A name puts its checkpoint at a
// step of the run: S, or E times the batches of an epoch. Other files in the folder are left alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "multigrad/core/device.h"
#include "multigrad/io/checkpoint.h"
#include "multigrad/parallel/comm/agree.h"

namespace mg::train {

class RunLog;

// A checkpoint's info keys under which its run's settings are recorded ("run.--lr").
inline constexpr std::string_view kRunInfoPrefix = "run.";
inline constexpr const char* kLastStepKey = "run.last-step";  // and the step its run ends at
// --precision fp16: the loss scale and its growth tracker (optim/grad_scaler.h) at the checkpoint.
inline constexpr const char* kLossScaleKey = "grad_scaler.scale";
inline constexpr const char* kLossScaleTrackerKey = "grad_scaler.growth_tracker";
inline constexpr const char* kSkippedStepsKey = "grad_scaler.skipped_steps";  // written since it existed: 0 before


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
// them first, saying so to `log` (may be null).
void claim_checkpoint_folder(const std::string& dir, bool overwrite, int64_t batches_per_epoch,
                             const parallel::Settings& mine, bool main, RunLog* log);

// io::load_checkpoint, with a warning to `log` (may be null) for a file that carries no checksums
// (an older multigrad's): it loads, unchecked.
io::Checkpoint load_checkpoint_noting(const std::string& path, const Device& device, RunLog* log);

// The checkpoint --resume continues from: the furthest into the run that loads. An unreadable one
// (a crash mid-write cannot make one, a failing disk or a stray copy can) is skipped with a
// warning; an empty or missing folder is a fresh start, and says so (to `log`, may be null).
std::optional<std::pair<CheckpointFile, io::Checkpoint>> resume_point(const std::string& dir,
                                                                      int64_t batches_per_epoch,
                                                                      const Device& device, RunLog* log);

// --resume: the checkpoint's recorded settings are this run's (a checkpoint that records none,
// from an older multigrad, passes).
void check_resume_settings(const std::string& path, const io::Checkpoint& ck, const parallel::Settings& mine);

// The number a checkpoint's info records under `key`, or an error naming the file, the key and
// what it holds.
double info_double(const io::Checkpoint& ck, const std::string& path, const char* key);
int64_t info_int(const io::Checkpoint& ck, const std::string& path, const char* key);

// A resumed run's --metrics file keeps the rows of the epochs its checkpoint holds: the others
// (written after that checkpoint, before the run stopped) are trained again and written again.
void keep_metrics_rows(const std::string& path, int64_t epochs);

}  // namespace mg::train
