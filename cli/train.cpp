// cli/train.cpp — `multigrad train`: trains the MLP or the CNN on Fashion-MNIST, or a GPT on
// text (--model gpt: nn/gpt.h on the bytes or BPE tokens of --data, next-token windows of
// --context tokens, the last tenth of the text held out for validation), on one device, or on
// several:
// data-parallel (--parallel dp: one process, DataParallel; --parallel ddp:
// DistributedDataParallel) or as a pipeline (--parallel pipeline: a stage per device). DDP and
// pipelines run one rank per device as threads of this process (--backend local or nccl) or,
// under mpirun, one rank per process (--backend mpi on CPUs, nccl on GPUs). It evaluates on the
// test set after every epoch, checkpoints, and ends with `key: value` lines (test_accuracy,
// test_loss, samples_per_s, peak_memory_mb per device, params_sha256 per rank; DDP adds
// allreduce_overlap and comm_ms_per_step, ZeRO comm_ms_per_step, tp tp_comm_ms_per_step (its
// collectives' time per step, none of it overlapped), a pipeline bubble_fraction). A GPT's evaluation is on
// disjoint validation windows, and it reports val_loss (nats per token), val_bpb (bits per byte)
// tokens_per_s and mfu (of the devices' peak at --precision, cli/peak.h) in place of the test lines; its
// accuracy is of next-token predictions.
//
// How a global batch of b examples is computed (parallel/micro_batches.h cuts every split):
//   none: K = --grad-accum micro-batches, one after another;
//   dp:   K micro-batches one after another, each cut across the devices by DataParallel;
//   ddp:  cut across the N ranks; each rank's part cut into K micro-batches, all but the last
//         under no_sync(). The gradients are summed (reduce_op Sum), not averaged.
//   zero1: cut as ddp's; the rank's micro-batches accumulate locally, and the optimizer
//         (parallel::ZeroOptimizer) reduce-scatters the sum and updates the rank's shard.
//   zero2: cut as ddp's, all but the last micro-batch under the optimizer's no_sync(); the last
//         backward reduce-scatters each unit's gradients as soon as they are ready.
//   zero3: as zero2, the parameters sharded too: a layer's gathered around its forward and its
//         backward (the model runs through the optimizer's model()); before an evaluation, a
//         checkpoint or the digest every rank gathers them all.
//   tp:   the MLP's pairs of Linear layers split across the ranks (parallel/tensor_parallel.h);
//         every rank computes the whole batch (K micro-batches) with its shards, and evaluates
//         with the others; checkpoints and the digest are of the gathered, one-device model.
//   --mesh dp=D,tp=T: the ranks as a D x T grid (parallel::DeviceMesh): ddp's split across the
//         dp dimension, each replica tp over its row of T ranks; with --parallel zero1, zero2 or
//         zero3, zero's in place of ddp's (each rank's tp shards sharded over its dp group).
//   --mesh tp=T,pp=P: a pipeline of P stages (--micro-batches, --schedule), each stage a group of
//         T tp ranks; a stage's rank sends to the next stage's rank of the same tp coordinate.
// Every piece's mean loss is scaled by (its size / b), so the gradients add up to the batch
// mean whatever the split; with --deterministic (rank-ordered sums), dp, ddp and zero over N
// devices end bit-identical to --grad-accum N on one device.
//
// Reproducibility: the initial parameters come from mg::manual_seed(--seed), and the order of
// the training examples in epoch e from (seed, e) alone (data::RandomSampler), never from the
// worker count. A checkpoint holds the model (parameters and buffers), the optimizer state,
// the step and the global RNG state; `epoch-<E>.safetensors` is written after epoch E, so a
// resumed run replays epochs E+1... exactly as an uninterrupted one would, bit for bit.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <thread>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "multigrad/autograd/autocast.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "cli/checkpoint_folder.h"
#include "cli/flags.h"
#include "cli/preflight.h"
#include "cli/commands.h"
#include "cli/models.h"
#include "multigrad/parallel/agree.h"
#include "multigrad/parallel/memory_model.h"
#include "multigrad/parallel/counting.h"
#include "multigrad/parallel/grad_norm.h"
#include "multigrad/parallel/mesh.h"
#include "multigrad/parallel/micro_batches.h"
#include "multigrad/parallel/mpi.h"
#include "multigrad/parallel/nccl.h"
#include "multigrad/parallel/pipeline.h"
#include "multigrad/parallel/tensor_parallel.h"
#include "multigrad/parallel/zero.h"
#include "multigrad/parallel/timeline.h"
#include "cli/peak.h"
#include "cli/progress.h"
#include "multigrad/core/allocator.h"
#include "multigrad/core/device.h"
#include "multigrad/core/error.h"
#include "multigrad/core/random.h"
#include "multigrad/data/data.h"
#include "multigrad/io/checkpoint.h"
#include "multigrad/io/safetensors.h"
#include "multigrad/io/sha256.h"
#include "multigrad/nn/gpt.h"
#include "multigrad/nn/models.h"
#include "multigrad/optim/adam.h"
#include "multigrad/optim/grad_scaler.h"
#include "multigrad/optim/lr_scheduler.h"
#include "multigrad/optim/sgd.h"
#include "multigrad/parallel/data_parallel.h"
#include "multigrad/parallel/ddp.h"
#include "multigrad/parallel/local.h"
#include "multigrad/parallel/micro_batches.h"

namespace mg::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The training set's pixel mean and standard deviation (after scaling to [0, 1]).
constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;
constexpr int64_t kEvalBatch = 1000;  // evaluation holds no graph, so large batches are cheap
constexpr double kBytesPerMiB = 1024.0 * 1024.0;
// --parallel tp: the hidden features that the first pair of Linear layers splits among the ranks
// (cli/models.cpp): the MLP's first hidden layer, the CNN's classifier (its convolutions, batch
// norms and pools stay whole on every rank, as Megatron keeps the layers it does not split).
constexpr int64_t kMlpSplitFeatures = 256, kCnnSplitFeatures = 128;
// Relative slack when matching a checkpoint's learning rate (stored as shortest round-trip text).
constexpr double kLrTolerance = 1e-12;
constexpr double kDefaultTimeoutSeconds = 300;  // DESIGN.md §8
// The GPT's validation text: the last tenth, as nanoGPT's character-level example holds out.
constexpr double kValidationFraction = 0.1;
// --model gpt's defaults (with adamw at 1e-3): 32 windows a step, a thousand steps; what they
// cost on a 2-core CPU is in README.
constexpr int64_t kGptBatch = 32, kGptSteps = 1000;
// --model gpt's default warmup: a tenth of the run, at most this many steps (nanoGPT's). Without
// it the default run stalled at the unigram loss (~3.3 nats) for hundreds of steps under some
// data orders, in PyTorch as in multigrad: benchmarks/NOTES.md, 2026-12-04.
constexpr int64_t kGptMaxWarmup = 100;
constexpr int64_t kBpeVocab = 512;  // --tokenizer bpe: 256 merges, about half the bytes' tokens

struct TrainOptions {
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
  bool detect_anomaly = false;
  bool no_memory_check = false;  // skip the memory preflight (cli/preflight.h)
};

// ---- set-up ----

// The devices named in a comma list, as written.
std::vector<Device> device_list(const std::string& list) {
  std::vector<Device> devices;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    MG_CHECK(!item.empty(), "--devices '", list, "': empty device name (expected e.g. cpu:0,cuda:1 or auto)");
    devices.emplace_back(item);
  }
  MG_CHECK(!devices.empty(), "--devices '", list, "': no device named (expected e.g. cpu:0,cuda:1 or auto)");
  return devices;
}

// The devices of --devices: a comma list, or "auto": with --parallel none cuda:0 when a GPU
// exists, else cpu:0; with dp or ddp every GPU, else cpu:0 and cpu:1; with a --mesh of
// `mesh_ranks` ranks, that many GPUs when there are, else cpu:0 .. cpu:<mesh_ranks - 1>. CPU
// devices are virtual, so the CPU device count grows to cover the highest index listed.
std::vector<Device> parse_devices(const std::string& list, bool parallel, int64_t mesh_ranks) {
  const int gpus = device_count(DeviceType::CUDA);
  std::vector<Device> devices;
  if (list == "auto") {
    if (mesh_ranks > 0) {
      for (int64_t i = 0; i < mesh_ranks; ++i)
        devices.emplace_back(gpus >= mesh_ranks ? DeviceType::CUDA : DeviceType::CPU, int(i));
    } else if (!parallel) {
      devices = {gpus > 0 ? Device("cuda:0") : Device("cpu:0")};
    } else if (gpus > 0) {
      for (int i = 0; i < gpus; ++i) devices.emplace_back(DeviceType::CUDA, i);
    } else {
      devices = {Device("cpu:0"), Device("cpu:1")};
    }
  } else {
    devices = device_list(list);
  }
  int cpus = device_count(DeviceType::CPU);
  for (const Device& d : devices) {
    if (d.is_cpu()) cpus = std::max(cpus, d.index() + 1);
  }
  if (cpus > device_count(DeviceType::CPU)) set_cpu_device_count(cpus);
  for (size_t i = 0; i < devices.size(); ++i) {
    check_device_exists(devices[i]);
    for (size_t j = 0; j < i; ++j) {
      MG_CHECK(devices[i] != devices[j], "--devices '", list, "': ", devices[i], " is listed twice");
    }
  }
  return devices;
}

// The files and the folder a run writes, checked before any work, so that a run does not train
// for an hour and then fail to save: a file's folder must exist and be writable, and the file must
// not be a folder; the checkpoint folder must be a writable folder or be creatable (its nearest
// existing ancestor a writable folder).
void check_output_paths(const TrainOptions& o) {
  const auto writable = [](const fs::path& folder) {
    return fs::is_directory(folder) && access(folder.c_str(), W_OK | X_OK) == 0;
  };
  for (const auto& [flag, file] : {std::pair<const char*, const std::string&>{"--metrics", o.metrics}, {"--trace", o.trace}}) {
    if (file.empty()) continue;
    const fs::path path(file), folder = path.parent_path().empty() ? fs::path(".") : path.parent_path();
    MG_CHECK(!fs::is_directory(path), flag, " ", file, " is a folder, expected a file");
    MG_CHECK(writable(folder), flag, " ", file, ": its folder ", folder.string(),
             fs::exists(folder) ? " is not a writable folder" : " does not exist");
  }
  if (o.checkpoint_dir.empty()) return;
  fs::path existing = fs::absolute(o.checkpoint_dir);
  while (!fs::exists(existing) && existing.has_parent_path() && existing != existing.parent_path())
    existing = existing.parent_path();
  MG_CHECK(writable(existing), "--checkpoint-dir ", o.checkpoint_dir, ": ", existing.string(),
           fs::is_directory(existing) ? " is not writable" : " is not a folder");
}

// --parallel zero1, zero2 or zero3: parallel::ZeroOptimizer.
bool sharded(const TrainOptions& o) { return o.parallel == "zero1" || o.parallel == "zero2" || o.parallel == "zero3"; }

// The size of --mesh's dimension `name`; none when --mesh does not name it.
std::optional<int64_t> mesh_size(const TrainOptions& o, const std::string& name) {
  if (o.mesh.empty()) return std::nullopt;
  for (const auto& [dim, size] : parallel::parse_mesh(o.mesh))
    if (dim == name) return size;
  return std::nullopt;
}

// A pipeline: --parallel pipeline, or a pp dimension in --mesh (its stages tensor-parallel groups).
bool pipelined(const TrainOptions& o) { return o.parallel == "pipeline" || mesh_size(o, "pp"); }

// The ranks of --mesh: the product of its sizes.
int64_t mesh_ranks(const TrainOptions& o) {
  int64_t ranks = 1;
  for (const auto& [name, size] : parallel::parse_mesh(o.mesh)) ranks *= size;
  return ranks;
}

