// train/options.cpp — the checks and derivations of train/options.h.
#include "multigrad/train/options.h"

#include <unistd.h>

#include <filesystem>

#include "multigrad/core/error.h"
#include "multigrad/core/ledger.h"
#include "multigrad/parallel/comm/local.h"
#include "multigrad/parallel/mesh.h"
#include "multigrad/parallel/comm/nccl.h"

namespace mg::train {
namespace {

namespace fs = std::filesystem;

// The files and the folder a run writes, checked before any work, so that a run does not train
// for an hour and then fail to save: a file's folder must exist and be writable, and the file must
// not be a folder; the checkpoint folder must be a writable folder or be creatable (its nearest
// existing ancestor a writable folder).
void check_output_paths(const RunOptions& o) {
  const auto writable = [](const fs::path& folder) {
    return fs::is_directory(folder) && access(folder.c_str(), W_OK | X_OK) == 0;
  };
  for (const auto& [flag, file] : {std::pair<const char*, const std::string&>{"--metrics", o.metrics},
                                   {"--trace", o.trace},
                                   {"--ledger", o.ledger}}) {
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

}  // namespace

// --parallel zero1, zero2 or zero3: parallel::ZeroOptimizer.
bool sharded(const RunOptions& o) { return o.parallel == "zero1" || o.parallel == "zero2" || o.parallel == "zero3"; }

// The size of --mesh's dimension `name`; none when --mesh does not name it.
std::optional<int64_t> mesh_size(const RunOptions& o, const std::string& name) {
  if (o.mesh.empty()) return std::nullopt;
  for (const auto& [dim, size] : parallel::parse_mesh(o.mesh))
    if (dim == name) return size;
  return std::nullopt;
}

// A pipeline: --parallel pipeline, or a pp dimension in --mesh (its stages tensor-parallel groups).
bool pipelined(const RunOptions& o) { return o.parallel == "pipeline" || mesh_size(o, "pp"); }

// The ranks of --mesh: the product of its sizes.
int64_t mesh_ranks(const RunOptions& o) {
  int64_t ranks = 1;
  for (const auto& [name, size] : parallel::parse_mesh(o.mesh)) ranks *= size;
  return ranks;
}

void check_options(const RunOptions& o, size_t n_devices) {
  const std::string mode = o.mesh.empty() ? "--parallel " + o.parallel : "--mesh " + o.mesh;
  MG_CHECK(o.trace.empty() || pipelined(o) || o.parallel == "ddp", "--trace ", o.trace,
           " records the timeline of --parallel pipeline or ddp, or a --mesh with pp (got ", mode, ")");
  MG_CHECK(o.ledger.empty() || cuda_ledger_available(), "--ledger ", o.ledger,
           ": the CUDA ledger is kept by the simulated CUDA build only (cmake -DMG_CUDA_SIM=ON, as make test "
           "builds build-sim/)");
  MG_CHECK(!o.ledger_step || !o.ledger.empty(), "--ledger-step ", *o.ledger_step, " says which step --ledger records ",
           "(no --ledger given)");
  MG_CHECK(!o.ledger_step || *o.ledger_step >= 1, "--ledger-step must be at least 1, got ", *o.ledger_step);
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

// The held-out set is Fashion-MNIST's test split, or the GPT's validation text.

nn::GPTConfig gpt_config(const RunOptions& o, int64_t vocab_size) {
  nn::GPTConfig config = nn::gpt_config(o.config, vocab_size);
  if (o.context) config.context = *o.context;
  return config;
}

// --lr and --weight-decay, their defaults resolved.
Precision precision_of(const std::string& name) {
  MG_CHECK(name == "fp32" || name == "bf16" || name == "fp16", "--precision '", name, "' is not one of fp32, bf16, fp16");
  return name == "bf16" ? Precision::BFloat16 : name == "fp16" ? Precision::Float16 : Precision::Float32;
}

double lr_of(const RunOptions& o) { return o.lr.value_or(o.optimizer == "sgd" ? 0.1 : 1e-3); }
double weight_decay_of(const RunOptions& o) { return o.weight_decay.value_or(o.optimizer == "adamw" ? 1e-2 : 0); }

// The layout of the run's model (train/parallelize.h) that --parallel and --mesh name.
train::Plan parallel_plan(const RunOptions& o, bool mesh) {
  train::Plan plan{.data = o.parallel,
                   .pipeline = pipelined(o),
                   .sequence_parallel = o.sequence_parallel,
                   .bucket_cap_mb = o.bucket_cap_mb};
  // A mesh's dp without ZeRO is DDP's (across pipelines: their gradients summed after each step).
  if (mesh) plan.data = sharded(o) ? o.parallel : mesh_size(o, "dp") ? "ddp" : "none";
  if (o.parallel == "tp" || o.parallel == "pipeline") plan.data = "none";
  if (plan.pipeline) {
    // Stage threads talk over the local backend, or NCCL's with --backend nccl.
    plan.pipeline_options = {
        .schedule = o.schedule,
        .micro_batches = o.micro_batches,
        .chunks = o.schedule == "interleaved" ? (o.chunks != 0 ? o.chunks : 2) : 1,
        .timeout = std::chrono::milliseconds(int64_t(o.timeout * 1000)),
        .run_ranks = o.backend == "nccl" ? parallel::RunRanks(parallel::run_ranks_nccl) : parallel::RunRanks()};
  }
  if (o.precision == "fp16") plan.loss_scaling = optim::GradScalerOptions{.init_scale = o.init_loss_scale};
  return plan;
}

Groups run_groups(const RunOptions& o, parallel::Communicator* world, const parallel::DeviceMesh* mesh) {
  if (mesh) return mesh_groups(*mesh, *world);
  Groups groups{.world = world};
  if (o.parallel == "ddp" || sharded(o)) groups.dp = world;
  if (o.parallel == "tp") groups.tp = world;
  if (o.parallel == "pipeline") groups.pp = world;  // null: stage threads on the devices
  return groups;
}

}  // namespace mg::train
