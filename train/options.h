// train/options.h — what a training run is, as `multigrad train`'s flags describe it: one field
// per flag (defaults as the flags', unset optionals resolved by the helpers below), the checks of
// their combinations (one clear error naming the flags and values), and what they derive: the
// layout's plan (train/parallelize.h), the GPT's sizes, the learning rate and weight decay.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "multigrad/autograd/autocast.h"
#include "multigrad/nn/gpt.h"
#include "multigrad/optim/grad_scaler.h"
#include "multigrad/train/parallelize.h"

namespace mg::train {

// The training set's pixel mean and standard deviation (after scaling to [0, 1]).
inline constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;
inline constexpr int64_t kEvalBatch = 1000;  // evaluation holds no graph, so large batches are cheap
// --parallel tp: the hidden features that the first pair of Linear layers splits among the ranks
// (train/named_models.cpp): the MLP's first hidden layer, the CNN's classifier (its convolutions, batch
// norms and pools stay whole on every rank, as Megatron keeps the layers it does not split).
inline constexpr int64_t kMlpSplitFeatures = 256, kCnnSplitFeatures = 128;
inline constexpr double kDefaultTimeoutSeconds = 300;  // docs/design.md
inline constexpr int64_t kDefaultLedgerStep = 2;        // --ledger's: the first step after warm-up
// The GPT's validation text: the last tenth, as nanoGPT's character-level example holds out.
inline constexpr double kValidationFraction = 0.1;
// --model gpt's defaults (with adamw at 1e-3): 32 windows a step, a thousand steps; what they
// cost on a 2-core CPU is in README.
inline constexpr int64_t kGptBatch = 32, kGptSteps = 1000;
// --model gpt's default warmup: a tenth of the run, at most this many steps (nanoGPT's). Without
// it the default run stalled at the unigram loss (~3.3 nats) for hundreds of steps under some
// data orders, in PyTorch as in multigrad: benchmarks/NOTES.md, 2026-12-04.
inline constexpr int64_t kGptMaxWarmup = 100;
inline constexpr int64_t kBpeVocab = 512;  // --tokenizer bpe: 256 merges, about half the bytes' tokens

struct RunOptions {
  std::string model = "mlp";
  std::optional<std::string> data;     // default: Fashion-MNIST's folder, or the fortunes for gpt
  std::string config = "small";        // --model gpt: nn::gpt_config
  std::optional<int64_t> context;      // --model gpt: default the config's
  bool recompute = false;              // --model gpt: nn::GPT::set_recompute
  bool sequence_parallel = false;      // --model gpt with tp: parallel::tensor_parallel_gpt's
  std::string precision = "fp32";      // or "bf16", "fp16": autocast (autograd/autocast.h)
  double init_loss_scale = optim::GradScalerOptions{}.init_scale;  // --precision fp16
  std::optional<double> bucket_cap_mb;  // DDP's buckets, zero1's and zero2's units: 25 MiB by default
  std::string tokenizer = "bytes";     // --model gpt: or "bpe", trained on the training text
  std::optional<int64_t> vocab_size;   // --tokenizer bpe: default kBpeVocab
  int64_t max_steps = 0;               // 0: every step of --epochs
  int64_t eval_every = 0;              // 0: after every epoch only
  int64_t epochs = 3;
  int64_t batch_size = 128;
  std::optional<double> lr;            // default: 0.1 for sgd, 1e-3 for adam and adamw
  std::string lr_schedule = "cosine";  // or "constant"
  std::optional<int64_t> warmup_steps; // default: 0, or for --model gpt a tenth of the run up to kGptMaxWarmup
  std::string optimizer = "sgd";
  double momentum = 0.9;               // sgd only
  std::optional<double> weight_decay;  // default: 0, or PyTorch's 1e-2 for adamw
  double clip_grad_norm = 0;           // 0: no clipping
  uint64_t seed = 0;
  int64_t limit = 0;                   // 0: the whole training set
  int64_t test_limit = 0;              // 0: the whole test set
  std::string devices = "auto";
  std::string parallel = "none";
  std::string backend = "local";
  std::string mesh;               // --mesh dp=D,tp=T (in place of --parallel)
  int micro_batches = 4;         // --parallel pipeline
  std::string schedule = "1f1b";  // --parallel pipeline
  int chunks = 0;                 // --parallel pipeline --schedule interleaved (0: 2)
  double timeout = kDefaultTimeoutSeconds;
  int64_t grad_accum = 1;
  bool deterministic = false;
  int workers = 1;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // steps; 0: after epochs only
  bool resume = false;
  bool overwrite = false;        // a fresh run replaces another run's checkpoints in checkpoint_dir
  int64_t keep_last = 0;         // 0: keep every checkpoint
  std::string metrics;
  std::string trace;
  std::string ledger;                    // the CUDA ledger of one step (core/ledger.h): a file
  std::optional<int64_t> ledger_step{};  // which step (default 2: the first after warm-up)
  bool detect_anomaly = false;
  bool no_memory_check = false;  // skip the memory preflight (cli/preflight.h: the CLI's)
};

// --parallel zero1, zero2 or zero3: parallel::ZeroOptimizer.
bool sharded(const RunOptions& o);

// The size of --mesh's dimension `name`; none when --mesh does not name it.
std::optional<int64_t> mesh_size(const RunOptions& o, const std::string& name);

// A pipeline: --parallel pipeline, or a pp dimension in --mesh (its stages tensor-parallel groups).
bool pipelined(const RunOptions& o);

// The ranks of --mesh: the product of its sizes.
int64_t mesh_ranks(const RunOptions& o);

// Every check of the options' combinations for a run on `n_devices` devices (ranks, with a mesh),
// and that the files and folders it writes can be written (before any work, so that a run does
// not train for an hour and then fail to save).
void check_options(const RunOptions& o, size_t n_devices);

// The GPT's sizes: --config's, --context overriding.
nn::GPTConfig gpt_config(const RunOptions& o, int64_t vocab_size);

// --precision's autocast precision: fp32, bf16 or fp16.
Precision precision_of(const std::string& name);

// --lr and --weight-decay, their defaults resolved.
double lr_of(const RunOptions& o);
double weight_decay_of(const RunOptions& o);

// The layout of the run's model (train/parallelize.h) that --parallel and --mesh name.
train::Plan parallel_plan(const RunOptions& o, bool mesh);
// Who splits what: the mesh's dimensions, or without one the whole communicator `world` (null:
// one process, no ranks) in the role --parallel names.
Groups run_groups(const RunOptions& o, parallel::Communicator* world, const parallel::DeviceMesh* mesh);

}  // namespace mg::train