void check_supported(const TrainOptions& o, size_t n_devices) {
  const std::string mode = o.mesh.empty() ? "--parallel " + o.parallel : "--mesh " + o.mesh;
  MG_CHECK(o.trace.empty() || pipelined(o) || o.parallel == "ddp", "--trace ", o.trace,
           " records the timeline of --parallel pipeline or ddp, or a --mesh with pp (got ", mode, ")");
  MG_CHECK(!pipelined(o) || o.grad_accum == 1, mode, " takes its micro-batches from ",
           "--micro-batches, not --grad-accum (got --grad-accum ", o.grad_accum, ")");
  MG_CHECK(!pipelined(o) || o.micro_batches <= o.batch_size, "--micro-batches ", o.micro_batches,
           " is larger than --batch-size ", o.batch_size, " (each micro-batch needs at least one example)");
  MG_CHECK(o.chunks == 0 || (pipelined(o) && o.schedule == "interleaved"), "--chunks ", o.chunks,
           " is for a pipeline's --schedule interleaved (got ", mode, " --schedule ", o.schedule, ")");
  MG_CHECK(o.parallel != "none" || n_devices == 1 || !o.mesh.empty(), "--devices lists ", n_devices,
           " devices but --parallel is none; pass --parallel dp or ddp to use them all");
  MG_CHECK(o.backend == "local" || o.parallel == "ddp" || sharded(o) || o.parallel == "tp" || o.parallel == "pipeline" ||
               !o.mesh.empty(),
           "--backend ", o.backend, " is for --parallel ddp, zero1, zero2, zero3, tp or pipeline (got --parallel ",
           o.parallel, ")");
  const int64_t split_features = o.model == "mlp" ? kMlpSplitFeatures : kCnnSplitFeatures;  // not the GPT's
  MG_CHECK(o.parallel != "tp" || o.model == "gpt" || split_features % int64_t(n_devices) == 0,
           "--parallel tp splits the ", o.model == "mlp" ? "MLP's " : "CNN classifier's ", split_features,
           " hidden features among the ranks: ", n_devices, " devices do not divide them");
  if (!o.mesh.empty()) {
    MG_CHECK(o.parallel == "none" || sharded(o), "--mesh ", o.mesh, " sets the parallel modes: drop --parallel ",
             o.parallel, " (zero1, zero2 or zero3 may join it: ZeRO in place of DDP across its dp dimension)");
    for (const auto& [name, size] : parallel::parse_mesh(o.mesh))
      MG_CHECK(name == "dp" || name == "tp" || name == "pp", "--mesh ", o.mesh, ": unknown dimension '", name,
               "' (dp: data parallelism, tp: tensor parallelism, pp: pipeline stages)");
    const int64_t ranks = mesh_ranks(o);
    const int64_t tp = mesh_size(o, "tp").value_or(1);
    const int64_t dp = mesh_size(o, "dp").value_or(1);
    MG_CHECK(dp == 1 || !pipelined(o) || !sharded(o), "--parallel ", o.parallel, " --mesh ", o.mesh,
             ": ZeRO across pipelines is not built yet (DDP is: drop --parallel)");
    MG_CHECK(dp == 1 || !pipelined(o) || o.micro_batches * dp <= o.batch_size, "--mesh ", o.mesh,
             ": each of the ", dp, " pipelines cuts its ", o.batch_size / dp, " rows of a batch into --micro-batches ",
             o.micro_batches, ", more than it has (raise --batch-size)");
    MG_CHECK(!sharded(o) || mesh_size(o, "dp"), "--parallel ", o.parallel, " shards across --mesh's dp dimension, and ",
             o.mesh, " has none");
    MG_CHECK(o.model == "gpt" || split_features % tp == 0, "--mesh ", o.mesh, ": tp splits the ",
             o.model == "mlp" ? "MLP's " : "CNN classifier's ", split_features, " hidden features among its ranks: ",
             tp, " do not divide them");
    MG_CHECK(int64_t(n_devices) == ranks || (n_devices == 1 && o.backend != "local"), "--mesh ", o.mesh, " has ",
             ranks, " ranks but --devices lists ", n_devices, " device", n_devices == 1 ? "" : "s",
             " (list one per rank, e.g. cpu:0..cpu:", ranks - 1, ", or leave --devices auto)");
  }
  MG_CHECK(o.precision == "fp16" || o.init_loss_scale == optim::GradScalerOptions{}.init_scale, "--init-loss-scale ",
           o.init_loss_scale, " is for --precision fp16 (got --precision ", o.precision, ")");
  const bool buckets = o.parallel == "ddp" || o.parallel == "zero1" || o.parallel == "zero2" ||
                       (o.parallel == "none" && mesh_size(o, "dp").value_or(1) > 1 && !pipelined(o));  // mesh's DDP
  MG_CHECK(!o.bucket_cap_mb || buckets, "--bucket-cap-mb ", *o.bucket_cap_mb,
           " sizes DDP's gradient buckets and zero1's and zero2's units (zero3's units are the layers); got ",
           o.mesh.empty() ? "--parallel " + o.parallel : "--mesh " + o.mesh + " --parallel " + o.parallel);
  MG_CHECK(o.grad_accum <= o.batch_size, "--grad-accum ", o.grad_accum, " is larger than --batch-size ",
           o.batch_size, " (each micro-batch needs at least one example)");
  MG_CHECK(!o.resume || !o.checkpoint_dir.empty(), "--resume needs --checkpoint-dir (where the checkpoints are)");
  MG_CHECK(!o.detect_anomaly || o.precision != "fp16", "--detect-anomaly stops at the first Inf, and --precision fp16 ",
           "makes them on purpose: its loss scaler skips the steps whose gradients overflow (use --precision fp32 or ",
           "bf16 to find where a NaN comes from)");
  const bool gpt = o.model == "gpt";
  MG_CHECK(gpt || (o.config == "small" && !o.context && !o.recompute && o.tokenizer == "bytes"),
           "--config, --context, --recompute and --tokenizer are for --model gpt (got --model ", o.model, ")");
  MG_CHECK(!o.sequence_parallel || (gpt && (o.parallel == "tp" || mesh_size(o, "tp"))),
           "--sequence-parallel is for --model gpt with tensor parallelism (--parallel tp, or a --mesh with tp; got ",
           "--model ", o.model, " ", mode, ")");
  MG_CHECK(!o.vocab_size || o.tokenizer == "bpe", "--vocab-size ", o.vocab_size.value_or(0),
           " is for --tokenizer bpe (got --tokenizer ", o.tokenizer, ")");
  MG_CHECK(o.checkpoint_every == 0 || !o.checkpoint_dir.empty(), "--checkpoint-every ", o.checkpoint_every,
           " needs --checkpoint-dir (where to write the checkpoints)");
  MG_CHECK(o.keep_last == 0 || !o.checkpoint_dir.empty(), "--keep-last ", o.keep_last,
           " needs --checkpoint-dir (the folder to keep them in)");
  check_output_paths(o);
}

struct Model {
  std::shared_ptr<nn::Module> net;
  bool flatten_input = false;  // the MLP takes (N, 784), the loader gives (N, 1, 28, 28)
};

// The held-out set is Fashion-MNIST's test split, or the GPT's validation text.
struct DataSets {
  std::shared_ptr<const data::Dataset> train;
  std::shared_ptr<const data::Dataset> test;
  const char* examples = "images";  // what one example is, for the first line
  const char* held_out = "test";
  std::shared_ptr<const data::Tokenizer> tokenizer;  // --model gpt
  double tokens_per_byte = 1;  // --model gpt: of the validation targets, for val_bpb
};

nn::GPTConfig gpt_config(const TrainOptions& o, int64_t vocab_size) {
  nn::GPTConfig config = nn::gpt_config(o.config, vocab_size);
  if (o.context) config.context = *o.context;
  return config;
}

Model make_model(const TrainOptions& o, const DataSets& data) {
  const bool gpt = o.model == "gpt";
  const auto net = build_model(o.model, gpt ? gpt_config(o, data.tokenizer->vocab_size()) : nn::GPTConfig{});
  if (gpt) std::dynamic_pointer_cast<nn::GPT>(net)->set_recompute(o.recompute);
  return {net, o.model == "mlp"};
}

// --lr and --weight-decay, their defaults resolved.
double lr_of(const TrainOptions& o) { return o.lr.value_or(o.optimizer == "sgd" ? 0.1 : 1e-3); }
double weight_decay_of(const TrainOptions& o) { return o.weight_decay.value_or(o.optimizer == "adamw" ? 1e-2 : 0); }

// The parameter groups: a GPT decays its matrices and embeddings only, as nanoGPT and llm.c do.
std::vector<optim::ParamGroup> param_groups(const TrainOptions& o, std::vector<Tensor> params) {
  if (o.model == "gpt") return optim::weight_decay_groups(params, weight_decay_of(o));
  return {{.params = std::move(params)}};
}

// --optimizer over `groups`.
std::unique_ptr<optim::Optimizer> optimizer_of(const TrainOptions& o, std::vector<optim::ParamGroup> groups) {
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

// The run's optimizer; with --parallel zero1, zero2 or zero3 it shards the state of --optimizer
// (zero2 the gradients too, zero3 the parameters of `net`'s layers too) across the data-parallel
// ranks `dp` (gradients summed: the losses are scaled by their share, as for DDP). With a mesh's
// tp, `net` is this rank's tp shard of the model, and ZeRO shards that.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, const std::shared_ptr<nn::Module>& net,
                                                 parallel::Communicator* dp) {
  if (!sharded(o)) return optimizer_of(o, param_groups(o, net->parameters()));
  const int stage = o.parallel.back() - '0';
  std::shared_ptr<nn::Sequential> layers;  // zero3's: the model's, or a GPT's (nn::GPT::layers)
  if (stage == 3) {
    const auto gpt = std::dynamic_pointer_cast<nn::GPT>(net);
    layers = gpt ? gpt->layers() : std::dynamic_pointer_cast<nn::Sequential>(net);
  }
  parallel::ZeroOptions options{.stage = stage, .reduce_op = parallel::ReduceOp::Sum};
  if (o.bucket_cap_mb) options.bucket_cap_mb = *o.bucket_cap_mb;
  return std::make_unique<parallel::ZeroOptimizer>(
      param_groups(o, net->parameters()), *dp,
      [&o](std::vector<optim::ParamGroup> groups) { return optimizer_of(o, std::move(groups)); }, options, layers);
}

// The first `limit` images of a split (all for 0); `flag` and `split` name them in the error.
std::shared_ptr<const data::Dataset> first_images(const data::FashionMNIST& full, int64_t limit, const char* flag,
                                                  const char* split) {
  if (limit == 0) return std::make_shared<data::TensorDataset>(full);
  MG_CHECK(limit <= full.size(), flag, " ", limit, " is larger than the ", split, " set (", full.size(), " images)");
  return std::make_shared<data::TensorDataset>(full.inputs().slice(0, 0, limit), full.targets().slice(0, 0, limit));
}

DataSets images(const TrainOptions& o) {
  const std::string root = o.data.value_or(data::kFashionMnistRoot);
  const data::FashionMNIST train_full(root, true);
  return {first_images(train_full, o.limit, "--limit", "training"),
          first_images(data::FashionMNIST(root, false), o.test_limit, "--test-limit", "test")};
}

// value with `digits` decimals.
std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

// --tokenizer bpe's merges, learnt from `text` with a line at every tenth of them and one for the
// vocabulary reached (the main process only; under mpirun every rank learns the same merges).
data::BpeTokenizer learn_bpe(const std::string& text, int64_t vocab) {
  const bool say = parallel::mpi_env_size() == 0 || parallel::mpi_env_rank() == 0;
  const auto start = Clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  const int64_t merges = vocab - data::ByteTokenizer::kVocabSize;
  if (say) std::cout << "bpe: learning up to " << merges << " merges from " << text.size() << " bytes\n" << std::flush;
  int64_t tenths = 0;
  data::BpeTokenizer bpe = data::BpeTokenizer::train(text, vocab, [&](int64_t reached) {
    const int64_t now = (reached - data::ByteTokenizer::kVocabSize) * 10 / std::max<int64_t>(merges, 1);
    if (!say || now <= tenths || reached == vocab) return;
    tenths = now;
    std::cout << "bpe: " << now * 10 << "% (" << reached << " of " << vocab << " tokens), " << fixed(seconds(), 1)
              << " s\n" << std::flush;
  });
  if (say) {
    std::cout << "bpe: a vocabulary of " << bpe.vocab_size() << " tokens in " << fixed(seconds(), 1) << " s"
              << (bpe.vocab_size() < vocab ? detail::str_cat(", fewer than --vocab-size ", vocab,
                                                             ": no pair of tokens is left that occurs twice")
                                           : "")
              << "\n" << std::flush;
  }
  return bpe;
}

