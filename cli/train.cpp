// cli/train.cpp — `multigrad train`: trains the MLP or the CNN on Fashion-MNIST on one device,
// evaluates on the test set after every epoch, checkpoints, and ends with `key: value` lines
// (test_accuracy, test_loss, samples_per_s, peak_memory_mb per device, params_sha256).
//
// Reproducibility: the initial parameters come from mg::manual_seed(--seed), and the order of
// the training examples in epoch e from (seed, e) alone (data::RandomSampler), never from the
// worker count. A checkpoint holds the model (parameters and buffers), the optimizer state,
// the step and the global RNG state; `epoch-<E>.safetensors` is written after epoch E, so a
// resumed run replays epochs E+1... exactly as an uninterrupted one would, bit for bit.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/nn_ops.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "cli/commands.h"
#include "cli/micro_batches.h"
#include "cli/progress.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/random.h"
#include "data/data.h"
#include "io/checkpoint.h"
#include "io/sha256.h"
#include "nn/models.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"

namespace mg::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The training set's pixel mean and standard deviation (after scaling to [0, 1]).
constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;
constexpr int64_t kEvalBatch = 1000;  // evaluation holds no graph, so large batches are cheap
constexpr double kBytesPerMiB = 1024.0 * 1024.0;
// Relative slack when matching a checkpoint's learning rate (stored as shortest round-trip text).
constexpr double kLrTolerance = 1e-12;
// The issues that bring what this command still refuses.
constexpr const char* kDataParallelIssue = "issue 5 (data parallelism)";
constexpr const char* kPipelineIssue = "issue 6 (pipeline model parallelism)";

struct TrainOptions {
  std::string model = "mlp";
  std::string data = data::kFashionMnistRoot;
  int64_t epochs = 3;
  int64_t batch_size = 128;
  std::optional<double> lr;            // default: 0.1 for sgd, 1e-3 for adam and adamw
  std::string lr_schedule = "cosine";  // or "constant"
  std::string optimizer = "sgd";
  double momentum = 0.9;               // sgd only
  std::optional<double> weight_decay;  // default: 0, or PyTorch's 1e-2 for adamw
  uint64_t seed = 0;
  int64_t limit = 0;                   // 0: the whole training set
  std::string devices = "auto";
  std::string parallel = "none";
  int64_t grad_accum = 1;
  bool deterministic = false;
  int workers = 1;
  std::string checkpoint_dir;
  bool resume = false;
  std::string metrics;
  std::string trace;
  bool detect_anomaly = false;
};

// ---- set-up ----

// The devices of --devices: "auto" (cuda:0 when a GPU exists, else cpu:0) or a comma list.
std::vector<Device> parse_devices(const std::string& list) {
  if (list == "auto") return {device_count(DeviceType::CUDA) > 0 ? Device("cuda:0") : Device("cpu:0")};
  std::vector<Device> devices;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    MG_CHECK(!item.empty(), "--devices '", list, "': empty device name (expected e.g. cpu:0,cuda:1 or auto)");
    const Device device(item);
    check_device_exists(device);
    devices.push_back(device);
  }
  MG_CHECK(!devices.empty(), "--devices '", list, "': no device named (expected e.g. cpu:0,cuda:1 or auto)");
  return devices;
}

void check_supported(const TrainOptions& o) {
  MG_CHECK(o.parallel == "none", "--parallel ", o.parallel, " arrives with ",
           o.parallel == "pipeline" ? kPipelineIssue : kDataParallelIssue, "; only --parallel none runs today");
  MG_CHECK(o.trace.empty(), "--trace ", o.trace, ": the timeline arrives with ", kPipelineIssue);
  MG_CHECK(o.grad_accum <= o.batch_size, "--grad-accum ", o.grad_accum, " is larger than --batch-size ",
           o.batch_size, " (each micro-batch needs at least one example)");
  MG_CHECK(!o.resume || !o.checkpoint_dir.empty(), "--resume needs --checkpoint-dir (where the checkpoints are)");
}

struct Model {
  std::shared_ptr<nn::Module> net;
  bool flatten_input = false;  // the MLP takes (N, 784), the loader gives (N, 1, 28, 28)

  Tensor forward(const Tensor& images) { return net->forward(flatten_input ? images.flatten(1) : images); }
};

