// train/run.cpp — the run of train/run.h.
#include "multigrad/train/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "multigrad/autograd/autocast.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"
#include "multigrad/core/ledger.h"
#include "multigrad/core/random.h"
#include "multigrad/io/checkpoint.h"
#include "multigrad/io/safetensors.h"
#include "multigrad/nn/gpt.h"
#include "multigrad/optim/lr_scheduler.h"
#include "multigrad/parallel/mesh.h"
#include "multigrad/train/checkpoints.h"
#include "multigrad/train/parallelize.h"
#include "multigrad/train/settings.h"

namespace mg::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Relative slack when matching a checkpoint's learning rate (stored as shortest round-trip text).
constexpr double kLrTolerance = 1e-12;

std::string join(const std::vector<Device>& devices) {
  std::string out;
  for (const Device& d : devices) out += (out.empty() ? "" : ",") + d.str();
  return out;
}

// ---------------------------------------------------------------- set-up

// How far the run goes, in steps (global batches).
struct Steps {
  int64_t per_epoch = 0;   // batches per epoch
  int64_t all = 0;         // --epochs' steps
  int64_t last = 0;        // the run ends after it (--max-steps)
  int64_t last_epoch = 0;  // the epoch it ends in
  int64_t warmup = 0;      // --warmup-steps (a GPT's default: a tenth of the run, at most kGptMaxWarmup)
};

Steps count_steps(const RunOptions& o, int64_t per_epoch) {
  Steps n{.per_epoch = per_epoch, .all = o.epochs * per_epoch};
  n.last = o.max_steps > 0 ? std::min(o.max_steps, n.all) : n.all;
  n.last_epoch = (n.last + per_epoch - 1) / per_epoch;
  n.warmup = o.warmup_steps.value_or(o.model == "gpt" ? std::min(kGptMaxWarmup, n.last / 10) : 0);
  MG_CHECK(n.warmup < n.last, "--warmup-steps ", n.warmup, " must be fewer than the run's ", n.last, " steps");
  return n;
}

// --warmup-steps of linear warmup, then cosine annealing from --lr to 0 over the rest of the
// run (or the rate held), stepped per batch; null: the rate held from the start.
std::unique_ptr<optim::LRScheduler> lr_schedule(const RunOptions& o, optim::Optimizer& optimizer, const Steps& n) {
  if (o.lr_schedule == "cosine") return std::make_unique<optim::WarmupCosineLR>(optimizer, n.warmup, n.last);
  if (n.warmup > 0) return std::make_unique<optim::LinearWarmup>(optimizer, n.warmup);
  return nullptr;
}

// A pipeline cuts every batch into --micro-batches rows at least, the short last one of an
// epoch too (when the run gets there). With data parallelism across pipelines (a mesh's dp) each
// pipeline cuts its part.
void check_pipeline_batches(const RunOptions& o, const DataSets& data, const ParallelModel& t, const Steps& n) {
  const int64_t short_rows = data.train->size() % o.batch_size;
  const int64_t pipelines = t.pipeline && t.groups.dp ? t.groups.dp->size() : 1;
  MG_CHECK(!t.pipeline || short_rows == 0 || short_rows >= o.micro_batches * pipelines || n.last < n.per_epoch,
           "--parallel pipeline: ", data.train->size(), " training ", data.examples, " in batches of ", o.batch_size,
           " leave a last batch of ", short_rows, " per epoch, fewer than --micro-batches ", o.micro_batches,
           pipelines > 1 ? detail::str_cat(" times the ", pipelines, " pipelines") : "",
           " (pick a --batch-size or --limit that leaves none or at least that many)");
}