// The text of --data, cut at nine tenths of its bytes: --tokenizer bpe learns its merges from the
// first part. Training takes every window of the first part's tokens (--limit: the first N
// windows), validation disjoint windows of the last part's (--test-limit: the first N).
// `tokenizer`, when given, is used instead (multigrad eval: the checkpoint's).
DataSets text_windows(const TrainOptions& o, std::shared_ptr<const data::Tokenizer> tokenizer = nullptr) {
  const std::string path = o.data.value_or(data::kFortunesRoot);
  const std::string text = data::read_text(path);
  const size_t split = text.size() - size_t(double(text.size()) * kValidationFraction);
  if (!tokenizer && o.tokenizer == "bytes") tokenizer = std::make_shared<data::ByteTokenizer>();
  if (!tokenizer) {
    const int64_t vocab = o.vocab_size.value_or(kBpeVocab);
    MG_CHECK(vocab >= data::ByteTokenizer::kVocabSize, "--vocab-size ", vocab, " must be at least ",
             data::ByteTokenizer::kVocabSize, " (the bytes)");
    tokenizer = std::make_shared<data::BpeTokenizer>(learn_bpe(text.substr(0, split), vocab));
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

// ---- the settings of a run: recorded in its checkpoints, compared across ranks ----

// The shortest text that reads back to `value`.
std::string number_text(double value) {
  char buffer[64];
  return std::string(buffer, std::to_chars(buffer, buffer + sizeof buffer, value).ptr);
}

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

// The settings that decide what a run computes (defaults resolved), as flags and values. Every
// checkpoint records them (info "run.<flag>"; one written before a flag existed passes), and
// --resume refuses another value: the resumed run would not continue the one that wrote it. The
// run's length (--epochs, --max-steps, --warmup-steps) is checked through the learning rate it
// gives at the checkpoint's step. The rest may change on resume: the devices, --parallel,
// --backend, --grad-accum, --micro-batches, --schedule, --chunks, --deterministic, --recompute,
// --sequence-parallel, --workers, --timeout, the outputs.
parallel::Settings result_settings(const TrainOptions& o, const DataSets& data) {
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

// Every flag of multigrad train is one of these two kinds; add_train_command refuses to build the
// command with a flag in neither, so a new flag is classified when it is added. The ranks of a
// run must agree on what decides its result and on what changes which collectives run (out of
// step, their collectives would not match: --trace gathers the ranks' timelines, --detect-anomaly
// stops one rank where the others go on); rank_settings compares them.
constexpr std::array<std::string_view, 43> kAgreedFlags = {
    "--model", "--data", "--config", "--context", "--tokenizer", "--vocab-size", "--recompute",
    "--sequence-parallel", "--precision", "--bucket-cap-mb", "--init-loss-scale", "--max-steps", "--eval-every",
    "--epochs", "--batch-size", "--lr", "--warmup-steps", "--lr-schedule", "--optimizer", "--momentum",
    "--weight-decay", "--clip-grad-norm", "--seed", "--limit", "--test-limit", "--parallel", "--mesh", "--backend",
    "--micro-batches", "--schedule", "--chunks", "--grad-accum", "--deterministic", "--checkpoint-dir",
    "--checkpoint-every", "--resume", "--keep-last", "--trace", "--detect-anomaly", "--timeout", "--metrics",
    "--overwrite", "--no-memory-check"};
// What each rank may set for itself: where it runs, and its data loader's threads.
constexpr std::array<std::string_view, 3> kPerRankFlags = {"--help", "--devices", "--workers"};

// What every rank of a run must agree on (kAgreedFlags, and this multigrad's version).
parallel::Settings rank_settings(const TrainOptions& o, const DataSets& data) {
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
    MG_CHECK(compared || unused, "rank_settings: the agreed flag ", flag, " is not compared (cli/train.cpp)");
  }
  return s;
}

constexpr const char* kLastStepKey = "run.last-step";  // and the step its run ends at
// --precision fp16: the loss scale and its growth tracker (optim/grad_scaler.h) at the checkpoint.
constexpr const char* kLossScaleKey = "grad_scaler.scale";
constexpr const char* kLossScaleTrackerKey = "grad_scaler.growth_tracker";
constexpr const char* kSkippedStepsKey = "grad_scaler.skipped_steps";  // written since it existed: 0 before

// The number a checkpoint's info records under `key`, or an error naming the file, the key and
// what it holds.
template <class T>
T info_number(const io::Checkpoint& ck, const std::string& path, const char* key) {
  const auto it = ck.info.find(key);
  MG_CHECK(it != ck.info.end(), "--resume: ", path, " records no '", key, "'");
  const std::string& text = it->second;
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  MG_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size(), "--resume: ", path, ": '", key,
           "' is '", text, "', expected a number");
  return value;
}

// --resume: the checkpoint's recorded settings are this run's (a checkpoint that records none,
// from an older multigrad, passes).
void check_resume_settings(const std::string& path, const io::Checkpoint& ck, const parallel::Settings& mine) {
  for (const auto& [flag, value] : mine) {
    const auto recorded = ck.info.find(std::string(kRunInfoPrefix) + flag);
    MG_CHECK(recorded == ck.info.end() || recorded->second == value, "--resume: ", path, " was written with ", flag,
             " '", recorded->second, "', this run has '", value,
             "': a resumed run keeps the settings that decide its result (README: resume), or starts afresh in "
             "another --checkpoint-dir");
  }
}

// The checkpoint --resume continues from: the furthest into the run that loads. An unreadable one
// (a crash mid-write cannot make one, a failing disk or a stray copy can) is skipped with a
// warning; an empty or missing folder is a fresh start, and says so.
std::optional<std::pair<CheckpointFile, io::Checkpoint>> resume_point(const std::string& dir,
                                                                      int64_t batches_per_epoch,
                                                                      const Device& device, bool main) {
  const std::vector<CheckpointFile> files = checkpoints_in(dir, batches_per_epoch);
  if (files.empty()) {
    if (main) std::cout << "resume: no checkpoint in " << dir << " yet, starting from the beginning\n" << std::flush;
    return std::nullopt;
  }
  std::string newest_error;
  for (const CheckpointFile& file : files) {
    try {
      return std::pair{file, load_checkpoint_noting(file.path, device, main)};
    } catch (const std::exception& e) {
      if (newest_error.empty()) newest_error = e.what();
      if (main) print_error_line("multigrad train: warning: --resume skips ", file.path, ": ", e.what());
    }
  }
  MG_ERROR("--resume: none of the ", files.size(), " checkpoints in ", dir, " can be read (the newest: ",
           newest_error, ")");
}

// A resumed run's --metrics file keeps the rows of the epochs its checkpoint holds: the others
// (written after that checkpoint, before the run stopped) are trained again and written again.
void keep_metrics_rows(const std::string& path, int64_t epochs) {
  std::ifstream in(path);
  std::string kept, line;
  for (bool header = true; std::getline(in, line); header = false) {
    int64_t epoch = 0;
    const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), epoch);
    if (header || (ec == std::errc() && *end == ',' && epoch <= epochs)) kept += line + "\n";
  }
  in.close();
  const std::string temp = path + ".tmp";
  std::ofstream(temp, std::ios::trunc) << kept;
  std::error_code ec;
  fs::rename(temp, path, ec);
  MG_CHECK(!ec, "--metrics: cannot replace ", path, " by ", temp, ": ", ec.message());
}

// ---- the loops ----

// A language model's predictions are per position: (B, T, V) logits against (B, T) next tokens.
// Every example has T of them, so a batch's mean over its positions weighs examples equally.
struct Totals {
  double loss_sum = 0;      // sum over examples of their (mean per position) loss
  int64_t correct = 0;      // predictions that were right
  int64_t predictions = 0;  // examples times positions
  int64_t samples = 0;
  double loss() const { return samples > 0 ? loss_sum / double(samples) : 0; }
  double accuracy() const { return predictions > 0 ? double(correct) / double(predictions) : 0; }
  void add(const Tensor& predicted, const Tensor& targets, double loss) {
    NoGradGuard no_grad;
    const int64_t n = targets.size(0);
    loss_sum += loss * double(n);
    correct += sum(eq(predicted, targets)).item<int64_t>();
    predictions += targets.numel();
    samples += n;
  }
};

// What trains in this process (or rank): the model, and the data-parallel wrapper if any.
struct Trainee {
  Model model;
  std::shared_ptr<parallel::DataParallel> dp;               // --parallel dp
  std::shared_ptr<parallel::DistributedDataParallel> ddp;  // --parallel ddp
  std::shared_ptr<parallel::Pipeline> pipeline;             // --parallel pipeline
  parallel::Communicator* comm = nullptr;                   // ddp, zero, pipeline per process: this rank's
  parallel::ZeroOptimizer* zero = nullptr;                  // --parallel zero1, zero2, zero3: the optimizer
  std::shared_ptr<nn::Module> whole;                        // tp: the one-device model (current after model_state())
  std::shared_ptr<nn::Sequential> whole_layers;             // tp: its layers, named as the shards are
  parallel::Communicator* dp_comm = nullptr;                // ddp, zero, a mesh's dp: the ranks that split the batch
  parallel::Communicator* tp_comm = nullptr;                // tp, a mesh's tp: the ranks that split the layers
  parallel::Communicator* vocab_comm = nullptr;  // a GPT's tp: its logits are this rank's columns of the vocabulary
  parallel::CountingCommunicator* tp_counter = nullptr;   // tp: times tp_comm's collectives
  double tp_comm_ms = 0;                                     // tp: their time in the training steps so far
  int64_t tp_steps = 0;
  std::optional<optim::GradScaler> scaler;                  // --precision fp16: dynamic loss scaling

  Tensor input(const Tensor& images) const { return model.flatten_input ? images.flatten(1) : images; }
  // Training forward, through the data-parallel wrapper or zero3's sharded model if any.
  Tensor forward(const Tensor& images) {
    if (dp) return dp->forward(input(images));
    if (ddp) return ddp->forward(input(images));
    if (zero && zero->stage() == 3) return zero->model().forward(input(images));
    return model.net->forward(input(images));
  }
  // zero3: every rank gathers the whole model, for rank 0's evaluation or checkpoint and each
  // rank's digest (until the next forward); a pipeline with a process (or rank) per stage: every
  // stage's parameters from the rank that trains them, on every rank; a no-op otherwise. Collective.
  void gather_parameters() {
    if (zero) zero->gather_parameters();
    if (pipeline) pipeline->synchronize_parameters();
  }
  // Evaluation forward: the module itself (DDP's would broadcast buffers while the other ranks
  // wait at a barrier), through the stages when they are on several devices.
  Tensor predict(const Tensor& images) {
    return pipeline ? pipeline->forward(input(images)) : model.net->forward(input(images));
  }
  // The mean loss of the logits against the targets (a language model's over every position), and
  // the classes they predict; with a vocabulary-parallel head, over every tp rank's columns.
  Tensor loss(const Tensor& logits, const Tensor& targets) const {
    if (!vocab_comm) return cross_entropy_flat(logits, targets);
    return parallel::vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.flatten(),
                                                  *vocab_comm);
  }
  Tensor predicted(const Tensor& logits) const {
    return vocab_comm ? parallel::vocab_parallel_argmax(logits, *vocab_comm) : argmax(logits, -1);
  }
  bool is_main() const { return comm == nullptr || comm->rank() == 0; }
  // A rank of data parallelism (ddp, zero): it computes its part of each batch.
  bool data_rank() const { return dp_comm != nullptr; }
  // Every rank evaluates (tensor parallelism's forward is collective), else rank 0 alone.
  bool evaluates() const { return whole != nullptr || is_main(); }
  // The model's state (tp: gathered into the one-device model, collectively).
  nn::StateDict model_state() const {
    if (!whole) return model.net->state_dict();
    whole_layers->load_state_dict(parallel::gather_tensor_parallel_state(*tp_layers(), *tp_comm));
    return whole->state_dict();
  }
  std::shared_ptr<nn::Sequential> tp_layers() const { return std::dynamic_pointer_cast<nn::Sequential>(model.net); }
};