Model make_model(const std::string& name) {
  if (name == "mlp") return {nn::mlp({784, 256, 128, 10}), true};
  return {nn::fashion_cnn(), false};
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, std::vector<Tensor> params) {
  if (o.optimizer == "sgd") {
    return std::make_unique<optim::SGD>(
        std::move(params), optim::SGDOptions{.lr = o.lr.value_or(0.1), .momentum = o.momentum,
                                             .weight_decay = o.weight_decay.value_or(0)});
  }
  if (o.optimizer == "adam") {
    return std::make_unique<optim::Adam>(
        std::move(params), optim::AdamOptions{.lr = o.lr.value_or(1e-3), .weight_decay = o.weight_decay.value_or(0)});
  }
  return std::make_unique<optim::AdamW>(
      std::move(params), optim::AdamWOptions{.lr = o.lr.value_or(1e-3), .weight_decay = o.weight_decay.value_or(1e-2)});
}

std::shared_ptr<const data::Dataset> training_set(const data::FashionMNIST& full, int64_t limit) {
  if (limit == 0) return std::make_shared<data::TensorDataset>(full);
  MG_CHECK(limit <= full.size(), "--limit ", limit, " is larger than the training set (", full.size(), " images)");
  return std::make_shared<data::TensorDataset>(full.inputs().slice(0, 0, limit), full.targets().slice(0, 0, limit));
}

// ---- checkpoints: <dir>/epoch-<E>.safetensors, written after epoch E ----

std::string checkpoint_path(const std::string& dir, int64_t epoch) {
  return (fs::path(dir) / ("epoch-" + std::to_string(epoch) + ".safetensors")).string();
}

// The highest epoch with a checkpoint in `dir`; throws when there is none.
int64_t latest_checkpoint_epoch(const std::string& dir) {
  MG_CHECK(fs::is_directory(dir), "--resume: checkpoint folder ", dir, " does not exist");
  static const std::regex kName(R"(epoch-([0-9]+)\.safetensors)");
  int64_t latest = -1;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, kName)) latest = std::max<int64_t>(latest, std::stoll(match[1].str()));
  }
  MG_CHECK(latest >= 0, "--resume: no checkpoint (epoch-<N>.safetensors) in ", dir);
  return latest;
}

// ---- the loops ----

struct Totals {
  double loss_sum = 0;  // sum over examples of their loss
  int64_t correct = 0;
  int64_t samples = 0;
  double loss() const { return samples > 0 ? loss_sum / double(samples) : 0; }
  double accuracy() const { return samples > 0 ? double(correct) / double(samples) : 0; }
};

int64_t count_correct(const Tensor& logits, const Tensor& targets) {
  NoGradGuard no_grad;
  return sum(eq(argmax(logits, 1), targets)).item<int64_t>();
}

// One epoch: per global batch, the micro-batches of cli/micro_batches.h accumulate gradients,
// then one optimizer step; `schedule` (may be null) advances once per step.
Totals train_epoch(Model& model, optim::Optimizer& optimizer, optim::LRScheduler* schedule, data::DataLoader& loader,
                   int64_t grad_accum, EpochProgress& progress, int64_t& step) {
  model.net->train();
  Totals totals;
  while (std::optional<data::Batch> batch = loader.next()) {
    const int64_t b = batch->inputs.size(0);
    optimizer.zero_grad();
    for (const MicroBatch& chunk : split_batch(b, grad_accum)) {
      const Tensor inputs = batch->inputs.slice(0, chunk.begin, chunk.end);
      const Tensor targets = batch->targets.slice(0, chunk.begin, chunk.end);
      const Tensor logits = model.forward(inputs);
      const Tensor loss = cross_entropy(logits, targets);
      mul(loss, double(chunk.size()) / double(b)).backward();
      totals.loss_sum += loss.item<double>() * double(chunk.size());
      totals.correct += count_correct(logits, targets);
    }
    optimizer.step();
    if (schedule != nullptr) schedule->step();
    ++step;
    totals.samples += b;
    progress.update(totals.samples, totals.loss(), totals.accuracy());
  }
  progress.finish();
  return totals;
}