// The run's first line: the model, where it runs, the data, the optimizer and the schedule.
std::string start_line(const RunOptions& o, const DataSets& data, const ParallelModel& t,
                       const std::vector<Device>& devices, const parallel::Communicator* comm,
                       const parallel::DeviceMesh* mesh, double lr, const Steps& n, int64_t first_epoch) {
  const std::string mode = t.dp         ? " (dp)"
                           : t.pipeline ? detail::str_cat(" (pipeline, ", o.schedule, ", ", o.backend, " backend)")
                                        : "";
  std::ostringstream line;
  line << "multigrad train: " << o.model << " (" << parameter_count(t.one_device_model()) << " parameters) on "
       << (comm != nullptr ? detail::str_cat(comm->size(), " ranks (",
                                             mesh ? "mesh " + mesh->str() + (sharded(o) ? ", " + o.parallel : "")
                                                  : o.parallel,
                                             ", ", o.backend, " backend)")
                           : join(devices) + mode)
       << ", " << data.train->size() << " training / " << data.test->size() << " " << data.held_out << " "
       << data.examples << ", " << o.optimizer << " lr " << lr << " " << o.lr_schedule
       << (n.warmup > 0 ? detail::str_cat(" (warmup ", n.warmup, ")") : "") << ", batch " << o.batch_size << " in "
       << (t.pipeline ? o.micro_batches : o.grad_accum) << " micro-batch(es)"
       << ", epochs " << first_epoch << ".." << n.last_epoch
       << (n.last < n.all ? detail::str_cat(" (", n.last, " steps)") : "") << ", seed " << o.seed
       << (o.deterministic ? ", deterministic" : "") << (o.precision != "fp32" ? ", " + o.precision + " autocast" : "");
  return line.str();
}

// --metrics: a CSV row per epoch; a resumed run keeps the rows of the epochs before its step.
std::ofstream open_metrics(const RunOptions& o, const DataSets& data, bool resumed, int64_t step, const Steps& n) {
  std::ofstream metrics;
  const bool append = resumed && fs::exists(o.metrics);
  if (append) keep_metrics_rows(o.metrics, step / n.per_epoch);
  metrics.open(o.metrics, append ? std::ios::app : std::ios::trunc);
  MG_CHECK(metrics.good(), "--metrics: cannot write ", o.metrics);
  if (!append)
    metrics << "epoch,train_loss,train_accuracy," << data.held_out << "_loss," << data.held_out
            << "_accuracy,samples_per_s,seconds\n";
  return metrics;
}

// What a checkpoint holds besides the training state: the model's name, the run's settings, and
// a GPT's sizes and tokenizer (its name, and a BPE's merges as BpeTokenizer::to_text), for
// `multigrad generate`.
std::map<std::string, std::string> checkpoint_info(const RunOptions& o, const DataSets& data,
                                                   const parallel::Settings& settings, int64_t last_step) {
  std::map<std::string, std::string> info = {{"model", o.model}, {kLastStepKey, std::to_string(last_step)}};
  for (const auto& [flag, value] : settings) info.emplace(std::string(kRunInfoPrefix) + flag, value);
  if (o.model == "gpt") {
    const std::map<std::string, std::string> sizes = nn::gpt_config_info(gpt_config(o, data.tokenizer->vocab_size()));
    info.insert(sizes.begin(), sizes.end());
    info.emplace("tokenizer", data.tokenizer->name());
    if (const auto* bpe = dynamic_cast<const data::BpeTokenizer*>(data.tokenizer.get()))
      info.insert({"bpe_merges", bpe->to_text()});
  }
  return info;
}

// ---------------------------------------------------------------- resume

// Loads the checkpoint `file` holds (`ck`) into the model, the optimizer, the loss scaler, the
// schedule and the RNG, after checking that it belongs to this run; returns its step. A finished
// run (its checkpoint at its last step) extended by more epochs or steps: its rate at that step
// was its own schedule's; from there on the rate is this run's.
int64_t resume_from(const CheckpointFile& file, const io::Checkpoint& ck, const parallel::Settings& settings,
                    ParallelModel& t, optim::Optimizer& optimizer, optim::LRScheduler* schedule, const Steps& n,
                    RunLog* log) {
  MG_CHECK(ck.step == file.step, "--resume: ", file.path, " is at step ", ck.step, " but its name puts it at step ",
           file.step, " (", n.per_epoch, " batches per epoch): was it written with another --batch-size or --limit?");
  check_resume_settings(file.path, ck, settings);
  if (log) log->line(detail::str_cat("resume: from ", file.path, ", step ", ck.step));
  const auto last = ck.info.find(kLastStepKey);
  const bool extending = last != ck.info.end() && last->second == std::to_string(ck.step) && n.last > ck.step;
  // The rate this run would be at: another --epochs, --max-steps, --lr, --lr-schedule or --warmup-steps than
  // the stopped run's gives another one, and the resumed run would not be its continuation.
  const double lr_here = schedule ? schedule->lr_at(ck.step) : optimizer.lr();
  t.load_model_state(ck.model_state);
  t.load_optimizer_state(optimizer, {ck.optimizer_state, ck.optimizer_options});
  if (t.scaler) {  // where the stopped run's loss scale had got to (its range checked by load)
    t.scaler->load(info_double(ck, file.path, kLossScaleKey), info_int(ck, file.path, kLossScaleTrackerKey),
                   ck.info.count(kSkippedStepsKey) ? info_int(ck, file.path, kSkippedStepsKey) : 0);
  }
  MG_CHECK(extending || std::abs(optimizer.lr() - lr_here) <= kLrTolerance * lr_here, "--resume: ", file.path,
           " has learning rate ", optimizer.lr(), " at step ", ck.step, " where this run's schedule has ", lr_here,
           ": resume with the --epochs, --max-steps, --lr, --lr-schedule and --warmup-steps of the run that wrote it");
  if (log && extending) {
    std::ostringstream line;
    line << "resume: extending the run that finished at step " << ck.step << " to step " << n.last
         << "; the learning rate goes on from this run's schedule at that step (" << lr_here << ")";
    log->line(line.str());
  }
  set_rng_state(ck.rng);
  if (schedule) schedule->set_last_epoch(ck.step);
  return ck.step;
}