// One global batch of b examples: forward and backward over this process's pieces (the file
// comment), leaving the gradients for the optimizer. Adds those pieces' examples to `totals`.
void run_batch(Trainee& t, const data::Batch& batch, int64_t grad_accum, Totals& totals) {
  const int64_t b = batch.inputs.size(0);
  if (t.pipeline) {
    // A mesh's dp: this pipeline's part of the batch, its losses scaled by their share of all b
    // rows; then the stage's gradients summed over the pipelines (in rank order with
    // --deterministic: DDP's sum, after each pipeline accumulated its micro-batches in order).
    const auto part = t.dp_comm ? parallel::split_batch(b, t.dp_comm->size())[size_t(t.dp_comm->rank())]
                                : parallel::MicroBatch{0, b};
    const parallel::PipelineStepResult r =
        t.pipeline->step(t.input(batch.inputs.slice(0, part.begin, part.end)),
                         batch.targets.slice(0, part.begin, part.end), t.scaler ? t.scaler->get_scale() : 1.0, b);
    totals.loss_sum += r.loss_sum, totals.correct += r.correct, totals.samples += r.samples;
    totals.predictions += r.predictions;
    if (t.dp_comm) {  // every gradient's all-reduce queued at once, in the same order on every rank
      std::vector<std::shared_ptr<parallel::Work>> reductions;
      for (const Tensor& p : t.model.net->parameters())
        if (p.grad().defined()) reductions.push_back(t.dp_comm->all_reduce(p.grad()));
      for (const auto& r : reductions) r->wait();
    }
    return;
  }
  parallel::MicroBatch mine{0, b};
  if (t.data_rank()) {
    const auto parts = parallel::split_batch(b, t.dp_comm->size());
    if (size_t(t.dp_comm->rank()) >= parts.size()) {
      // Fewer examples than ranks (an epoch's last batch): this rank still joins the reduction,
      // with an exactly zero gradient from one example.
      mul(t.loss(t.forward(batch.inputs.slice(0, 0, 1)), batch.targets.slice(0, 0, 1)), 0.0).backward();
      return;
    }
    mine = parts[size_t(t.dp_comm->rank())];
  }
  const auto micro = parallel::split_batch(mine.size(), grad_accum);
  for (size_t m = 0; m < micro.size(); ++m) {
    const int64_t begin = mine.begin + micro[m].begin, end = mine.begin + micro[m].end;
    // All but the last micro-batch only accumulate.
    std::optional<parallel::DistributedDataParallel::NoSync> no_sync;
    std::optional<parallel::ZeroOptimizer::NoSync> zero_no_sync;
    if (t.ddp && m + 1 < micro.size()) no_sync.emplace(*t.ddp);
    if (t.zero && m + 1 < micro.size()) zero_no_sync.emplace(*t.zero);
    const Tensor logits = t.forward(batch.inputs.slice(0, begin, end));
    // DataParallel computed its rows on several devices: each device's rows are a piece.
    const auto pieces = t.dp ? parallel::split_batch(end - begin, int64_t(t.dp->devices().size()))
                             : std::vector<parallel::MicroBatch>{{0, end - begin}};
    Tensor loss;
    for (const auto& piece : pieces) {
      const Tensor piece_logits = logits.slice(0, piece.begin, piece.end);
      const Tensor targets = batch.targets.slice(0, begin + piece.begin, begin + piece.end);
      const Tensor piece_loss = t.loss(piece_logits, targets);
      totals.add(t.predicted(piece_logits), targets, piece_loss.item<double>());
      const Tensor scaled = mul(piece_loss, double(piece.size()) / double(b));
      loss = loss.defined() ? add(loss, scaled) : scaled;
    }
    (t.scaler ? t.scaler->scale(loss) : loss).backward();
  }
}

// The totals over every rank (an all-reduce); as they are without a communicator.
Totals sum_over_ranks(const Totals& mine, parallel::Communicator* comm) {
  if (comm == nullptr) return mine;
  const Device host("cpu:0");
  Tensor t = Tensor::empty({4}, {DType::Float64, host});
  double* v = t.data<double>();
  v[0] = mine.loss_sum, v[1] = double(mine.correct), v[2] = double(mine.predictions), v[3] = double(mine.samples);
  t = t.to(comm->device());
  comm->all_reduce(t)->wait();
  const std::vector<double> all = t.to_vector<double>();
  return {all[0], int64_t(all[1]), int64_t(all[2]), int64_t(all[3])};
}

// --clip-grad-norm: the gradients of this process or rank scaled to the global norm max_norm. The
// norm is an exact sum of squares (optim/clip_grad.h), so every mode clips by the same bits: DDP's
// ranks each hold the whole reduced gradient; ZeRO's and a pipeline's processes hold disjoint parts
// and sum them (parallel::global_grad_norm).
void clip_gradients(Trainee& t, optim::Optimizer& optimizer, double max_norm) {
  const std::vector<Tensor> params = t.model.net->parameters();
  // Tensor parallelism: every rank's shards count, the parameters whole on every rank once (tp
  // rank 0's), in the optimizer's order.
  std::vector<bool> counted(optimizer.params().size(), true);
  if (t.whole) {
    const std::vector<parallel::TensorParallelSplit> splits = parallel::tensor_parallel_splits(*t.tp_layers());
    for (size_t i = 0; i < counted.size(); ++i) {
      const size_t k = size_t(std::find_if(params.begin(), params.end(), [&](const Tensor& p) {
                                return p.is_same(optimizer.params()[i]);
                              }) - params.begin());
      counted[i] = splits.at(k).dim >= 0 || t.tp_comm->rank() == 0;
    }
  }
  if (t.zero) {  // ZeRO's shards: over the dp ranks, and with tp (a mesh) every rank
    if (t.whole) {
      t.zero->clip_grad_norm(max_norm, *t.comm, counted);
    } else {
      t.zero->clip_grad_norm(max_norm);
    }
    return;
  }
  if (!(t.pipeline && t.comm) && !t.whole) {
    optim::clip_grad_norm(params, max_norm);
    return;
  }
  // A pipeline: this stage's gradients (the other stages' parameters have none here); tensor
  // parallelism: the counted ones; both (a mesh's tp x pp): each stage's counted ones, summed over
  // every rank.
  std::vector<Tensor> grads, counted_grads;
  for (size_t i = 0; i < counted.size(); ++i) {
    const Tensor grad = optimizer.params()[i].grad();
    if (!grad.defined()) continue;
    grads.push_back(grad);
    if (counted[i]) counted_grads.push_back(grad);
  }
  // Pipelines across a mesh's dp all hold the summed gradients: the first one's count.
  if (t.pipeline && t.dp_comm && t.dp_comm->rank() != 0) counted_grads.clear();
  parallel::Communicator& over = t.pipeline ? *t.comm : *t.tp_comm;
  optim::scale_to_norm(grads, parallel::global_grad_norm(over, optim::squares_of(counted_grads)), max_norm);
}

// One epoch, or what is left of it before step `last_step`: per global batch, run_batch, then
// one optimizer step (after clip_gradients with --clip-grad-norm); `schedule` (may be null)
// advances once per step, and `after_step` (may be empty) runs after each. Progress shows the loss
// and accuracy of every rank's examples so far, as the epoch's line does: the ranks sum their
// totals at each tenth of the epoch (the same steps on every rank; a pipeline's step already
// reports the whole batch). `samples_here`: the examples it will train on (the progress's 100 %).
Totals train_epoch(Trainee& t, optim::Optimizer& optimizer, optim::LRScheduler* schedule, data::DataLoader& loader,
                   int64_t grad_accum, double clip_grad_norm, EpochProgress* progress, int64_t& step,
                   int64_t last_step, int64_t samples_here, const std::function<void(int64_t)>& after_step) {
  t.model.net->train();
  Totals totals, shown;
  int64_t samples = 0;  // of the global batches
  int64_t tenths = 0;   // of the epoch's examples, when the ranks last summed their totals
  while (step < last_step) {
    std::optional<data::Batch> batch = loader.next();
    if (!batch) break;
    const double tp_ms_before = t.tp_counter ? t.tp_counter->ms() : 0;
    optimizer.zero_grad();
    run_batch(t, *batch, grad_accum, totals);
    // A NaN or infinite loss stops the run before the step it would poison: the parameters and
    // the last checkpoint stay as they were.
    MG_CHECK(std::isfinite(totals.loss_sum), "the training loss is ", totals.loss_sum, " at step ", step + 1,
             ": stopped before its optimizer step (try a lower --lr; --detect-anomaly names the op that made it)");
    if (clip_grad_norm > 0) {
      if (t.scaler) t.scaler->unscale(optimizer);  // clipping measures the true gradients
      clip_gradients(t, optimizer, clip_grad_norm);
    }
    if (t.scaler) {  // the step, unless a gradient overflowed on any rank
      t.scaler->step(optimizer, [&](bool mine) { return t.comm ? parallel::any_rank(*t.comm, mine) : mine; });
      t.scaler->update();
    } else {
      optimizer.step();
    }
    if (t.tp_counter) t.tp_comm_ms += t.tp_counter->ms() - tp_ms_before, ++t.tp_steps;
    if (schedule != nullptr) schedule->step();
    ++step;
    samples += batch->inputs.size(0);
    if (!t.data_rank()) {
      shown = totals;
    } else if (const int64_t now = samples * EpochProgress::kPlainSteps / samples_here; now > tenths) {
      tenths = now;
      shown = sum_over_ranks(totals, t.dp_comm);
    } else if (tenths == 0) {
      shown = totals;  // this rank's, until the first sum
    }
    if (progress) progress->update(samples, shown.loss(), shown.accuracy());
    if (after_step) after_step(step);
  }
  if (progress) progress->finish();
  return totals;
}

Totals evaluate(Trainee& t, data::DataLoader& loader) {
  t.model.net->eval();
  NoGradGuard no_grad;
  Totals totals;
  loader.start_epoch(0);
  while (std::optional<data::Batch> batch = loader.next()) {
    const Tensor logits = t.predict(batch->inputs);
    const Tensor targets = batch->targets.to(logits.device());
    totals.add(t.predicted(logits), targets, t.loss(logits, targets).item<double>());
  }
  t.model.net->train();
  return totals;
}

// SHA-256 over every parameter's raw bytes, in named_parameters() order, from contiguous
// host copies: equal digests mean bit-identical parameters.
std::string params_sha256(const nn::Module& net) {
  io::Sha256 hash;
  for (const Tensor& param : net.parameters()) {  // named_parameters() order
    const Tensor host = param.detach().to(Device("cpu:0")).contiguous();
    hash.update(host.data_ptr(), size_t(host.numel()) * host.element_size());
  }
  return hash.hex_digest();
}

int64_t parameter_count(const nn::Module& net) {
  int64_t count = 0;
  for (const Tensor& param : net.parameters()) count += param.numel();
  return count;
}

std::string join(const std::vector<Device>& devices) {
  std::string out;
  for (const Device& d : devices) out += (out.empty() ? "" : ",") + d.str();
  return out;
}

// What one process or rank reports at the end.
struct RunReport {
  Totals test;
  int64_t context = 0;  // --model gpt: tokens per example
  double tokens_per_byte = 1;  // --model gpt: of the validation text
  double flops_per_token = 0;  // --model gpt: nn::GPT::flops_per_token
  PeakFlops peak;              // of every device of the run, all ranks' together
  double samples_per_s = 0;
  std::string params_sha256;
  std::optional<parallel::DDPStats> ddp;
  std::optional<double> zero_comm_ms_per_step;  // --parallel zero1, zero2, zero3
  std::optional<double> tp_comm_ms_per_step;    // tp, a mesh's tp
  std::optional<std::pair<double, int64_t>> loss_scale;  // --precision fp16: the last, and the steps skipped
  std::optional<std::pair<double, double>> bubble;  // pipeline: measured, formula
  std::string bubble_formula;                       // pipeline: the formula, as text
  std::vector<parallel::TimelineEvent> trace;        // the last step's, with --trace
};

// --precision's autocast precision: fp32, bf16 or fp16 (CLI11 checked the name).
Precision precision_of(const std::string& name) {
  return name == "bf16" ? Precision::BFloat16 : name == "fp16" ? Precision::Float16 : Precision::Float32;
}

