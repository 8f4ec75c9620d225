// train/setup.cpp — the data, model and optimizer of train/setup.h.
#include "multigrad/train/setup.h"

#include <algorithm>
#include <chrono>
#include <ostream>

#include "multigrad/core/error.h"
#include "multigrad/nn/gpt.h"
#include "multigrad/optim/adam.h"
#include "multigrad/optim/sgd.h"
#include "multigrad/train/log.h"
#include "multigrad/train/named_models.h"

namespace mg::train {
namespace {

// --tokenizer bpe's merges, learnt from `text` with a line at every tenth of them and one for the
// vocabulary reached, on `log` (null: silent).
data::BpeTokenizer learn_bpe(const std::string& text, int64_t vocab, std::ostream* log) {
  const bool say = log != nullptr;
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const int64_t merges = vocab - data::ByteTokenizer::kVocabSize;
  if (say) *log << "bpe: learning up to " << merges << " merges from " << text.size() << " bytes\n" << std::flush;
  int64_t tenths = 0;
  data::BpeTokenizer bpe = data::BpeTokenizer::train(text, vocab, [&](int64_t reached) {
    const int64_t now = (reached - data::ByteTokenizer::kVocabSize) * 10 / std::max<int64_t>(merges, 1);
    if (!say || now <= tenths || reached == vocab) return;
    tenths = now;
    *log << "bpe: " << now * 10 << "% (" << reached << " of " << vocab << " tokens), " << fixed(seconds(), 1)
              << " s\n" << std::flush;
  });
  if (say) {
    *log << "bpe: a vocabulary of " << bpe.vocab_size() << " tokens in " << fixed(seconds(), 1) << " s"
              << (bpe.vocab_size() < vocab ? detail::str_cat(", fewer than --vocab-size ", vocab,
                                                             ": no pair of tokens is left that occurs twice")
                                           : "")
              << "\n" << std::flush;
  }
  return bpe;
}

}  // namespace

std::shared_ptr<const data::Dataset> first_images(const data::FashionMNIST& full, int64_t limit, const char* flag,
                                                  const char* split) {
  if (limit == 0) return std::make_shared<data::TensorDataset>(full);
  MG_CHECK(limit <= full.size(), flag, " ", limit, " is larger than the ", split, " set (", full.size(), " images)");
  return std::make_shared<data::TensorDataset>(full.inputs().slice(0, 0, limit), full.targets().slice(0, 0, limit));
}

DataSets images(const RunOptions& o) {
  const std::string root = o.data.value_or(data::kFashionMnistRoot);
  const data::FashionMNIST train_full(root, true);
  return {first_images(train_full, o.limit, "--limit", "training"),
          first_images(data::FashionMNIST(root, false), o.test_limit, "--test-limit", "test")};
}

DataSets text_windows(const RunOptions& o, std::shared_ptr<const data::Tokenizer> tokenizer, std::ostream* log) {
  const std::string path = o.data.value_or(data::kFortunesRoot);
  const std::string text = data::read_text(path);
  const size_t split = text.size() - size_t(double(text.size()) * kValidationFraction);
  if (!tokenizer && o.tokenizer == "bytes") tokenizer = std::make_shared<data::ByteTokenizer>();
  if (!tokenizer) {
    const int64_t vocab = o.vocab_size.value_or(kBpeVocab);
    MG_CHECK(vocab >= data::ByteTokenizer::kVocabSize, "--vocab-size ", vocab, " must be at least ",
             data::ByteTokenizer::kVocabSize, " (the bytes)");
    tokenizer = std::make_shared<data::BpeTokenizer>(learn_bpe(text.substr(0, split), vocab, log));
  }
  const std::vector<int64_t> train = tokenizer->encode(text.substr(0, split)), val = tokenizer->encode(text.substr(split));
  const int64_t context = gpt_config(o, tokenizer->vocab_size()).context;
  MG_CHECK(int64_t(train.size()) > context && int64_t(val.size()) > context, "--data ", path, ": ", text.size(),
           " bytes of text (", train.size(), " training and ", val.size(), " validation tokens) are too few for ",
           "windows of --context ", context);
  // The tokens of the first `limit` windows (all for 0); more windows than the text holds is an
  // error, as for the images (first_images).
  auto first = [&](const std::vector<int64_t>& tokens, int64_t limit, int64_t stride, const char* flag,
                   const char* split) {
    const int64_t n = int64_t(tokens.size()), windows = (n - context - 1) / stride + 1;
    if (limit == 0) return tokens;
    MG_CHECK(limit <= windows, flag, " ", limit, " is larger than the ", split, " set (", windows, " windows)");
    return std::vector<int64_t>(tokens.begin(), tokens.begin() + (limit - 1) * stride + context + 1);
  };
  auto held_out = std::make_shared<data::TokenWindows>(first(val, o.test_limit, context, "--test-limit", "validation"),
                                                       context, context);
  // The targets of the disjoint windows are val[1, windows * context]: their bytes, for val_bpb.
  const std::vector<int64_t> targets(val.begin() + 1, val.begin() + 1 + held_out->size() * context);
  return {std::make_shared<data::TokenWindows>(first(train, o.limit, 1, "--limit", "training"), context, 1), held_out,
          "windows", "val",
          tokenizer, double(targets.size()) / double(tokenizer->decode(targets).size())};
}

std::shared_ptr<nn::Module> make_model(const RunOptions& o, const DataSets& data) {
  const bool gpt = o.model == "gpt";
  const auto net = build_model(o.model, gpt ? gpt_config(o, data.tokenizer->vocab_size()) : nn::GPTConfig{});
  if (gpt) std::dynamic_pointer_cast<nn::GPT>(net)->set_recompute(o.recompute);
  return net;
}

std::vector<optim::ParamGroup> param_groups(const RunOptions& o, std::vector<Tensor> params) {
  if (o.model == "gpt") return optim::weight_decay_groups(params, weight_decay_of(o));
  return {{.params = std::move(params)}};
}

std::unique_ptr<optim::Optimizer> optimizer_of(const RunOptions& o, std::vector<optim::ParamGroup> groups) {
  const double weight_decay = weight_decay_of(o);
  if (o.optimizer == "sgd") {
    return std::make_unique<optim::SGD>(
        std::move(groups), optim::SGDOptions{.lr = lr_of(o), .momentum = o.momentum, .weight_decay = weight_decay});
  }
  if (o.optimizer == "adam") {
    return std::make_unique<optim::Adam>(std::move(groups),
                                         optim::AdamOptions{.lr = lr_of(o), .weight_decay = weight_decay});
  }
  return std::make_unique<optim::AdamW>(std::move(groups),
                                        optim::AdamWOptions{.lr = lr_of(o), .weight_decay = weight_decay});
}

}  // namespace mg::train
