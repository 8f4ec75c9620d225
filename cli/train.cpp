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
// --parallel and --mesh name a layout (train::Plan, train/options.cpp's parallel_plan) that
// train::parallelize builds; how each layout computes a global batch is train/step.h's.
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
#include <sstream>
#include <string>
#include <vector>

#include "multigrad/autograd/autocast.h"
#include "multigrad/autograd/tape.h"
#include "cli/checkpoint_folder.h"
#include "cli/flags.h"
#include "cli/preflight.h"
#include "cli/commands.h"
#include "multigrad/train/named_models.h"
#include "multigrad/parallel/agree.h"
#include "multigrad/parallel/memory_model.h"
#include "multigrad/parallel/mesh.h"
#include "multigrad/parallel/mpi.h"
#include "multigrad/parallel/nccl.h"
#include "multigrad/parallel/pipeline.h"
#include "multigrad/train/parallelize.h"
#include "multigrad/train/options.h"
#include "multigrad/train/setup.h"
#include "multigrad/train/step.h"
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
#include "multigrad/optim/grad_scaler.h"
#include "multigrad/optim/lr_scheduler.h"
#include "multigrad/parallel/data_parallel.h"
#include "multigrad/parallel/ddp.h"
#include "multigrad/parallel/local.h"
namespace mg::cli {
namespace {

namespace fs = std::filesystem;
using namespace train;  // the run's options, set-up and step (train/)
using Clock = std::chrono::steady_clock;

constexpr double kBytesPerMiB = 1024.0 * 1024.0;
// Relative slack when matching a checkpoint's learning rate (stored as shortest round-trip text).
constexpr double kLrTolerance = 1e-12;

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

// One epoch, or what is left of it before step `last_step`: per global batch, train::train_step;
// `schedule` (may be null) advances once per step, and `after_step` (may be empty) runs after each.
// Progress shows the loss and accuracy of every rank's examples so far, as the epoch's line does:
// the ranks sum their totals at each tenth of the epoch (the same steps on every rank; a
// pipeline's step already reports the whole batch). `samples_here`: the examples it will train on
// (the progress's 100 %).
Totals train_epoch(train::ParallelModel& m, optim::Optimizer& optimizer, optim::LRScheduler* schedule,
                   data::DataLoader& loader, const train::StepOptions& step_options, EpochProgress* progress,
                   int64_t& step, int64_t last_step, int64_t samples_here,
                   const std::function<void(int64_t)>& after_step) {
  m.model.net->train();
  Metrics metrics;
  Totals shown;
  int64_t samples = 0;  // of the global batches
  int64_t tenths = 0;   // of the epoch's examples, when the ranks last summed their totals
  while (step < last_step) {
    std::optional<data::Batch> batch = loader.next();
    if (!batch) break;
    train::train_step(m, optimizer, *batch, step_options, metrics, step + 1);
    if (schedule != nullptr) schedule->step();
    ++step;
    samples += batch->inputs.size(0);
    if (!m.groups.dp) {
      if (progress) shown = metrics.totals();
    } else if (const int64_t now = samples * EpochProgress::kPlainSteps / samples_here; now > tenths) {
      tenths = now;
      shown = train::sum_over_ranks(metrics.totals(), m.groups.dp);
    } else if (tenths == 0 && progress) {
      shown = metrics.totals();  // this rank's, until the first sum
    }
    if (progress) progress->update(samples, shown.loss(), shown.accuracy());
    if (after_step) after_step(step);
  }
  if (progress) progress->finish();
  return metrics.totals();
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

// Trains `net` (built from the seed, not yet moved) on `devices` — DataParallel's devices, or the
// one device of this process or rank, or the pipeline's stage devices — and evaluates it. Only the
// main process or rank 0 prints, writes metrics and checkpoints; every rank of a DDP run, or of a
// pipeline with a process per stage, calls it with its communicator.
RunReport train_replica(const RunOptions& o, const DataSets& data, std::shared_ptr<nn::Module> net,
                        const std::vector<Device>& devices, parallel::Communicator* comm) {
  const Device device = devices.front();
  const bool gpt = o.model == "gpt";
  // --precision: training and evaluation in this thread, and the threads it starts, autocast.
  const AutocastGuard autocast(precision_of(o.precision));
  // --mesh: the grid of the ranks (made first: the model's DDP and layers use its communicators).
  const std::unique_ptr<parallel::DeviceMesh> mesh =
      o.mesh.empty() ? nullptr : std::make_unique<parallel::DeviceMesh>(*comm, parallel::parse_mesh(o.mesh));
  const train::Plan plan = parallel_plan(o, mesh != nullptr);
  const std::unique_ptr<train::ParallelModel> parallel_model =
      train::parallelize({std::move(net), o.model == "mlp"}, devices, run_groups(o, comm, mesh.get()), plan);
  train::ParallelModel& t = *parallel_model;
  const bool main = t.is_main();
  const std::unique_ptr<optim::Optimizer> optimizer = train::make_optimizer(
      t, plan, [&o](std::vector<Tensor> params) { return param_groups(o, std::move(params)); },
      [&o](std::vector<optim::ParamGroup> groups) { return optimizer_of(o, std::move(groups)); });
  const train::StepOptions step_options{.grad_accum = o.grad_accum, .clip_grad_norm = o.clip_grad_norm};

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
  const int64_t pipelines = t.pipeline && t.groups.dp ? t.groups.dp->size() : 1;
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
    t.load_model_state(ck.model_state);
    t.load_optimizer_state(*optimizer, {ck.optimizer_state, ck.optimizer_options});
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
    std::cout << "multigrad train: " << o.model << " (" << parameter_count(t.one_device_model()) << " parameters) on "
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
    const optim::OptimizerState state = t.optimizer_state(*optimizer);
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
          const Totals held = train::evaluate(t, test_loader);
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
    const Totals mine = train_epoch(t, *optimizer, schedule.get(), train_loader, step_options,
                                    progress ? &*progress : nullptr, step, last_step, samples_here, after_step);
    // A pipeline's step already reports the whole batch on every rank, as tp's ranks do.
    const Totals train = train::sum_over_ranks(mine, t.groups.dp);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    train_seconds += seconds;
    train_samples += train.samples;
    t.gather_parameters();
    if (t.evaluates()) test = train::evaluate(t, test_loader);
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
  if (t.evaluates() && !test) test = train::evaluate(t, test_loader);

  RunReport report;
  if (test) report.test = *test;
  if (gpt) {
    report.context = gpt_config(o, data.tokenizer->vocab_size()).context;
    report.tokens_per_byte = data.tokens_per_byte;
    report.flops_per_token = dynamic_cast<const nn::GPT&>(t.one_device_model()).flops_per_token();
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
  if (t.whole) t.model_state();  // every rank: the digest of the one-device model
  report.params_sha256 = train::params_sha256(t.one_device_model());
  if (t.ddp) report.ddp = t.ddp->stats();
  if (t.zero) report.zero_comm_ms_per_step = t.zero->steps() > 0 ? t.zero->comm_ms() / double(t.zero->steps()) : 0;
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
void run_train_per_process(const RunOptions& o, const DataSets& data) {
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
    const RunReport report = train_replica(o, data, make_model(o, data), {device}, comm.get());
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
StepPlan step_plan(const RunOptions& o, const DataSets& data, const std::vector<Device>& devices, bool per_process) {
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

void run_train(const RunOptions& o) {
  // One rank per process: --backend mpi, or nccl started by mpirun.
  const bool per_process = o.backend == "mpi" || (o.backend == "nccl" && parallel::mpi_env_size() > 0);
  const std::vector<Device> devices =
      per_process ? std::vector<Device>{Device("cpu:0")}
                  : parse_devices(o.devices, o.parallel != "none", o.mesh.empty() ? 0 : mesh_ranks(o));
  check_options(o, devices.size());
  set_deterministic(o.deterministic);

  // --tokenizer bpe's progress: the main process's (under mpirun every rank learns the same merges).
  const bool say = parallel::mpi_env_size() == 0 || parallel::mpi_env_rank() == 0;
  const DataSets data = o.model == "gpt" ? text_windows(o, nullptr, say ? &std::cout : nullptr) : images(o);
  if (!o.no_memory_check) check_step_fits(step_plan(o, data, devices, per_process));

  if (per_process) return run_train_per_process(o, data);
  if (parallel::mpi_env_size() > 1) {  // every rank: in an MPMD job the others may have --backend mpi
    print_error_line("multigrad train: warning: rank ", parallel::mpi_env_rank(), " was started by mpirun as one of ",
                     parallel::mpi_env_size(), " processes, but with --backend ", o.backend,
                     ": each process trains on its own (pass --parallel ddp, zero1, zero2, zero3, tp or pipeline with --backend mpi)");
  }
  if (o.parallel != "ddp" && o.parallel != "tp" && !sharded(o) && o.mesh.empty()) {
    manual_seed(o.seed);
    const RunReport report = train_replica(o, data, make_model(o, data), devices, nullptr);
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
    nets.push_back(make_model(o, data));
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

}  // namespace

void add_train_command(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model on Fashion-MNIST and report test accuracy");
  RunOptions& o = *options;
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
    RunOptions& o = *options;
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

}  // namespace mg::cli