// Trains `net` (built from the seed, not yet moved) on `devices` — DataParallel's devices, or the
// one device of this process or rank, or the pipeline's stage devices — and evaluates it. Only the
// main process or rank 0 prints, writes metrics and checkpoints; every rank of a DDP run, or of a
// pipeline with a process per stage, calls it with its communicator.
RunReport train_replica(const TrainOptions& o, const DataSets& data, std::shared_ptr<nn::Module> net,
                        const std::vector<Device>& devices, parallel::Communicator* comm) {
  const Device device = devices.front();
  const bool gpt = o.model == "gpt";
  // --precision: training and evaluation in this thread, and the threads it starts, autocast.
  const AutocastGuard autocast(precision_of(o.precision));
  // --mesh: the grid of the ranks (made first: t's DDP and layers use its communicators).
  const std::unique_ptr<parallel::DeviceMesh> mesh =
      o.mesh.empty() ? nullptr : std::make_unique<parallel::DeviceMesh>(*comm, parallel::parse_mesh(o.mesh));
  Trainee t{{std::move(net), o.model == "mlp"}, nullptr, nullptr, nullptr, comm};
  // Who splits the batch, who the layers and who the stages: the whole communicator, or a mesh's
  // dimensions.
  parallel::Communicator* pp_comm = o.parallel == "pipeline" ? comm : nullptr;  // null: stage threads here
  if (mesh) {
    for (const auto& [name, size] : mesh->dims())
      (name == "dp" ? t.dp_comm : name == "tp" ? t.tp_comm : pp_comm) = &mesh->comm(name);
  } else if (o.parallel == "ddp" || sharded(o)) {
    t.dp_comm = comm;
  } else if (o.parallel == "tp") {
    t.tp_comm = comm;
  }
  // tp's layers talk through a counter that times their collectives (tp_comm_ms_per_step). Made
  // after t, it goes first: t's layers keep a pointer to it but do not talk while destroyed.
  std::optional<parallel::CountingCommunicator> tp_counter;
  if (t.tp_comm) {
    t.tp_counter = &tp_counter.emplace(*t.tp_comm);
    t.tp_comm = t.tp_counter;
  }
  if (t.tp_comm) {  // this rank's shards of the one-device model
    t.whole = t.model.net;
    if (gpt) {  // the layers share the GPT's position embedding and norms, which stay whole
      const auto& whole_gpt = dynamic_cast<const nn::GPT&>(*t.whole);
      t.whole_layers = whole_gpt.layers();
      // The token embedding and the head split by the vocabulary (Megatron's): no rank holds the
      // (B, T, V) logits.
      t.model.net = parallel::tensor_parallel_gpt(whole_gpt, *t.tp_comm,
                                                  {.sequence_parallel = o.sequence_parallel, .vocab_parallel = true});
      t.vocab_comm = t.tp_comm;
    } else {
      t.whole_layers = std::dynamic_pointer_cast<nn::Sequential>(t.whole);
      t.model.net = parallel::tensor_parallel_mlp(*t.whole_layers, *t.tp_comm);
    }
  }
  if (pipelined(o)) {  // the stages go to their devices
    // A GPT is cut by its layers (nn::GPT::layers: the embeddings, each block, ln_f, the tied head;
    // tensor_parallel_gpt's are those too).
    const auto model = gpt && !t.whole ? std::dynamic_pointer_cast<nn::GPT>(t.model.net)->layers()
                                       : std::dynamic_pointer_cast<nn::Sequential>(t.model.net);
    // Stage threads talk over the local backend, or NCCL's with --backend nccl.
    parallel::PipelineOptions options{
        .schedule = o.schedule,
        .micro_batches = o.micro_batches,
        .chunks = o.schedule == "interleaved" ? (o.chunks != 0 ? o.chunks : 2) : 1,
        .timeout = std::chrono::milliseconds(int64_t(o.timeout * 1000)),
        .run_ranks = o.backend == "nccl" ? parallel::RunRanks(parallel::run_ranks_nccl) : parallel::RunRanks()};
    if (t.vocab_comm) {  // the last stage's loss and predictions over the tp ranks' columns
      options.loss = [&t](const Tensor& logits, const Tensor& targets) { return t.loss(logits, targets); };
      options.predict = [&t](const Tensor& logits) { return t.predicted(logits); };
    }
    t.pipeline = pp_comm != nullptr ? std::make_shared<parallel::Pipeline>(model, *pp_comm, options)
                                    : std::make_shared<parallel::Pipeline>(model, devices, options);
  } else {
    t.model.net->to(device);
  }
  if (o.parallel == "dp") t.dp = std::make_shared<parallel::DataParallel>(t.model.net, devices);
  if (o.parallel == "ddp" || (mesh && t.dp_comm && !sharded(o) && !t.pipeline)) {
    parallel::DDPOptions options{.reduce_op = parallel::ReduceOp::Sum};  // losses scaled by share
    if (o.bucket_cap_mb) {  // the first bucket no larger than the others
      options.bucket_cap_mb = *o.bucket_cap_mb;
      options.first_bucket_mb = std::min(options.first_bucket_mb, *o.bucket_cap_mb);
    }
    t.ddp = std::make_shared<parallel::DistributedDataParallel>(t.model.net, *t.dp_comm, options);
  }
  const bool main = t.is_main();
  const std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(o, t.model.net, t.dp_comm);
  t.zero = dynamic_cast<parallel::ZeroOptimizer*>(optimizer.get());
  if (o.precision == "fp16") t.scaler.emplace(optim::GradScalerOptions{.init_scale = o.init_loss_scale});

  data::DataLoaderOptions loader_options{.batch_size = o.batch_size,
                                         .shuffle = true,
                                         .num_workers = o.workers,
                                         .pin_memory = device.is_cuda(),
                                         .device = device,
                                         .seed = o.seed};
  if (!gpt) loader_options.normalize = data::Normalize{kPixelMean, kPixelStd};
  data::DataLoader train_loader(data.train, loader_options);
  // A GPT's activations grow with the context (attention's T x T per head): it evaluates in
  // training-sized batches.
  loader_options.batch_size = gpt ? o.batch_size : kEvalBatch;
  loader_options.shuffle = false;
  data::DataLoader test_loader(data.test, loader_options);

  // --warmup-steps of linear warmup, then cosine annealing from --lr to 0 over the rest of the
  // run (or the rate held), stepped per batch.
  const int64_t all_steps = o.epochs * train_loader.num_batches();
  const int64_t last_step = o.max_steps > 0 ? std::min(o.max_steps, all_steps) : all_steps;
  const int64_t last_epoch = (last_step + train_loader.num_batches() - 1) / train_loader.num_batches();  // the run ends in
  const int64_t warmup = o.warmup_steps.value_or(gpt ? std::min(kGptMaxWarmup, last_step / 10) : 0);
  MG_CHECK(warmup < last_step, "--warmup-steps ", warmup, " must be fewer than the run's ", last_step, " steps");
  std::unique_ptr<optim::LRScheduler> schedule;
  if (o.lr_schedule == "cosine") {
    schedule = std::make_unique<optim::WarmupCosineLR>(*optimizer, warmup, last_step);
  } else if (warmup > 0) {
    schedule = std::make_unique<optim::LinearWarmup>(*optimizer, warmup);
  }

  const int64_t batches_per_epoch = train_loader.num_batches();
  // A pipeline cuts every batch into --micro-batches rows at least, the short last one of an
  // epoch too (when the run gets there).
  // With data parallelism across pipelines (a mesh's dp) each pipeline cuts its part.
  const int64_t short_rows = data.train->size() % o.batch_size;
  const int64_t pipelines = t.pipeline && t.dp_comm ? t.dp_comm->size() : 1;
  MG_CHECK(!t.pipeline || short_rows == 0 || short_rows >= o.micro_batches * pipelines ||
               last_step < batches_per_epoch,
           "--parallel pipeline: ", data.train->size(), " training ", data.examples, " in batches of ", o.batch_size,
           " leave a last batch of ", short_rows, " per epoch, fewer than --micro-batches ", o.micro_batches,
           pipelines > 1 ? detail::str_cat(" times the ", pipelines, " pipelines") : "",
           " (pick a --batch-size or --limit that leaves none or at least that many)");
  int64_t first_epoch = 1, step = 0;
  const parallel::Settings settings = result_settings(o, data);
  std::optional<std::pair<CheckpointFile, io::Checkpoint>> resumed;
  if (o.resume) resumed = resume_point(o.checkpoint_dir, batches_per_epoch, device, main);
  if (!o.resume) claim_checkpoint_folder(o.checkpoint_dir, o.overwrite, batches_per_epoch, settings, main);
  // A finished run (its checkpoint at its last step) extended by more epochs or steps: its rate
  // at that step was its own schedule's; from there on the rate is this run's.
  bool extending = false;
  if (resumed) {
    const auto& [file, ck] = *resumed;
    MG_CHECK(ck.step == file.step, "--resume: ", file.path, " is at step ", ck.step, " but its name puts it at step ",
             file.step, " (", batches_per_epoch,
             " batches per epoch): was it written with another --batch-size or --limit?");
    check_resume_settings(file.path, ck, settings);
    if (main) std::cout << "resume: from " << file.path << ", step " << ck.step << "\n";
    const auto last = ck.info.find(kLastStepKey);
    extending = last != ck.info.end() && last->second == std::to_string(ck.step) && last_step > ck.step;
    // The rate this run would be at: another --epochs, --max-steps, --lr, --lr-schedule or --warmup-steps than
    // the stopped run's gives another one, and the resumed run would not be its continuation.
    const double lr_here = schedule ? schedule->lr_at(ck.step) : optimizer->lr();
    t.gather_parameters();
    optim::OptimizerState optimizer_state{ck.optimizer_state, ck.optimizer_options};
    if (t.whole) {  // the checkpoint holds the one-device model: this rank's shards of it
      t.whole->load_state_dict(ck.model_state);
      parallel::load_tensor_parallel_state(*t.tp_layers(), t.whole_layers->state_dict(), *t.tp_comm);
      optimizer_state =
          parallel::shard_tensor_parallel_state(*t.tp_layers(), optimizer->params(), optimizer_state, *t.tp_comm);
    } else {
      t.model.net->load_state_dict(ck.model_state);
    }
    if (t.zero) t.zero->scatter_parameters();
    optimizer->load_state_dict(optimizer_state);
    if (t.scaler) {  // where the stopped run's loss scale had got to (its range checked by load)
      t.scaler->load(info_number<double>(ck, file.path, kLossScaleKey),
                     info_number<int64_t>(ck, file.path, kLossScaleTrackerKey),
                     ck.info.count(kSkippedStepsKey) ? info_number<int64_t>(ck, file.path, kSkippedStepsKey) : 0);
    }
    MG_CHECK(extending || std::abs(optimizer->lr() - lr_here) <= kLrTolerance * lr_here, "--resume: ", file.path,
             " has learning rate ", optimizer->lr(), " at step ", ck.step, " where this run's schedule has ", lr_here,
             ": resume with the --epochs, --max-steps, --lr, --lr-schedule and --warmup-steps of the run that wrote it");
    if (main && extending) {
      std::cout << "resume: extending the run that finished at step " << ck.step << " to step " << last_step
                << "; the learning rate goes on from this run's schedule at that step (" << lr_here << ")\n";
    }
    set_rng_state(ck.rng);
    if (schedule) schedule->set_last_epoch(ck.step);
    first_epoch = ck.step / batches_per_epoch + 1;
    step = ck.step;
  }
  if (main && !o.checkpoint_dir.empty()) {
    fs::create_directories(o.checkpoint_dir);
    for (const std::string& stale : io::remove_stale_temp_files(o.checkpoint_dir))
      std::cout << "checkpoints: removed " << stale << ", left by a write that was interrupted\n";
  }

  // mpirun gives its ranks a pseudo-terminal even when its own output goes to a file or a pipe.
  const bool terminal = isatty(STDOUT_FILENO) == 1 && parallel::mpi_env_size() == 0;
  if (main) {
    const std::string mode = t.dp         ? " (dp)"
                             : t.pipeline ? detail::str_cat(" (pipeline, ", o.schedule, ", ", o.backend, " backend)")
                                          : "";
    std::cout << "multigrad train: " << o.model << " (" << parameter_count(t.whole ? *t.whole : *t.model.net) << " parameters) on "
              << (comm != nullptr ? detail::str_cat(comm->size(), " ranks (",
                                                    mesh ? "mesh " + mesh->str() + (sharded(o) ? ", " + o.parallel : "")
                                                         : o.parallel,
                                                    ", ", o.backend, " backend)")
                                  : join(devices) + mode)
              << ", " << data.train->size() << " training / " << data.test->size() << " " << data.held_out << " "
              << data.examples << ", " << o.optimizer
              << " lr " << (schedule ? schedule->base_lr() : optimizer->lr()) << " " << o.lr_schedule
              << (warmup > 0 ? detail::str_cat(" (warmup ", warmup, ")") : "") << ", batch "
              << o.batch_size << " in " << (t.pipeline ? o.micro_batches : o.grad_accum) << " micro-batch(es)"
              << ", epochs " << first_epoch << ".." << last_epoch
              << (last_step < all_steps ? detail::str_cat(" (", last_step, " steps)") : "") << ", seed " << o.seed
              << (o.deterministic ? ", deterministic" : "")
              << (o.precision != "fp32" ? ", " + o.precision + " autocast" : "")
              << "\n" << std::flush;
  }

  std::ofstream metrics;
  if (main && !o.metrics.empty()) {
    const bool append = resumed && fs::exists(o.metrics);
    if (append) keep_metrics_rows(o.metrics, step / batches_per_epoch);
    metrics.open(o.metrics, append ? std::ios::app : std::ios::trunc);
    MG_CHECK(metrics.good(), "--metrics: cannot write ", o.metrics);
    if (!append)
      metrics << "epoch,train_loss,train_accuracy," << data.held_out << "_loss," << data.held_out
              << "_accuracy,samples_per_s,seconds\n";
  }

  std::optional<DetectAnomalyGuard> anomaly;
  if (o.detect_anomaly) anomaly.emplace();

  double train_seconds = 0;
  int64_t train_samples = 0;
  std::optional<Totals> test;
  // What a checkpoint holds besides the training state: the model's name and a GPT's sizes and
  // tokenizer (its name, and a BPE's merges as BpeTokenizer::to_text), for `multigrad generate`.
  std::map<std::string, std::string> info = {{"model", o.model}, {kLastStepKey, std::to_string(last_step)}};
  for (const auto& [flag, value] : settings) info.emplace(std::string(kRunInfoPrefix) + flag, value);
  if (gpt) {
    const std::map<std::string, std::string> sizes = nn::gpt_config_info(gpt_config(o, data.tokenizer->vocab_size()));
    info.insert(sizes.begin(), sizes.end());
    info.emplace("tokenizer", data.tokenizer->name());
    if (const auto* bpe = dynamic_cast<const data::BpeTokenizer*>(data.tokenizer.get()))
      info.insert({"bpe_merges", bpe->to_text()});
  }
  // Rank 0 writes; with --parallel zero1, zero2 or zero3 every rank takes part in the optimizer's
  // state_dict (it gathers the shards), and zero3's in gathering the model; with tp every rank
  // in gathering both into the one-device layout; a pipeline's stage processes each send the state
  // of the parameters they train.
  const auto save = [&](const std::string& path) {
    if (!main && !t.zero && !t.whole && !(t.pipeline && comm)) return;
    t.gather_parameters();
    optim::OptimizerState state = optimizer->state_dict();
    if (t.pipeline) state = t.pipeline->synchronize_optimizer_state(optimizer->params(), std::move(state));
    if (t.whole) state = parallel::gather_tensor_parallel_state(*t.tp_layers(), optimizer->params(), state, *t.tp_comm);
    const nn::StateDict model_state = t.model_state();
    if (!main) return;
    if (t.scaler) {
      info[kLossScaleKey] = number_text(t.scaler->get_scale());
      info[kLossScaleTrackerKey] = std::to_string(t.scaler->growth_tracker());
      info[kSkippedStepsKey] = std::to_string(t.scaler->skipped_steps());
    }
    io::save_checkpoint(path, {model_state, state.tensors, state.options, step, get_rng_state(), info});
    if (o.keep_last > 0) keep_last_checkpoints(o.checkpoint_dir, batches_per_epoch, step, o.keep_last);
  };
  // Between steps: --eval-every's evaluation (rank 0's while the others wait at a barrier) and
  // --checkpoint-every's checkpoints. The run's last step leaves both to the end of its epoch, an
  // epoch's last step its checkpoint.
  std::function<void(int64_t)> after_step;
  if (o.eval_every > 0 || (o.checkpoint_every > 0 && !o.checkpoint_dir.empty())) {
    after_step = [&](int64_t at) {
      if (at == last_step) return;
      if (o.eval_every > 0 && at % o.eval_every == 0) {
        t.gather_parameters();
        if (t.evaluates()) {
          const Totals held = evaluate(t, test_loader);
          if (main)
            std::cout << "step " << at << ": " << data.held_out << " loss " << fixed(held.loss(), 4) << " acc "
                      << fixed(held.accuracy(), 4) << "\n"
                      << std::flush;
        }
        if (comm != nullptr) comm->barrier()->wait();
      }
      if (o.checkpoint_every > 0 && at % o.checkpoint_every == 0 && at % batches_per_epoch != 0 &&
          !o.checkpoint_dir.empty()) {
        save(step_checkpoint_path(o.checkpoint_dir, at));
      }
    };
  }
  for (int64_t epoch = first_epoch; epoch <= o.epochs && step < last_step; ++epoch) {
    const auto start = Clock::now();
    // A run resumed inside this epoch skips the batches it trained on.
    const int64_t first_batch = epoch == first_epoch ? step - (epoch - 1) * batches_per_epoch : 0;
    train_loader.start_epoch(epoch - 1, first_batch);
    // Progress counts toward what this run trains of the epoch: from a resumed run's first batch
    // to the epoch's end, or to --max-steps' last step inside it.
    const int64_t end_batch = std::min(batches_per_epoch, last_step - (epoch - 1) * batches_per_epoch);
    const auto examples_in = [&](int64_t batches) { return std::min(batches * o.batch_size, train_loader.num_examples()); };
    const int64_t samples_here = examples_in(end_batch) - examples_in(first_batch);
    std::optional<EpochProgress> progress;
    if (main) progress.emplace(std::cout, terminal, epoch, last_epoch, samples_here);
    const Totals mine = train_epoch(t, *optimizer, schedule.get(), train_loader, o.grad_accum, o.clip_grad_norm,
                                    progress ? &*progress : nullptr, step, last_step, samples_here, after_step);
    // A pipeline's step already reports the whole batch on every rank, as tp's ranks do.
    const Totals train = sum_over_ranks(mine, t.dp_comm);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    train_seconds += seconds;
    train_samples += train.samples;
    t.gather_parameters();
    if (t.evaluates()) test = evaluate(t, test_loader);
    if (comm != nullptr) comm->barrier()->wait();  // the others wait while rank 0 evaluates
    if (main) {
      const double epoch_seconds = std::chrono::duration<double>(Clock::now() - start).count();
      const double rate = double(train.samples) / seconds;
      std::cout << "epoch " << epoch << "/" << last_epoch << ": train loss " << fixed(train.loss(), 4) << " acc "
                << fixed(train.accuracy(), 4) << ", " << data.held_out << " loss " << fixed(test->loss(), 4) << " acc "
                << fixed(test->accuracy(), 4) << ", " << fixed(rate, 0) << " samples/s, " << fixed(epoch_seconds, 1)
                << " s\n"
                << std::flush;
      if (metrics.is_open()) {
        metrics << epoch << "," << train.loss() << "," << train.accuracy() << "," << test->loss() << ","
                << test->accuracy() << "," << rate << "," << epoch_seconds << "\n"
                << std::flush;
      }
    }
    if (!o.checkpoint_dir.empty()) {
      save(step == epoch * batches_per_epoch ? epoch_checkpoint_path(o.checkpoint_dir, epoch)
                                             : step_checkpoint_path(o.checkpoint_dir, step));
    }
  }
  t.gather_parameters();  // for the evaluation and every rank's digest
  if (t.evaluates() && !test) test = evaluate(t, test_loader);

  RunReport report;
  if (test) report.test = *test;
  if (gpt) {
    report.context = gpt_config(o, data.tokenizer->vocab_size()).context;
    report.tokens_per_byte = data.tokens_per_byte;
    report.flops_per_token = dynamic_cast<const nn::GPT&>(t.whole ? *t.whole : *t.model.net).flops_per_token();
    // Every rank's devices are as this one's (a process per GPU, or CPU devices of equal budgets).
    const int ranks = comm != nullptr ? comm->size() : 1;
    // Processes that mpirun started on one host share its cores: a CPU device's peak is its share.
    const int local = parallel::mpi_env_local_size();
    const int threads = device.is_cpu() && comm != nullptr && local > 1
                            ? std::min(cpu_thread_budget(device),
                                       std::max(1, int(std::thread::hardware_concurrency()) / local))
                            : 0;
    const PeakFlops one = peak_flops(device, autocast_precision(), threads);  // the run's --precision
    const size_t n = devices.size() * size_t(ranks);
    report.peak = {one.flops_per_s * double(n), n == 1 ? one.how : detail::str_cat(n, " devices of ", one.how),
                   one.of};
  }
  report.samples_per_s = train_seconds > 0 ? double(train_samples) / train_seconds : 0;
  if (t.whole) {
    t.model_state();  // every rank: the digest of the one-device model
    report.params_sha256 = params_sha256(*t.whole);
  } else {
    report.params_sha256 = params_sha256(*t.model.net);
  }
  if (t.ddp) report.ddp = t.ddp->stats();
  if (const auto* zero = dynamic_cast<const parallel::ZeroOptimizer*>(optimizer.get()))
    report.zero_comm_ms_per_step = zero->steps() > 0 ? zero->comm_ms() / double(zero->steps()) : 0;
  if (t.tp_counter) report.tp_comm_ms_per_step = t.tp_steps > 0 ? t.tp_comm_ms / double(t.tp_steps) : 0;
  if (t.scaler) report.loss_scale = {t.scaler->get_scale(), t.scaler->skipped_steps()};
  if (t.pipeline) {
    report.bubble = {t.pipeline->measured_bubble(), t.pipeline->formula_bubble()};
    report.bubble_formula = t.pipeline->chunks() > 1 ? "(p-1)/(v m+p-1)" : "(p-1)/(m+p-1)";
  }
  if (!o.trace.empty()) report.trace = t.pipeline ? t.pipeline->events() : t.ddp->last_step_events();
  return report;
}