// ---------------------------------------------------------------- the loop

// What runs around each step (either may be empty), given the step's number.
struct StepHooks {
  std::function<void(int64_t)> before, after;
};

// One epoch, or what is left of it before step `last_step`: per global batch, train_step;
// `schedule` (may be null) advances once per step, and the hooks run before and after each.
// Progress (to `log`, the main rank's) shows the loss and accuracy of every rank's examples so far,
// as the epoch's line does: the ranks sum their totals at each tenth of the epoch (the same steps
// on every rank; a pipeline's step already reports the whole batch). `samples_here`: the examples
// it will train on (the progress's 100 %).
Totals train_epoch(ParallelModel& m, optim::Optimizer& optimizer, optim::LRScheduler* schedule,
                   data::DataLoader& loader, const StepOptions& step_options, RunLog* progress,
                   int64_t& step, int64_t last_step, int64_t samples_here, const StepHooks& hooks) {
  m.model.net->train();
  Metrics metrics;
  Totals shown;
  int64_t samples = 0;  // of the global batches
  int64_t tenths = 0;   // of the epoch's examples, when the ranks last summed their totals
  while (step < last_step) {
    if (hooks.before) hooks.before(step + 1);  // (when the epoch has no batch left, again in the next)
    std::optional<data::Batch> batch = loader.next();
    if (!batch) break;
    train_step(m, optimizer, *batch, step_options, metrics, step + 1);
    if (schedule != nullptr) schedule->step();
    ++step;
    samples += batch->inputs.size(0);
    if (!m.groups.dp) {
      if (progress) shown = metrics.totals();
    } else if (const int64_t now = samples * RunLog::kSums / samples_here; now > tenths) {
      tenths = now;
      shown = sum_over_ranks(metrics.totals(), m.groups.dp);
    } else if (tenths == 0 && progress) {
      shown = metrics.totals();  // this rank's, until the first sum
    }
    if (progress) progress->progressed(samples, shown.loss(), shown.accuracy());
    if (hooks.after) hooks.after(step);
  }
  if (progress) progress->epoch_trained();
  return metrics.totals();
}

// ---------------------------------------------------------------- the report

RunReport report_of(const RunOptions& o, const DataSets& data, ParallelModel& t, const std::optional<Totals>& test,
                    double train_seconds, int64_t train_samples) {
  RunReport report;
  if (test) report.test = *test;
  if (o.model == "gpt") {
    report.context = gpt_config(o, data.tokenizer->vocab_size()).context;
    report.tokens_per_byte = data.tokens_per_byte;
    report.flops_per_token = dynamic_cast<const nn::GPT&>(t.one_device_model()).flops_per_token();
  }
  report.samples_per_s = train_seconds > 0 ? double(train_samples) / train_seconds : 0;
  if (t.whole) t.model_state();  // every rank: the digest of the one-device model
  report.params_sha256 = params_sha256(t.one_device_model());
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

}  // namespace

