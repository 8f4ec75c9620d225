// train/settings.h — a run's settings as flags and values (multigrad train's flags, defaults
// resolved): those that decide what it computes (recorded in every checkpoint; --resume refuses
// others) and those every rank must agree on (compared across the ranks before the run starts).
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "multigrad/parallel/comm/agree.h"
#include "multigrad/train/options.h"
#include "multigrad/train/setup.h"

namespace mg::train {

// The shortest text that reads back to `value`.
std::string number_text(double value);

// The settings that decide what a run computes (defaults resolved), as flags and values. Every
// checkpoint records them (info "run.<flag>"; one written before a flag existed passes), and
// --resume refuses another value: the resumed run would not continue the one that wrote it. The
// run's length (--epochs, --max-steps, --warmup-steps) is checked through the learning rate it
// gives at the checkpoint's step. The rest may change on resume: the devices, --parallel,
// --backend, --grad-accum, --micro-batches, --schedule, --chunks, --deterministic, --recompute,
// --sequence-parallel, --workers, --timeout, the outputs.
parallel::Settings result_settings(const RunOptions& o, const DataSets& data);

// Every flag of multigrad train is one of these two kinds; the CLI's add_train_command refuses to
// build the command with a flag in neither, so a new flag is classified when it is added. The ranks of a
// run must agree on what decides its result and on what changes which collectives run (out of
// step, their collectives would not match: --trace gathers the ranks' timelines, --detect-anomaly
// stops one rank where the others go on); rank_settings compares them.
inline constexpr std::array<std::string_view, 43> kAgreedFlags = {
    "--model", "--data", "--config", "--context", "--tokenizer", "--vocab-size", "--recompute",
    "--sequence-parallel", "--precision", "--bucket-cap-mb", "--init-loss-scale", "--max-steps", "--eval-every",
    "--epochs", "--batch-size", "--lr", "--warmup-steps", "--lr-schedule", "--optimizer", "--momentum",
    "--weight-decay", "--clip-grad-norm", "--seed", "--limit", "--test-limit", "--parallel", "--mesh", "--backend",
    "--micro-batches", "--schedule", "--chunks", "--grad-accum", "--deterministic", "--checkpoint-dir",
    "--checkpoint-every", "--resume", "--keep-last", "--trace", "--detect-anomaly", "--timeout", "--metrics",
    "--overwrite", "--no-memory-check"};
// What each rank may set for itself: where it runs, its data loader's threads, and the CUDA ledger
// (its process's record of one step, which changes nothing the ranks do).
inline constexpr std::array<std::string_view, 5> kPerRankFlags = {"--help", "--devices", "--workers", "--ledger",
                                                                  "--ledger-step"};

// What every rank of a run must agree on (kAgreedFlags, and this multigrad's version).
parallel::Settings rank_settings(const RunOptions& o, const DataSets& data);

}  // namespace mg::train
