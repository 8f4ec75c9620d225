// train/settings.cpp — the settings of train/settings.h.
#include "multigrad/train/settings.h"

#include <algorithm>
#include <charconv>

#include "multigrad/core/error.h"
#include "multigrad/io/sha256.h"

namespace mg::train {
namespace {

// A data set as "<size> <examples>, <digest>": SHA-256 over its first, middle and last examples,
// cheap next to reading it, and enough to tell another data set or another --limit apart.
std::string data_fingerprint(const data::Dataset& set, const char* examples) {
  io::Sha256 hash;
  const int64_t n = set.size();
  for (const int64_t i : {int64_t(0), n / 2, n - 1}) {
    if (i < 0) break;
    const data::Example example = set.get(i);
    for (const Tensor& t : {example.input.contiguous(), example.target.contiguous()})
      hash.update(t.data_ptr(), size_t(t.numel()) * t.element_size());
  }
  return detail::str_cat(n, " ", examples, ", sha256 ", hash.hex_digest().substr(0, 16));
}

}  // namespace

std::string number_text(double value) {
  char buffer[64];
  return std::string(buffer, std::to_chars(buffer, buffer + sizeof buffer, value).ptr);
}

parallel::Settings result_settings(const RunOptions& o, const DataSets& data) {
  parallel::Settings s = {{"--model", o.model}};
  if (o.model == "gpt") {
    const int64_t vocab = data.tokenizer->vocab_size();
    s.insert(s.end(), {{"--config", o.config},
                       {"--context", std::to_string(gpt_config(o, vocab).context)},
                       {"--tokenizer", o.tokenizer},
                       {"--vocab-size", std::to_string(vocab)}});
  }
  s.insert(s.end(), {{"--seed", std::to_string(o.seed)},
                     {"--batch-size", std::to_string(o.batch_size)},
                     {"--data, --limit", data_fingerprint(*data.train, data.examples)},
                     {"--optimizer", o.optimizer},
                     {"--lr", number_text(lr_of(o))},
                     {"--lr-schedule", o.lr_schedule},
                     {"--weight-decay", number_text(weight_decay_of(o))},
                     {"--clip-grad-norm", number_text(o.clip_grad_norm)},
                     {"--precision", o.precision}});
  if (o.optimizer == "sgd") s.emplace_back("--momentum", number_text(o.momentum));
  return s;
}

parallel::Settings rank_settings(const RunOptions& o, const DataSets& data) {
  parallel::Settings s = result_settings(o, data);
  const auto text = [](const auto& value) { return detail::str_cat(value); };
  s.insert(s.end(), {{"--epochs", text(o.epochs)},
                     {"--max-steps", text(o.max_steps)},
                     {"--warmup-steps", o.warmup_steps ? text(*o.warmup_steps) : "default"},
                     {"--test-limit", data_fingerprint(*data.test, data.examples)},
                     {"--parallel", o.parallel},
                     {"--backend", o.backend},
                     {"--mesh", o.mesh},
                     {"--grad-accum", text(o.grad_accum)},
                     {"--micro-batches", text(o.micro_batches)},
                     {"--schedule", o.schedule},
                     {"--chunks", text(o.chunks)},
                     {"--deterministic", text(o.deterministic)},
                     {"--recompute", text(o.recompute)},
                     {"--sequence-parallel", text(o.sequence_parallel)},
                     {"--init-loss-scale", number_text(o.init_loss_scale)},
                     {"--bucket-cap-mb", o.bucket_cap_mb ? number_text(*o.bucket_cap_mb) : "default"},
                     {"--eval-every", text(o.eval_every)},
                     {"--checkpoint-dir", o.checkpoint_dir},
                     {"--checkpoint-every", text(o.checkpoint_every)},
                     {"--keep-last", text(o.keep_last)},
                     {"--resume", text(o.resume)},
                     {"--overwrite", text(o.overwrite)},
                     {"--no-memory-check", text(o.no_memory_check)},
                     {"--trace", o.trace.empty() ? "none" : "a file"},
                     {"--detect-anomaly", text(o.detect_anomaly)},
                     {"--timeout", number_text(o.timeout)},
                     {"--metrics", o.metrics.empty() ? "none" : "a file"},
                     {"version", MG_VERSION}});
  // Every agreed flag is compared (a key may name two: "--data, --limit"); a GPT's own flags only
  // for a GPT, --momentum only for sgd.
  for (const std::string_view flag : kAgreedFlags) {
    const bool unused = (o.model != "gpt" && (flag == "--config" || flag == "--context" || flag == "--tokenizer" ||
                                             flag == "--vocab-size")) ||
                        (o.optimizer != "sgd" && flag == "--momentum");
    const bool compared = std::any_of(s.begin(), s.end(), [&](const auto& setting) {
      const std::string_view key = setting.first;
      return key == flag || key.starts_with(std::string(flag) + ", ") || key.ends_with(", " + std::string(flag));
    });
    MG_CHECK(compared || unused, "rank_settings: the agreed flag ", flag, " is not compared (train/settings.cpp)");
  }
  return s;
}

}  // namespace mg::train
