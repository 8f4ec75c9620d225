// train/named_models.h — the models a run trains, built by name (`multigrad train --model`), and
// rebuilt from a checkpoint's info (`multigrad generate` and `multigrad eval`). The models
// themselves are nn/models.h's and nn/gpt.h's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "multigrad/core/device.h"
#include "multigrad/data/data.h"
#include "multigrad/io/checkpoint.h"
#include "multigrad/nn/gpt.h"
#include "multigrad/nn/module.h"

namespace mg::train {

// The widths of --model mlp: 784 pixels, two hidden layers, 10 classes.
inline const std::vector<int64_t> kMlpWidths = {784, 256, 128, 10};

// --model mlp (nn::mlp of kMlpWidths, on flattened images), cnn (nn::fashion_cnn) or gpt
// (nn::gpt(config)); `config` is read for gpt only.
std::shared_ptr<nn::Module> build_model(const std::string& name, const nn::GPTConfig& config = {});

// The tokenizer a checkpoint's info names: "bytes", or "bpe" with its merges under "bpe_merges".
std::unique_ptr<data::Tokenizer> checkpoint_tokenizer(const std::map<std::string, std::string>& info,
                                                      const std::string& path);

// The model of a checkpoint (its info's "model", and a GPT's sizes), its state loaded, on `device`;
// an error naming `path` when the info names no model this multigrad knows.
std::shared_ptr<nn::Module> checkpoint_model(const io::Checkpoint& ck, const std::string& path, const Device& device);

}  // namespace mg::train