// The summary of rank 0 (or the only process), with every listed rank's params_sha256.
// A GPT reports its validation loss in nats per token and in bits per byte of text (through the
// validation targets' tokens per byte), and its tokens per second, in place of the test lines.
void print_summary(const RunReport& main, const std::vector<Device>& devices,
                   const std::vector<std::pair<int, std::string>>& rank_hashes) {
  if (main.context > 0) {
    std::cout << "val_loss: " << fixed(main.test.loss(), 4) << "\n"
              << "val_bpb: " << fixed(main.test.loss() / std::log(2.0) * main.tokens_per_byte, 4) << "\n"
              << "tokens_per_s: " << fixed(main.samples_per_s * double(main.context), 1) << "\n";
    // Model FLOPs utilisation: the FLOPs the tokens needed over what the devices could do.
    if (main.peak.flops_per_s > 0) {
      const double mfu = main.samples_per_s * double(main.context) * main.flops_per_token / main.peak.flops_per_s;
      std::cout << "mfu: " << fixed(mfu, 4) << " (of " << fixed(main.peak.flops_per_s / 1e9, 1)
                << " GFLOP/s " << main.peak.of << " peak: " << main.peak.how << ")\n";
    } else {
      std::cout << "mfu: unknown (" << main.peak.how << ")\n";
    }
  } else {
    std::cout << "test_accuracy: " << fixed(main.test.accuracy(), 4) << "\n"
              << "test_loss: " << fixed(main.test.loss(), 4) << "\n";
  }
  std::cout << "samples_per_s: " << fixed(main.samples_per_s, 1) << "\n"
            << "peak_memory_mb:";
  for (const Device& d : devices) std::cout << " " << d << "=" << fixed(double(memory_stats(d).peak) / kBytesPerMiB, 1);
  std::cout << "\n";
  if (main.bubble) {
    std::cout << "bubble_fraction: " << fixed(main.bubble->first, 4) << " (measured; formula " << main.bubble_formula
              << " = " << fixed(main.bubble->second, 4) << ")\n";
  }
  if (main.loss_scale) {
    std::cout << "loss_scale: " << number_text(main.loss_scale->first) << " (" << main.loss_scale->second
              << " steps skipped for an inf or NaN gradient)\n";
  }
  if (main.zero_comm_ms_per_step) std::cout << "comm_ms_per_step: " << fixed(*main.zero_comm_ms_per_step, 3) << "\n";
  // tp's all-reduces (and sequence parallelism's gathers) are waited for where they are issued:
  // on the critical path, none overlapped.
  if (main.tp_comm_ms_per_step) std::cout << "tp_comm_ms_per_step: " << fixed(*main.tp_comm_ms_per_step, 3) << "\n";
  if (main.ddp) {
    const parallel::DDPStats& s = *main.ddp;
    std::cout << "allreduce_overlap: " << fixed(s.overlap(), 3) << "\n"
              << "comm_ms_per_step: " << fixed(s.steps > 0 ? s.comm_ms / double(s.steps) : 0, 3) << "\n";
  }
  for (const auto& [rank, hash] : rank_hashes) {
    std::cout << "params_sha256: " << hash << (rank >= 0 ? detail::str_cat(" (rank ", rank, ")") : "") << "\n";
  }
  std::cout << std::flush;
}

