// io/checkpoint.h — a training checkpoint: model state, optimizer state, step and RNG state in
// one safetensors file, written atomically (io/safetensors.h), so a run killed at any moment
// resumes from the last complete checkpoint.
//
// The file is an ordinary safetensors file that the Python package can read:
//   tensors  "model.<key>" for each model state entry, "optim.<key>" for each optimizer entry
//   metadata {"format": "multigrad-checkpoint", "format_version": "1", "step": "<step>",
//             "rng_seed": "<seed>", "rng_offset": "<offset>", "optim_option.<name>": "<value>",
//             "info.<key>": "<text>", "sha256.<tensor name>": "<64 hex digits>"}
// Integers are decimal; an option is the shortest text that reads back to the same double.
// Integrity: each tensor's SHA-256 (of its bytes as stored) is in the metadata and is checked on
// load, so one flipped bit is an error naming the file and the tensor, never a model that loads.
// A file written before the checksums existed loads unchecked, and says so (Checkpoint::checked).
// The maps are what Module::state_dict() and the optimizers' state_dict() (its `tensors` and
// `options`) hold; this file depends on neither class.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "multigrad/core/device.h"
#include "multigrad/core/random.h"
#include "multigrad/core/tensor.h"

namespace mg::io {

struct Checkpoint {
  std::map<std::string, Tensor> model_state{};
  std::map<std::string, Tensor> optimizer_state{};
  std::map<std::string, double> optimizer_options{};  // hyper-parameters ("lr", "momentum", ...)
  int64_t step = 0;                                  // non-negative
  PhiloxState rng{};  // the global Philox state when the checkpoint was written
  // What a reader needs to rebuild the model (`multigrad train` writes "model" and, for a GPT,
  // its sizes): free text, stored as written.
  std::map<std::string, std::string> info{};
  // Loaded: whether the file carried checksums (and so every tensor was checked against them).
  bool checked = true;
};

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// The common case: the current global RNG state (mg::get_rng_state()) and no optimizer options.
void save_checkpoint(const std::string& path, const std::map<std::string, Tensor>& model_state,
                     const std::map<std::string, Tensor>& optimizer_state, int64_t step);

// Loads and validates a checkpoint (format, step, RNG and option fields; every tensor key
// prefixed; every tensor against its checksum), with the tensors on `device`. It does not touch the global RNG: resume with
// mg::set_rng_state(checkpoint.rng).
Checkpoint load_checkpoint(const std::string& path, const Device& device = Device("cpu"));

}  // namespace mg::io
