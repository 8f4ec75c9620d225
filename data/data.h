// data/data.h — datasets, samplers and the DataLoader (docs/design.md).
//
// A Dataset maps an index to an Example (input, target). Samplers decide the order of indices
// per epoch from a seed alone. The DataLoader cuts the sampler's order into batches, and worker
// threads assemble batches (optionally in pinned host memory) ahead of the training loop; the
// order of batches never depends on the number of workers, and a worker's exception reaches the
// caller of next().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "multigrad/core/tensor.h"

namespace mg::data {

struct Example {
  Tensor input;   // e.g. (1, 28, 28) Float32
  Tensor target;  // 0-d Int64 class, or any tensor
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;  // throws naming the index and size when out of range
  // The examples at `indices` stacked along a new dim 0. The default stacks get(i); datasets
  // holding contiguous tensors override it with one gather.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
};

// Examples are rows (dim 0) of two tensors of equal length.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);  // sizes along dim 0 must match (error names both)
  int64_t size() const override;
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_, targets_;
};

// ---- Fashion-MNIST: IDX files, gzip-compressed (or not) ----

// The folder Debian's dataset-fashion-mnist installs.
inline constexpr const char* kFashionMnistRoot = "/usr/share/datasets/fashion-mnist";

// An IDX file: magic 0x00 0x00 <type> <ndim>, ndim big-endian u32 dims, then the data.
// Only type 0x08 (unsigned byte) is accepted. Every check (magic, type, ndim, dims vs file size,
// truncation, trailing bytes) fails with an mg::Error naming the file, the field and both values.
struct IdxArray {
  Shape dims;
  std::vector<uint8_t> data;
};
IdxArray read_idx(const std::string& path);

// train: train-{images-idx3,labels-idx1}-ubyte.gz (60000), else t10k-* (10000), under root.
// Images become (N, 1, 28, 28) Float32 scaled to [0, 1]; labels (N) Int64 in [0, 10).
// The image and label counts must agree (error names both files and counts).
class FashionMNIST : public TensorDataset {
 public:
  FashionMNIST(const std::string& root, bool train);

 private:
  explicit FashionMNIST(Example split);  // all images and labels, read and validated
};

// ---- text: a corpus, a tokenizer, and windows for a language model (data/text.cpp) ----
// The folder Debian's `fortunes` and `fortunes-min` install: about 2.6 MB of English quotations,
// one file per theme, quotations separated by lines holding only "%".
inline constexpr const char* kFortunesRoot = "/usr/share/games/fortunes";

// The text of a regular file, or of every regular file of a folder in name order, skipping links,
// fortune index files (*.dat) and checkpoints (*.safetensors, and their temporary files
// *.safetensors.tmp.<pid>). Lines holding only "%" (fortune separators) become empty lines.
// A missing path, a device or pipe, an unreadable file or a folder without text is an error
// naming the path.
std::string read_text(const std::string& path);

// Text to token ids and back.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "bytes", "bpe": what a checkpoint records
  virtual int64_t vocab_size() const = 0;
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  // An id outside [0, vocab_size) is an error naming it.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
};

// Bytes as tokens: id = byte value, vocab_size 256.
class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;
  std::string name() const override { return "bytes"; }
  int64_t vocab_size() const override { return kVocabSize; }
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
};

// Byte-level byte-pair encoding, trained here (data/bpe.cpp), in GPT-2's scheme: ids 0-255 are
// the bytes, id 256 + k is merge k, the concatenation of its pair's bytes. Text is first cut
// into chunks that no merge crosses: a run of letters (bytes >= 128, UTF-8's, count as
// letters), of digits, or of other visible bytes, each with at most one leading space; or a run
// of whitespace, less the space before a visible byte. (GPT-2's pattern also splits English
// contractions off; this one does not.)
class BpeTokenizer : public Tokenizer {
 public:
  // Learns up to vocab_size - 256 merges from `text`: each time the adjacent pair that occurs
  // most often (ties: the smallest (left, right) ids), until the vocabulary is full or no pair
  // occurs twice. vocab_size must be at least 256. `progress`, when given, gets the vocabulary's
  // size after each merge (a caller's progress line; learning a large vocabulary takes minutes).
  static BpeTokenizer train(const std::string& text, int64_t vocab_size,
                            const std::function<void(int64_t vocab)>& progress = {});
  // The merges as text, a header line and "left right" per merge in order, and back: `source`
  // names the text in the error a malformed one gets.
  std::string to_text() const;
  static BpeTokenizer from_text(const std::string& text, const std::string& source);