// DDP or a pipeline with one rank per process, under mpirun: --backend mpi (CPU devices) or nccl
// (a GPU per process). The device: --devices auto is cpu:0 for mpi and cuda:<rank mod GPUs> for nccl; a
// list names one device for every rank, or one for all. A rank whose error escapes prints it
// and ends the whole job (parallel/mpi.h), so no rank waits for it until the timeout.
void run_train_per_process(const TrainOptions& o, const DataSets& data) {
  const int size = std::max(1, parallel::mpi_env_size()), rank = std::max(0, parallel::mpi_env_rank());
  try {
    const bool nccl = o.backend == "nccl";
    const int gpus = device_count(DeviceType::CUDA);
    const Device automatic = nccl ? Device(DeviceType::CUDA, gpus > 0 ? rank % gpus : 0) : Device("cpu:0");
    // Each process has its own devices, so ranks may well name the same one.
    const std::vector<Device> listed = o.devices == "auto" ? std::vector<Device>{automatic} : device_list(o.devices);
    MG_CHECK(listed.size() == 1 || int(listed.size()) == size, "--devices '", o.devices, "' lists ", listed.size(),
             " devices for ", size, " MPI ranks: name one for every rank, or one for all");
    const Device device = listed[listed.size() == 1 ? 0 : size_t(rank)];
    // CPU devices are virtual: the one named is made, as --devices does without MPI.
    if (device.is_cpu() && device.index() >= device_count(DeviceType::CPU)) set_cpu_device_count(device.index() + 1);
    check_device_exists(device);
    const std::unique_ptr<parallel::Communicator> comm = nccl ? parallel::nccl_world(device) : parallel::mpi_world(device);
    comm->set_timeout(std::chrono::milliseconds(int64_t(o.timeout * 1000)));
    // Processes started apart (mpirun's MPMD form, hosts with their own files) may disagree.
    parallel::check_ranks_agree(*comm, rank_settings(o, data));
    manual_seed(o.seed);
    const RunReport report = train_replica(o, data, make_model(o, data).net, {device}, comm.get());
    std::ostringstream mine;
    mine << "params_sha256: " << report.params_sha256 << " (rank " << comm->rank() << ")\n";
    std::vector<parallel::TimelineEvent> trace;
    if (!o.trace.empty()) trace = parallel::all_gather_events(*comm, report.trace);  // every rank's lanes
    if (comm->rank() == 0) {
      if (!o.trace.empty()) parallel::write_chrome_trace(o.trace, trace);
      print_summary(report, {device}, {});
      std::cout << mine.str() << std::flush;
    }
    comm->barrier()->wait();  // rank 0's summary first, then the others' digests
    if (comm->rank() != 0) std::cout << mine.str() << std::flush;
  } catch (const std::exception& e) {
    print_error_line("multigrad train: rank ", rank, " of ", size, ": ", e.what());
    parallel::mpi_abort(1);
  }
}

// The memory preflight's account of this run (cli/preflight.h), from sizes alone.
StepPlan step_plan(const TrainOptions& o, const DataSets& data, const std::vector<Device>& devices, bool per_process) {
  StepPlan plan;
  const bool gpt = o.model == "gpt";
  const nn::GPTConfig config = gpt ? gpt_config(o, data.tokenizer->vocab_size()) : nn::GPTConfig{};
  if (gpt) {
    plan.params = nn::gpt_parameter_count(config);
  } else {
    for (const Tensor& p : build_model(o.model)->parameters()) plan.params += p.numel();  // small: built
  }
  plan.state_per_param = o.optimizer == "sgd" ? (o.momentum > 0 ? 1 : 0) : 2;
  plan.ranks = per_process ? std::max(1, parallel::mpi_env_size()) : int64_t(devices.size());
  plan.replicated = o.mesh.empty() && (o.parallel == "none" || o.parallel == "dp" || o.parallel == "ddp");
  // The rows one micro-batch gives a replica (or the whole micro-batch, when the ranks split it otherwise).
  const int64_t micro = pipelined(o) ? o.micro_batches : o.grad_accum;
  const int64_t share = plan.replicated ? plan.ranks * micro : micro;
  const int64_t rows = (std::min(o.batch_size, data.train->size()) + share - 1) / share;
  if (gpt) {
    plan.activation_bytes = parallel::gpt_activation_bytes(rows, config.context, config.n_layer, config.n_embd,
                                                           config.vocab_size, o.recompute, o.precision == "fp32" ? 4 : 2);
    plan.activations_of = detail::str_cat(rows, " sequence", rows == 1 ? "" : "s", " of ", config.context, " tokens");
  } else if (o.model == "mlp") {
    plan.activation_bytes = parallel::mlp_activation_bytes(kMlpWidths, rows);
    plan.activations_of = detail::str_cat(rows, " images");
  } else {
    plan.activations_of = "the cnn's images (not counted)";
  }
  plan.devices_here = devices;
  return plan;
}

void run_train(const TrainOptions& o) {
  // One rank per process: --backend mpi, or nccl started by mpirun.
  const bool per_process = o.backend == "mpi" || (o.backend == "nccl" && parallel::mpi_env_size() > 0);
  const std::vector<Device> devices =
      per_process ? std::vector<Device>{Device("cpu:0")}
                  : parse_devices(o.devices, o.parallel != "none", o.mesh.empty() ? 0 : mesh_ranks(o));
  check_supported(o, devices.size());
  set_deterministic(o.deterministic);

  const DataSets data = o.model == "gpt" ? text_windows(o) : images(o);
  if (!o.no_memory_check) check_step_fits(step_plan(o, data, devices, per_process));

  if (per_process) return run_train_per_process(o, data);
  if (parallel::mpi_env_size() > 1) {  // every rank: in an MPMD job the others may have --backend mpi
    print_error_line("multigrad train: warning: rank ", parallel::mpi_env_rank(), " was started by mpirun as one of ",
                     parallel::mpi_env_size(), " processes, but with --backend ", o.backend,
                     ": each process trains on its own (pass --parallel ddp, zero1, zero2, zero3, tp or pipeline with --backend mpi)");
  }
  if (o.parallel != "ddp" && o.parallel != "tp" && !sharded(o) && o.mesh.empty()) {
    manual_seed(o.seed);
    const RunReport report = train_replica(o, data, make_model(o, data).net, devices, nullptr);
    if (!o.trace.empty()) parallel::write_chrome_trace(o.trace, report.trace);
    print_summary(report, devices, {{-1, report.params_sha256}});
    return;
  }

  // DDP, ZeRO or tp with one rank per device, each a thread (local or nccl). The replicas are built here,
  // one after another from the same seed (the global RNG is not for concurrent use), and DDP
  // checks and broadcasts them anyway.
  std::vector<std::shared_ptr<nn::Module>> nets;
  for (size_t r = 0; r < devices.size(); ++r) {
    manual_seed(o.seed);
    nets.push_back(make_model(o, data).net);
  }
  std::vector<RunReport> reports(devices.size());
  const auto rank_fn = [&](parallel::Communicator& comm) {
    comm.set_timeout(std::chrono::milliseconds(int64_t(o.timeout * 1000)));
    reports[size_t(comm.rank())] = train_replica(o, data, nets[size_t(comm.rank())], {comm.device()}, &comm);
  };
  if (o.backend == "nccl") {
    parallel::run_ranks_nccl(devices, rank_fn);
  } else {
    parallel::run_ranks(devices, rank_fn);
  }
  std::vector<std::pair<int, std::string>> hashes;
  std::vector<parallel::TimelineEvent> trace;
  for (size_t r = 0; r < reports.size(); ++r) {
    hashes.emplace_back(int(r), reports[r].params_sha256);
    trace.insert(trace.end(), reports[r].trace.begin(), reports[r].trace.end());
  }
  if (!o.trace.empty()) parallel::write_chrome_trace(o.trace, trace);
  print_summary(reports[0], devices, hashes);
}

// ---- multigrad eval: the held-out loss and accuracy of a checkpoint ----

struct EvalOptions {
  std::string checkpoint;
  std::optional<std::string> data;  // as multigrad train's --data
  int64_t test_limit = 0;
  std::string device = "auto";
  std::optional<int64_t> batch_size;  // default: kEvalBatch images, or kGptBatch windows
  std::optional<std::string> precision;  // default: the checkpoint's run's --precision
  bool no_memory_check = false;          // skip the check that a batch's logits fit
};