Totals evaluate(Model& model, data::DataLoader& loader) {
  model.net->eval();
  NoGradGuard no_grad;
  Totals totals;
  loader.start_epoch(0);
  while (std::optional<data::Batch> batch = loader.next()) {
    const Tensor logits = model.forward(batch->inputs);
    const int64_t n = batch->inputs.size(0);
    totals.loss_sum += cross_entropy(logits, batch->targets).item<double>() * double(n);
    totals.correct += count_correct(logits, batch->targets);
    totals.samples += n;
  }
  model.net->train();
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

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

void run_train(const TrainOptions& o) {
  check_supported(o);
  const Device device = parse_devices(o.devices).front();

  const data::FashionMNIST train_full(o.data, true);
  const data::FashionMNIST test_set(o.data, false);
  const auto train_set = training_set(train_full, o.limit);

  manual_seed(o.seed);
  Model model = make_model(o.model);
  model.net->to(device);
  const std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(o, model.net->parameters());

  data::DataLoaderOptions loader_options{.batch_size = o.batch_size,
                                         .shuffle = true,
                                         .num_workers = o.workers,
                                         .pin_memory = device.is_cuda(),
                                         .device = device,
                                         .seed = o.seed,
                                         .normalize = data::Normalize{kPixelMean, kPixelStd}};
  data::DataLoader train_loader(train_set, loader_options);
  loader_options.batch_size = kEvalBatch;
  loader_options.shuffle = false;
  data::DataLoader test_loader(std::make_shared<data::TensorDataset>(test_set), loader_options);

  // Cosine annealing from --lr to 0 over every step of the run, stepped per batch.
  std::unique_ptr<optim::LRScheduler> schedule;
  if (o.lr_schedule == "cosine") {
    schedule = std::make_unique<optim::CosineAnnealingLR>(*optimizer, o.epochs * train_loader.num_batches());
  }

  int64_t first_epoch = 1, step = 0;
  if (o.resume) {
    const int64_t done = latest_checkpoint_epoch(o.checkpoint_dir);
    const io::Checkpoint ck = io::load_checkpoint(checkpoint_path(o.checkpoint_dir, done), device);
    MG_CHECK(ck.step == done * train_loader.num_batches(), "--resume: ", checkpoint_path(o.checkpoint_dir, done),
             " is at step ", ck.step, " but epoch ", done, " ends at step ", done * train_loader.num_batches(), " (",
             train_loader.num_batches(), " batches per epoch): was it written with another --batch-size or --limit?");
    // The rate this run would be at: another --epochs, --lr or --lr-schedule than the stopped
    // run's gives another one, and the resumed run would not be its continuation.
    const double lr_here = schedule ? schedule->lr_at(ck.step) : optimizer->lr();
    model.net->load_state_dict(ck.model_state);
    optimizer->load_state_dict({ck.optimizer_state, ck.optimizer_options});
    MG_CHECK(std::abs(optimizer->lr() - lr_here) <= kLrTolerance * lr_here, "--resume: ",
             checkpoint_path(o.checkpoint_dir, done), " has learning rate ", optimizer->lr(), " at step ", ck.step,
             " where this run's schedule has ", lr_here,
             ": resume with the --epochs, --lr and --lr-schedule of the run that wrote it");
    set_rng_state(ck.rng);
    if (schedule) schedule->set_last_epoch(ck.step);
    first_epoch = done + 1;
    step = ck.step;
  }
  if (!o.checkpoint_dir.empty()) fs::create_directories(o.checkpoint_dir);

  const bool terminal = isatty(STDOUT_FILENO) == 1;
  std::cout << "multigrad train: " << o.model << " (" << parameter_count(*model.net) << " parameters) on "
            << device << ", " << train_set->size() << " training / " << test_set.size() << " test images, "
            << o.optimizer << " lr " << (schedule ? schedule->base_lr() : optimizer->lr()) << " " << o.lr_schedule
            << ", batch " << o.batch_size << " in " << o.grad_accum
            << " micro-batch(es), epochs " << first_epoch << ".." << o.epochs << ", seed " << o.seed
            << (o.deterministic ? ", deterministic" : "") << "\n"
            << std::flush;

  std::ofstream metrics;
  if (!o.metrics.empty()) {
    const bool append = o.resume && fs::exists(o.metrics);
    metrics.open(o.metrics, append ? std::ios::app : std::ios::trunc);
    MG_CHECK(metrics.good(), "--metrics: cannot write ", o.metrics);
    if (!append) metrics << "epoch,train_loss,train_accuracy,test_loss,test_accuracy,samples_per_s,seconds\n";
  }

  std::optional<DetectAnomalyGuard> anomaly;
  if (o.detect_anomaly) anomaly.emplace();

  double train_seconds = 0;
  int64_t train_samples = 0;
  std::optional<Totals> test;
  for (int64_t epoch = first_epoch; epoch <= o.epochs; ++epoch) {
    const auto start = Clock::now();
    train_loader.start_epoch(epoch - 1);
    EpochProgress progress(std::cout, terminal, epoch, o.epochs, train_loader.num_examples());
    const Totals train = train_epoch(model, *optimizer, schedule.get(), train_loader, o.grad_accum, progress, step);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    train_seconds += seconds;
    train_samples += train.samples;
    test = evaluate(model, test_loader);
    const double epoch_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const double rate = double(train.samples) / seconds;
    std::cout << "epoch " << epoch << "/" << o.epochs << ": train loss " << fixed(train.loss(), 4) << " acc "
              << fixed(train.accuracy(), 4) << ", test loss " << fixed(test->loss(), 4) << " acc "
              << fixed(test->accuracy(), 4) << ", " << fixed(rate, 0) << " samples/s, " << fixed(epoch_seconds, 1)
              << " s\n"
              << std::flush;
    if (metrics.is_open()) {
      metrics << epoch << "," << train.loss() << "," << train.accuracy() << "," << test->loss() << ","
              << test->accuracy() << "," << rate << "," << epoch_seconds << "\n"
              << std::flush;
    }
    if (!o.checkpoint_dir.empty()) {
      const optim::OptimizerState state = optimizer->state_dict();
      io::save_checkpoint(checkpoint_path(o.checkpoint_dir, epoch),
                          {model.net->state_dict(), state.tensors, state.options, step, get_rng_state()});
    }
  }
  if (!test) test = evaluate(model, test_loader);  // a resumed run that had nothing left to train

  std::cout << "test_accuracy: " << fixed(test->accuracy(), 4) << "\n"
            << "test_loss: " << fixed(test->loss(), 4) << "\n"
            << "samples_per_s: " << fixed(train_seconds > 0 ? double(train_samples) / train_seconds : 0, 1) << "\n"
            << "peak_memory_mb: " << device << "=" << fixed(double(memory_stats(device).peak) / kBytesPerMiB, 1)
            << "\n"
            << "params_sha256: " << params_sha256(*model.net) << "\n"
            << std::flush;
}

// A number > 0, or >= 0 with zero_allowed. (CLI11's own checks print the whole range of a
// double in their message; this one says what is needed.)
CLI::Validator sign_check(bool zero_allowed) {
  const std::string need = zero_allowed ? "at least 0" : "greater than 0";
  return CLI::Validator(
      [zero_allowed, need](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "expected a number, got '" + text + "'";
        return value > 0 || (zero_allowed && value == 0) ? "" : "must be " + need + ", got " + text;
      },
      need);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto options = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model on Fashion-MNIST and report test accuracy");
  TrainOptions& o = *options;
  cmd->add_option("--model", o.model, "mlp (784-256-128-10) or cnn (nn::fashion_cnn)")
      ->check(CLI::IsMember({"mlp", "cnn"}))
      ->capture_default_str();
  cmd->add_option("--data", o.data, "folder with the Fashion-MNIST IDX files (gzip or raw)")->capture_default_str();
  cmd->add_option("--epochs", o.epochs, "epochs to train")->check(sign_check(false))->capture_default_str();
  cmd->add_option("--batch-size", o.batch_size, "global batch size (examples per optimizer step)")
      ->check(sign_check(false))
      ->capture_default_str();
  cmd->add_option("--lr", o.lr, "learning rate (default 0.1 for sgd, 1e-3 for adam and adamw)")
      ->check(sign_check(false));
  cmd->add_option("--lr-schedule", o.lr_schedule, "cosine (from --lr to 0 over the run, per batch) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}))
      ->capture_default_str();
  cmd->add_option("--optimizer", o.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  cmd->add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--weight-decay", o.weight_decay, "weight decay (default 0; 1e-2 for adamw)")
      ->check(sign_check(true));
  cmd->add_option("--seed", o.seed, "seed of the initial parameters and of the data order")->capture_default_str();
  cmd->add_option("--limit", o.limit, "train on the first N training images only (0: all)")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--devices", o.devices, "comma list (cpu:0,cuda:1) or auto: cuda:0 if a GPU exists, else cpu:0")
      ->capture_default_str();
  cmd->add_option("--parallel", o.parallel, "none (dp, ddp and pipeline arrive with issues 5 and 6)")
      ->check(CLI::IsMember({"none", "dp", "ddp", "pipeline"}))
      ->capture_default_str();
  cmd->add_option("--grad-accum", o.grad_accum, "micro-batches per global batch (cli/micro_batches.h)")
      ->check(sign_check(false))
      ->capture_default_str();
  cmd->add_flag("--deterministic", o.deterministic,
                "require bit-reproducible runs (every single-device run already is; see cli/README.md)");
  cmd->add_option("--workers", o.workers, "data loader threads (0: on the training thread)")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", o.checkpoint_dir, "write epoch-<E>.safetensors there after every epoch");
  cmd->add_flag("--resume", o.resume, "continue from the latest checkpoint in --checkpoint-dir");
  cmd->add_option("--metrics", o.metrics, "per-epoch metrics CSV file");
  cmd->add_option("--trace", o.trace, "timeline JSON (arrives with issue 6)");
  cmd->add_flag("--detect-anomaly", o.detect_anomaly, "stop at the first op that produces NaN or Inf");
  cmd->callback([options] { run_train(*options); });
}

}  // namespace mg::cli