RunReport run(const RunOptions& o, const DataSets& data, std::shared_ptr<nn::Module> net,
              const std::vector<Device>& devices, parallel::Communicator* comm, RunLog* log) {
  const Device device = devices.front();
  const bool gpt = o.model == "gpt";
  // --precision: training and evaluation in this thread, and the threads it starts, autocast.
  const AutocastGuard autocast(precision_of(o.precision));
  // --mesh: the grid of the ranks (made first: the model's DDP and layers use its communicators).
  const std::unique_ptr<parallel::DeviceMesh> mesh =
      o.mesh.empty() ? nullptr : std::make_unique<parallel::DeviceMesh>(*comm, parallel::parse_mesh(o.mesh));
  const Plan plan = parallel_plan(o, mesh != nullptr);
  const std::unique_ptr<ParallelModel> parallel_model =
      parallelize({std::move(net), o.model == "mlp"}, devices, run_groups(o, comm, mesh.get()), plan);
  ParallelModel& t = *parallel_model;
  const bool main = t.is_main();
  if (!main) log = nullptr;  // only the main rank says anything
  const std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(
      t, plan, [&o](std::vector<Tensor> params) { return param_groups(o, std::move(params)); },
      [&o](std::vector<optim::ParamGroup> groups) { return optimizer_of(o, std::move(groups)); });
  const StepOptions step_options{.grad_accum = o.grad_accum, .clip_grad_norm = o.clip_grad_norm};

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

  const Steps n = count_steps(o, train_loader.num_batches());
  const std::unique_ptr<optim::LRScheduler> schedule = lr_schedule(o, *optimizer, n);
  check_pipeline_batches(o, data, t, n);

  const parallel::Settings settings = result_settings(o, data);
  std::optional<std::pair<CheckpointFile, io::Checkpoint>> resumed;
  if (o.resume) resumed = resume_point(o.checkpoint_dir, n.per_epoch, device, log);
  if (!o.resume) claim_checkpoint_folder(o.checkpoint_dir, o.overwrite, n.per_epoch, settings, main, log);
  int64_t step = 0;
  if (resumed) step = resume_from(resumed->first, resumed->second, settings, t, *optimizer, schedule.get(), n, log);
  const int64_t first_epoch = step / n.per_epoch + 1;
  if (main && !o.checkpoint_dir.empty()) {
    fs::create_directories(o.checkpoint_dir);
    for (const std::string& stale : io::remove_stale_temp_files(o.checkpoint_dir))
      if (log) log->line("checkpoints: removed " + stale + ", left by a write that was interrupted");
  }

  if (log) {
    log->line(start_line(o, data, t, devices, comm, mesh.get(), schedule ? schedule->base_lr() : optimizer->lr(), n,
                         first_epoch));
  }

  std::ofstream metrics;
  if (main && !o.metrics.empty()) metrics = open_metrics(o, data, resumed.has_value(), step, n);

  std::optional<DetectAnomalyGuard> anomaly;
  if (o.detect_anomaly) anomaly.emplace();

  double train_seconds = 0;
  int64_t train_samples = 0;
  std::optional<Totals> test;
  std::map<std::string, std::string> info = checkpoint_info(o, data, settings, n.last);
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
    if (o.keep_last > 0) keep_last_checkpoints(o.checkpoint_dir, n.per_epoch, step, o.keep_last);
  };
  // --ledger: the CUDA ledger (core/ledger.h) of step --ledger-step, kept by the main rank's
  // process (with a rank per thread, every rank's work in that step goes into it).
  const int64_t ledger_step = main && !o.ledger.empty() ? o.ledger_step.value_or(kDefaultLedgerStep) : 0;
  std::optional<int64_t> ledger_entries;
  if (ledger_step > 0) {
    MG_CHECK(std::any_of(devices.begin(), devices.end(), [](const Device& d) { return d.is_cuda(); }), "--ledger ",
             o.ledger, " records CUDA work, and this run's devices are CPU devices (", devices.front().str(), ")");
    MG_CHECK(ledger_step > step && ledger_step <= n.last, "--ledger-step ", ledger_step,
             " is not a step this run trains (it trains steps ", step + 1, " to ", n.last, ")");
  }
  // Around the steps: the ledger's start and end; --eval-every's evaluation (rank 0's while the
  // others wait at a barrier) and --checkpoint-every's checkpoints, which the run's last step
  // leaves to the end of its epoch, as an epoch's last step its checkpoint.
  StepHooks hooks;
  if (ledger_step > 0) {  // the batch's arrival on the device (the loader's next), the step
    hooks.before = [&](int64_t at) {
      if (at == ledger_step) cuda_ledger_start(o.ledger);
    };
  }
  if (ledger_step > 0 || o.eval_every > 0 || (o.checkpoint_every > 0 && !o.checkpoint_dir.empty())) {
    hooks.after = [&](int64_t at) {
      if (at == ledger_step) {
        LedgerStep recorded{.step = at, .precision = o.precision};
        if (o.model == "gpt") {
          recorded.tokens = o.batch_size * gpt_config(o, data.tokenizer->vocab_size()).context;
          recorded.flops_per_token = dynamic_cast<const nn::GPT&>(t.one_device_model()).flops_per_token();
        }
        cuda_ledger_note_step(recorded);
        ledger_entries = cuda_ledger_stop();
      }
      if (at == n.last) return;
      if (o.eval_every > 0 && at % o.eval_every == 0) {
        t.gather_parameters();
        if (t.evaluates()) {
          const Totals held = evaluate(t, test_loader);
          if (log)
            log->line(detail::str_cat("step ", at, ": ", data.held_out, " loss ", fixed(held.loss(), 4), " acc ",
                                      fixed(held.accuracy(), 4)));
        }
        if (comm != nullptr) comm->barrier()->wait();
      }
      if (o.checkpoint_every > 0 && at % o.checkpoint_every == 0 && at % n.per_epoch != 0 &&
          !o.checkpoint_dir.empty()) {
        save(step_checkpoint_path(o.checkpoint_dir, at));
      }
    };
  }
  for (int64_t epoch = first_epoch; epoch <= o.epochs && step < n.last; ++epoch) {
    const auto start = Clock::now();
    // A run resumed inside this epoch skips the batches it trained on.
    const int64_t first_batch = epoch == first_epoch ? step - (epoch - 1) * n.per_epoch : 0;
    train_loader.start_epoch(epoch - 1, first_batch);
    // Progress counts toward what this run trains of the epoch: from a resumed run's first batch
    // to the epoch's end, or to --max-steps' last step inside it.
    const int64_t end_batch = std::min(n.per_epoch, n.last - (epoch - 1) * n.per_epoch);
    const auto examples_in = [&](int64_t batches) { return std::min(batches * o.batch_size, train_loader.num_examples()); };
    const int64_t samples_here = examples_in(end_batch) - examples_in(first_batch);
    if (log) log->epoch_started(epoch, n.last_epoch, samples_here);
    const Totals mine = train_epoch(t, *optimizer, schedule.get(), train_loader, step_options,
                                    log, step, n.last, samples_here, hooks);
    // A pipeline's step already reports the whole batch on every rank, as tp's ranks do.
    const Totals train = sum_over_ranks(mine, t.groups.dp);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    train_seconds += seconds;
    train_samples += train.samples;
    t.gather_parameters();
    if (t.evaluates()) test = evaluate(t, test_loader);
    if (comm != nullptr) comm->barrier()->wait();  // the others wait while rank 0 evaluates
    if (main) {
      const double epoch_seconds = std::chrono::duration<double>(Clock::now() - start).count();
      const double rate = double(train.samples) / seconds;
      if (log) {
        log->line(detail::str_cat("epoch ", epoch, "/", n.last_epoch, ": train loss ", fixed(train.loss(), 4), " acc ",
                                  fixed(train.accuracy(), 4), ", ", data.held_out, " loss ", fixed(test->loss(), 4),
                                  " acc ", fixed(test->accuracy(), 4), ", ", fixed(rate, 0), " samples/s, ",
                                  fixed(epoch_seconds, 1), " s"));
      }
      if (metrics.is_open()) {
        metrics << epoch << "," << train.loss() << "," << train.accuracy() << "," << test->loss() << ","
                << test->accuracy() << "," << rate << "," << epoch_seconds << "\n"
                << std::flush;
      }
    }
    if (!o.checkpoint_dir.empty()) {
      save(step == epoch * n.per_epoch ? epoch_checkpoint_path(o.checkpoint_dir, epoch)
                                       : step_checkpoint_path(o.checkpoint_dir, step));
    }
  }
  t.gather_parameters();  // for the evaluation and every rank's digest
  if (t.evaluates() && !test) test = evaluate(t, test_loader);

  RunReport report = report_of(o, data, t, test, train_seconds, train_samples);
  report.ledger_entries = ledger_entries;
  return report;
}

}  // namespace mg::train