// The checkpoint's model (cli/models.h) on the held-out data that `multigrad train` evaluates
// on (Fashion-MNIST's test split, or the last tenth of --data's text in the checkpoint's
// tokenizer and context), with the summary lines of a run: the same numbers as the run's last
// evaluation, for the same data.
void run_eval(const EvalOptions& e) {
  const Device device = e.device == "auto" ? (device_count(DeviceType::CUDA) > 0 ? Device("cuda:0") : Device("cpu:0"))
                                           : Device(e.device);
  check_device_exists(device);
  const io::Checkpoint ck = load_checkpoint_noting(e.checkpoint, device);
  const std::shared_ptr<nn::Module> net = checkpoint_model(ck, e.checkpoint, device);
  TrainOptions o;
  o.model = ck.info.at("model");  // checkpoint_model checked it
  o.data = e.data;
  o.test_limit = e.test_limit;
  const bool gpt = o.model == "gpt";
  DataSets data;
  if (gpt) {
    o.context = std::dynamic_pointer_cast<nn::GPT>(net)->config().context;
    data = text_windows(o, checkpoint_tokenizer(ck.info, e.checkpoint));
  } else {
    data.test = first_images(data::FashionMNIST(o.data.value_or(data::kFashionMnistRoot), false), o.test_limit,
                             "--test-limit", "test");
  }
  data::DataLoaderOptions options{.batch_size = e.batch_size.value_or(gpt ? kGptBatch : kEvalBatch),
                                  .shuffle = false,
                                  .pin_memory = device.is_cuda(),
                                  .device = device};
  if (!gpt) options.normalize = data::Normalize{kPixelMean, kPixelStd};
  data::DataLoader loader(data.test, options);
  Trainee t{{net, o.model == "mlp"}, nullptr, nullptr, nullptr, nullptr};
  // The run evaluated at its --precision (recorded since checkpoints record settings; fp32 before).
  const auto recorded = ck.info.find(std::string(kRunInfoPrefix) + "--precision");
  const std::string precision = e.precision.value_or(recorded != ck.info.end() ? recorded->second : "fp32");
  MG_CHECK(precision == "fp32" || precision == "bf16" || precision == "fp16", e.checkpoint, ": its run's --precision ",
           "is '", precision, "', not one of fp32, bf16, fp16");
  std::cout << "multigrad eval: " << o.model << " (" << parameter_count(*net) << " parameters) of " << e.checkpoint
            << " (step " << ck.step << ") on " << device << ", " << data.test->size() << " " << data.held_out << " "
            << data.examples << ", " << precision << (e.precision ? " (--precision)" : " (the run's)") << "\n";
  if (!e.no_memory_check) {  // the logits of a batch, at least (the model is in memory already)
    const int64_t rows = std::min(options.batch_size, data.test->size());
    const int64_t positions = gpt ? rows * *o.context : rows;
    const int64_t classes = gpt ? data.tokenizer->vocab_size() : kMlpWidths.back();  // Fashion-MNIST's 10
    check_step_fits({.activation_bytes = positions * classes * (precision == "fp32" ? 4 : 2),
                     .activations_of = detail::str_cat(rows, " ", data.examples),
                     .devices_here = {device},
                     .training = false,
                     .remedy = "pass a smaller --batch-size"});
  }
  const AutocastGuard autocast(precision_of(precision));
  const Totals held = evaluate(t, loader);
  if (gpt) {
    std::cout << "val_loss: " << fixed(held.loss(), 4) << "\n"
              << "val_bpb: " << fixed(held.loss() / std::log(2.0) * data.tokens_per_byte, 4) << "\n"
              << "val_accuracy: " << fixed(held.accuracy(), 4) << "\n";
  } else {
    std::cout << "test_accuracy: " << fixed(held.accuracy(), 4) << "\n"
              << "test_loss: " << fixed(held.loss(), 4) << "\n";
  }
  std::cout << "params_sha256: " << params_sha256(*net) << "\n" << std::flush;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto options = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model on Fashion-MNIST and report test accuracy");
  TrainOptions& o = *options;
  cmd->add_option("--model", o.model, "mlp (784-256-128-10), cnn (nn::fashion_cnn) or gpt (nn::gpt on text)")
      ->check(CLI::IsMember({"mlp", "cnn", "gpt"}))
      ->capture_default_str();
  cmd->add_option("--data", o.data,
                  detail::str_cat("folder with the Fashion-MNIST IDX files (gzip or raw; default ", data::kFashionMnistRoot,
                                  "), or for gpt a text file or folder (default ", data::kFortunesRoot, ")"));
  cmd->add_option("--config", o.config, "--model gpt: tiny, small or gpt2 (nn/gpt.h)")
      ->check(CLI::IsMember({"tiny", "small", "gpt2"}))
      ->capture_default_str();
  cmd->add_option("--context", o.context, "--model gpt: tokens per window (default: the config's context)")
      ->check(sign_check(false));
  cmd->add_option("--tokenizer", o.tokenizer,
                  "--model gpt: bytes (256 ids), or bpe (byte-pair merges learnt from the training text; "
                  "the checkpoint keeps them)")
      ->check(CLI::IsMember({"bytes", "bpe"}))
      ->capture_default_str();
  cmd->add_option("--vocab-size", o.vocab_size,
                  detail::str_cat("--tokenizer bpe: ids, the 256 bytes and the merges (default ", kBpeVocab, ")"))
      ->check(sign_check(false));
  cmd->add_flag("--recompute", o.recompute,
                "--model gpt: keep only each block's input in forward and recompute its activations in backward "
                "(less memory, one more forward; gradients bit-identical)");
  cmd->add_flag("--sequence-parallel", o.sequence_parallel,
                "--model gpt with tensor parallelism: layer norms and residuals on sequence shards (Megatron's "
                "sequence parallelism: all-gathers and reduce-scatters in place of all-reduces, less activation "
                "memory); the context must divide among the tp ranks");
  cmd->add_option("--precision", o.precision,
                  "fp32; bf16 or fp16: matmuls, linears, convolutions and attention with bfloat16 or float16 "
                  "operands and results (float32 accumulation; float32 weights, optimizer and the other ops); bf16 "
                  "matmuls and linears in bf16 kernels on CUDA and CPUs with AVX-512 BF16, the rest emulated in "
                  "float32; fp16 with dynamic loss scaling (README: mixed precision)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--bucket-cap-mb", o.bucket_cap_mb,
                  "MiB of gradients per DDP bucket (each all-reduced as soon as backward fills it; the first at most "
                  "1 MiB) and of parameters per zero1/zero2 unit; default 25, as PyTorch's DDP")
      ->check(sign_check(false));
  cmd->add_option("--init-loss-scale", o.init_loss_scale,
                  "--precision fp16: the loss scale to start from (optim/grad_scaler.h: halved after a step with an "
                  "inf or NaN gradient, which is skipped; doubled after 2000 steps without)")
      ->check(range_check(0x1p-24, 0x1p127, "between 2^-24 and 2^127 (what a float32 loss scale holds)"))
      ->capture_default_str();
  cmd->add_option("--max-steps", o.max_steps,
                  detail::str_cat("stop after this many optimizer steps (0: train every --epochs); --model gpt's "
                                  "defaults: --max-steps ", kGptSteps, " --batch-size ", kGptBatch, " --optimizer adamw"))
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--eval-every", o.eval_every, "also evaluate every N steps (0: after every epoch only)")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--epochs", o.epochs, "epochs to train")->check(sign_check(false))->capture_default_str();
  cmd->add_option("--batch-size", o.batch_size, "global batch size (examples per optimizer step)")
      ->check(sign_check(false))
      ->capture_default_str();
  cmd->add_option("--lr", o.lr, "learning rate (default 0.1 for sgd, 1e-3 for adam and adamw)")
      ->check(sign_check(false));
  cmd->add_option("--warmup-steps", o.warmup_steps,
                  "steps of linear warmup to --lr before the schedule (default 0; --model gpt: a tenth of the run, "
                  "at most 100)")
      ->check(sign_check(true));
  cmd->add_option("--lr-schedule", o.lr_schedule, "cosine (from --lr to 0 over the run, per batch) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}))
      ->capture_default_str();
  cmd->add_option("--optimizer", o.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  cmd->add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--weight-decay", o.weight_decay, "weight decay (default 0; 1e-2 for adamw); --model gpt decays its 2-D parameters only")
      ->check(sign_check(true));
  cmd->add_option("--clip-grad-norm", o.clip_grad_norm,
                  "scale the gradients to this global L2 norm when larger, before each step (0: off); every "
                  "--parallel mode clips by the same norm, bit for bit")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of the initial parameters and of the data order")
      ->check(seed_check())
      ->capture_default_str();
  cmd->add_option("--limit", o.limit, "train on the first N training images only (0: all)")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--test-limit", o.test_limit, "evaluate on the first N test images only (0: all)")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--devices", o.devices,
                  "comma list (cpu:0,cpu:1,cuda:0) or auto: cuda:0 if a GPU exists, else cpu:0; with dp or ddp "
                  "every GPU, else cpu:0,cpu:1")
      ->capture_default_str();
  cmd->add_option("--parallel", o.parallel,
                  "none, dp (DataParallel), ddp (DistributedDataParallel), zero1 (ZeRO stage 1: DDP's split, the "
                  "optimizer state sharded across the ranks), zero2 (stage 2: the gradients too), zero3 (stage 3: "
                  "the parameters too, a layer gathered around its use), tp (tensor parallelism: the MLP's layers "
                  "split across the ranks) or pipeline (stages on the devices)")
      ->check(CLI::IsMember({"none", "dp", "ddp", "zero1", "zero2", "zero3", "tp", "pipeline"}))
      ->capture_default_str();
  cmd->add_option("--mesh", o.mesh,
                  "compose parallel modes on a grid of the ranks, in place of --parallel: dp=D,tp=T runs "
                  "DistributedDataParallel across D replicas of T-way tensor parallelism; tp=T,pp=P a pipeline of P "
                  "stages, each T-way tensor-parallel (--micro-batches, --schedule); D x T or T x P ranks; "
                  "with --parallel zero1|zero2|zero3, ZeRO in place of DDP across dp");
  cmd->add_option("--backend", o.backend,
                  "how ranks talk: local (one rank per device, threads), mpi (one rank per process: mpirun -np N "
                  "multigrad train --parallel ddp|pipeline --backend mpi) or nccl (ddp or pipeline on GPUs: threads, "
                  "or one process per GPU under mpirun)")
      ->check(CLI::IsMember({"local", "mpi", "nccl"}))
      ->capture_default_str();
  cmd->add_option("--micro-batches", o.micro_batches,
                  "--parallel pipeline or --mesh with pp: micro-batches per global batch")
      ->check(sign_check(false))
      ->capture_default_str();
  cmd->add_option("--schedule", o.schedule,
                  "--parallel pipeline or --mesh with pp: gpipe, 1f1b or interleaved (Megatron's interleaved 1F1B, "
                  "--chunks per device)")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))
      ->capture_default_str();
  cmd->add_option("--chunks", o.chunks,
                  "--schedule interleaved: model chunks per device (virtual stages), default 2; the model is cut "
                  "into devices x chunks pieces and --micro-batches must be a multiple of the devices")
      ->check(sign_check(false));
  cmd->add_option("--timeout", o.timeout, "seconds any collective may wait for the other ranks")
      ->check(range_check(0.001, 7 * 86400.0, "between 0.001 and 604800 seconds (a week)"))
      ->capture_default_str();
  cmd->add_option("--grad-accum", o.grad_accum, "micro-batches per global batch (parallel/micro_batches.h)")
      ->check(sign_check(false))
      ->capture_default_str();
  cmd->add_flag("--deterministic", o.deterministic,
                "results depend on the data alone: dp/ddp over N devices equal --grad-accum N, a pipeline "
                "--grad-accum M, bit for bit");
  cmd->add_option("--workers", o.workers, "data loader threads (0: on the training thread)")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", o.checkpoint_dir,
                  "write epoch-<E>.safetensors there after every epoch (step-<S>.safetensors where --max-steps "
                  "ends inside one)");
  cmd->add_option("--checkpoint-every", o.checkpoint_every,
                  "also write step-<S>.safetensors every N optimizer steps (0: after epochs only)")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_flag("--resume", o.resume,
                "continue from the checkpoint in --checkpoint-dir furthest into the run that can be read, also from "
                "inside an epoch; with none there, start from the beginning");
  cmd->add_flag("--overwrite", o.overwrite,
                "a run without --resume into a --checkpoint-dir that holds another run's checkpoints removes them "
                "first (without it, it is refused)");
  cmd->add_option("--keep-last", o.keep_last, "keep only the N latest checkpoints in --checkpoint-dir (0: all)")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--metrics", o.metrics, "per-epoch metrics CSV file");
  cmd->add_option("--trace", o.trace,
                  "write the last step's timeline as a Chrome trace (JSON; opens in Perfetto): pipeline stages, "
                  "or DDP's backward and all-reduces");
  cmd->add_flag("--detect-anomaly", o.detect_anomaly, "stop at the first op that produces NaN or Inf");
  cmd->add_flag("--no-memory-check", o.no_memory_check,
                "skip the check that a step fits the devices' memory, made before the model is built");
  for (const CLI::Option* option : cmd->get_options()) {
    const std::string flag = "--" + option->get_single_name();
    MG_CHECK(std::find(kAgreedFlags.begin(), kAgreedFlags.end(), flag) != kAgreedFlags.end() ||
                 std::find(kPerRankFlags.begin(), kPerRankFlags.end(), flag) != kPerRankFlags.end(),
             "multigrad train: the flag ", flag, " is in neither kAgreedFlags nor kPerRankFlags (cli/train.cpp): ",
             "say whether the ranks of a run must agree on it");
  }
  cmd->callback([options, cmd] {
    // A GPT's own defaults, for what the command line left unsaid.
    TrainOptions& o = *options;
    if (o.model == "gpt") {
      if (cmd->count("--optimizer") == 0) o.optimizer = "adamw";
      if (cmd->count("--batch-size") == 0) o.batch_size = kGptBatch;
      if (cmd->count("--max-steps") == 0) o.max_steps = kGptSteps;
    }
    for (const char* flag : {"--micro-batches", "--schedule"})  // their defaults are a pipeline's
      MG_CHECK(cmd->count(flag) == 0 || pipelined(o), flag, " is for a pipeline (--parallel pipeline, or a --mesh ",
               "with pp); got ", o.mesh.empty() ? "--parallel " + o.parallel : "--mesh " + o.mesh);
    run_train(o);
  });
}

void add_eval_command(CLI::App& app) {
  auto options = std::make_shared<EvalOptions>();
  EvalOptions& e = *options;
  CLI::App* cmd = app.add_subcommand("eval", "the held-out loss and accuracy of a checkpoint of multigrad train");
  cmd->add_option("--checkpoint", e.checkpoint, "a checkpoint of multigrad train (--checkpoint-dir)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--data", e.data,
                  detail::str_cat("as multigrad train's: the Fashion-MNIST folder (default ", data::kFashionMnistRoot,
                                  "), or a GPT's text (default ", data::kFortunesRoot, ")"));
  cmd->add_option("--test-limit", e.test_limit, "evaluate on the first N test images or validation windows (0: all)")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--device", e.device, "where the model runs: cpu:0, cuda:0, ... or auto (cuda:0 if a GPU exists)")
      ->capture_default_str();
  cmd->add_option("--batch-size", e.batch_size,
                  detail::str_cat("examples per forward (default ", kEvalBatch, " images, ", kGptBatch, " windows)"))
      ->check(sign_check(false));
  cmd->add_option("--precision", e.precision,
                  "fp32, bf16 or fp16 autocast, as multigrad train's (default: the precision of the run that wrote "
                  "the checkpoint, so that the numbers are its evaluation's)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_flag("--no-memory-check", e.no_memory_check,
                "skip the check that a batch's logits fit in the memory left once the model is loaded");
  cmd->callback([options] { run_eval(*options); });
}

}  // namespace mg::cli
