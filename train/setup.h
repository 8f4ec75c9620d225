// train/setup.h — what a run is set up from its options (train/options.h): its data (Fashion-MNIST
// images, or a GPT's next-token windows of a text), its model (built from the seed) and its
// optimizer.
#pragma once

#include <iosfwd>
#include <memory>
#include <vector>

#include "multigrad/data/data.h"
#include "multigrad/nn/module.h"
#include "multigrad/optim/optimizer.h"
#include "multigrad/train/options.h"

namespace mg::train {

// The held-out set is Fashion-MNIST's test split, or the GPT's validation text.
struct DataSets {
  std::shared_ptr<const data::Dataset> train;
  std::shared_ptr<const data::Dataset> test;
  const char* examples = "images";  // what one example is, for the first line
  const char* held_out = "test";
  std::shared_ptr<const data::Tokenizer> tokenizer{};  // --model gpt
  double tokens_per_byte = 1;  // --model gpt: of the validation targets, for val_bpb
};

// The first `limit` images of a split (all for 0); `flag` and `split` name them in the error.
std::shared_ptr<const data::Dataset> first_images(const data::FashionMNIST& full, int64_t limit, const char* flag,
                                                  const char* split);

// --data's Fashion-MNIST (default its usual folder), --limit and --test-limit applied.
DataSets images(const RunOptions& o);

// The text of --data, cut at nine tenths of its bytes: --tokenizer bpe learns its merges from the
// first part (its progress lines on `log`; null: silent). Training takes every window of the first
// part's tokens (--limit: the first N windows), validation disjoint windows of the last part's
// (--test-limit: the first N). `tokenizer`, when given, is used instead (multigrad eval: the
// checkpoint's).
DataSets text_windows(const RunOptions& o, std::shared_ptr<const data::Tokenizer> tokenizer = nullptr,
                      std::ostream* log = nullptr);

// The run's model, from the global RNG (call manual_seed first): --model's, a GPT with
// --recompute set.
std::shared_ptr<nn::Module> make_model(const RunOptions& o, const DataSets& data);

// The parameter groups: a GPT decays its matrices and embeddings only, as nanoGPT and llm.c do.
std::vector<optim::ParamGroup> param_groups(const RunOptions& o, std::vector<Tensor> params);

// --optimizer over `groups`.
std::unique_ptr<optim::Optimizer> optimizer_of(const RunOptions& o, std::vector<optim::ParamGroup> groups);

}  // namespace mg::train