  std::string name() const override { return "bpe"; }
  int64_t vocab_size() const override { return ByteTokenizer::kVocabSize + int64_t(merges_.size()); }
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  const std::string& bytes_of(int64_t id) const;  // the text of one id

 private:
  explicit BpeTokenizer(std::vector<std::pair<int64_t, int64_t>> merges);
  std::vector<int64_t> encode_chunk(std::string_view chunk) const;

  std::vector<std::pair<int64_t, int64_t>> merges_;  // merge k makes id 256 + k
  std::vector<std::string> pieces_;                  // id -> its bytes
  std::unordered_map<uint64_t, int64_t> rank_;       // pair (left << 32 | right) -> its merge k
};

// Windows over a token sequence for next-token prediction: example i is (input, target) =
// (tokens[s, s + T), tokens[s + 1, s + T + 1)) with s = i * stride, both (T) Int64, for every s
// with s + T + 1 <= n. stride 1 gives every window (training samples random ones through the
// sampler); stride T gives disjoint windows (evaluation sees each token once).
class TokenWindows : public Dataset {
 public:
  TokenWindows(std::vector<int64_t> tokens, int64_t context, int64_t stride = 1);
  int64_t size() const override;
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;
  int64_t context() const { return context_; }

 private:
  std::vector<int64_t> tokens_;
  int64_t context_, stride_;
};

// ---- transforms (applied by the DataLoader to each assembled batch of inputs) ----

// (x - mean) / std.
struct Normalize {
  double mean = 0, std = 1;
  Tensor operator()(const Tensor& batch) const;
};
// Flips each image (..., H, W) left-right with probability p; the decision for the example at
// position k of epoch e depends only on (seed, e, its dataset index), so it is the same for any
// number of workers or devices.
struct RandomHorizontalFlip {
  double p = 0.5;
  uint64_t seed = 0;
  // batch row k holds dataset example indices[k]; returns a new tensor, batch is unchanged.
  Tensor operator()(const Tensor& batch, const std::vector<int64_t>& indices, int64_t epoch) const;
};

// ---- samplers ----

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The dataset indices of one epoch, in order.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n) : n_(n) {}
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
};

// A permutation of [0, n) drawn from (seed, epoch) with Philox: reproducible, different each epoch.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

// PyTorch's DistributedSampler: the (shuffled or not) order of all n indices, padded by
// repeating its start to a multiple of num_replicas (or cut down to one with drop_last), and
// rank r takes positions r, r + num_replicas, ...
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t num_samples() const;  // per replica

 private:
  int64_t n_, replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
};

// ---- the loader ----

struct Batch {
  Tensor inputs;   // (B, ...) on options.device
  Tensor targets;  // (B, ...) on options.device
  std::vector<int64_t> indices;  // dataset indices, in batch order
};

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;   // RandomSampler(seed) unless a sampler is given
  bool drop_last = false;
  int num_workers = 0;    // 0: batches are assembled on the calling thread
  int prefetch = 2;       // batches ready ahead, per worker
  bool pin_memory = false;
  Device device = Device("cpu");
  uint64_t seed = 0;
  std::optional<Normalize> normalize{};
  std::optional<RandomHorizontalFlip> flip{};
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options,
             std::shared_ptr<const Sampler> sampler = nullptr);
  ~DataLoader();  // stops and joins the workers
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts epoch `epoch` (the sampler's order for it); batches come from next(), from batch
  // `first_batch` on (a run resumed part-way through the epoch skips those it trained on).
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the epoch, or nothing at its end. Rethrows a worker's exception.
  std::optional<Batch> next();
  int64_t num_batches() const;  // per epoch
  int64_t num_examples() const;  // per epoch (after the sampler, before drop_last)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mg::data
