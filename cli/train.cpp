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
// The run is the train/ layer's (train::run, train/run.h: the loop, checkpoints and resume);
// --parallel and --mesh name its layout (train::Plan, train/options.cpp's parallel_plan), and how
// each layout computes a global batch is train/step.h's. This file holds the flags, the devices,
// the ranks (threads, or processes under mpirun) and the summary.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/peak.h"
#include "cli/preflight.h"
#include "cli/printed_log.h"
#include "multigrad/core/allocator.h"
#include "multigrad/core/device.h"
#include "multigrad/core/error.h"
#include "multigrad/core/random.h"
#include "multigrad/data/data.h"
#include "multigrad/optim/grad_scaler.h"
#include "multigrad/parallel/comm/agree.h"
#include "multigrad/parallel/comm/local.h"
#include "multigrad/parallel/mesh.h"
#include "multigrad/parallel/comm/mpi.h"
#include "multigrad/parallel/comm/nccl.h"
#include "multigrad/parallel/timeline.h"
#include "multigrad/train/options.h"
#include "multigrad/train/run.h"
#include "multigrad/train/settings.h"
#include "multigrad/train/setup.h"

namespace mg::cli {
namespace {

using namespace train;  // the run's options, set-up and step (train/)

constexpr double kBytesPerMiB = 1024.0 * 1024.0;

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

// The peak FLOP/s of the run's `n` devices at --precision, each like `device` (a process per GPU,
// or CPU devices of equal budgets). Processes that mpirun started on one host share its cores:
// the CPU device of a run over ranks (`ranked`) counts its share.
PeakFlops run_peak(const RunOptions& o, const Device& device, size_t n, bool ranked) {
  const int local = parallel::mpi_env_local_size();
  const int threads = device.is_cpu() && ranked && local > 1
                          ? std::min(cpu_thread_budget(device), std::max(1, int(std::thread::hardware_concurrency()) / local))
                          : 0;
  const PeakFlops one = peak_flops(device, precision_of(o.precision), threads);
  return {one.flops_per_s * double(n), n == 1 ? one.how : detail::str_cat(n, " devices of ", one.how), one.of};
}

// The summary of rank 0 (or the only process), with every listed rank's params_sha256.
// A GPT reports its validation loss in nats per token and in bits per byte of text (through the
// validation targets' tokens per byte), and its tokens per second, in place of the test lines.
// `peak`: the run's devices' (run_peak), MFU's denominator.
void print_summary(const RunReport& main, const PeakFlops& peak, const std::vector<Device>& devices,
                   const std::vector<std::pair<int, std::string>>& rank_hashes) {
  if (main.context > 0) {
    std::cout << "val_loss: " << fixed(main.test.loss(), 4) << "\n"
              << "val_bpb: " << fixed(main.test.loss() / std::log(2.0) * main.tokens_per_byte, 4) << "\n"
              << "tokens_per_s: " << fixed(main.samples_per_s * double(main.context), 1) << "\n";
    // Model FLOPs utilisation: the FLOPs the tokens needed over what the devices could do.
    if (peak.flops_per_s > 0) {
      const double mfu = main.samples_per_s * double(main.context) * main.flops_per_token / peak.flops_per_s;
      std::cout << "mfu: " << fixed(mfu, 4) << " (of " << fixed(peak.flops_per_s / 1e9, 1) << " GFLOP/s " << peak.of
                << " peak: " << peak.how << ")\n";
    } else {
      std::cout << "mfu: unknown (" << peak.how << ")\n";
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
  if (main.ledger_entries) std::cout << "ledger_entries: " << *main.ledger_entries << "\n";
  for (const auto& [rank, hash] : rank_hashes) {
    std::cout << "params_sha256: " << hash << (rank >= 0 ? detail::str_cat(" (rank ", rank, ")") : "") << "\n";
  }
  std::cout << std::flush;
}

// DDP or a pipeline with one rank per process, under mpirun: --backend mpi (CPU devices) or nccl
// (a GPU per process). The device: --devices auto is cpu:0 for mpi and cuda:<rank mod GPUs> for nccl; a
// list names one device for every rank, or one for all. A rank whose error escapes prints it
// and ends the whole job (parallel/comm/mpi.h), so no rank waits for it until the timeout.
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
    PrintedLog log("train");
    const RunReport report = train::run(o, data, make_model(o, data), {device}, comm.get(), &log);
    std::ostringstream mine;
    mine << "params_sha256: " << report.params_sha256 << " (rank " << comm->rank() << ")\n";
    std::vector<parallel::TimelineEvent> trace;
    if (!o.trace.empty()) trace = parallel::all_gather_events(*comm, report.trace);  // every rank's lanes
    if (comm->rank() == 0) {
      if (!o.trace.empty()) parallel::write_chrome_trace(o.trace, trace);
      print_summary(report, run_peak(o, device, size_t(comm->size()), true), {device}, {});
      std::cout << mine.str() << std::flush;
    }
    comm->barrier()->wait();  // rank 0's summary first, then the others' digests
    if (comm->rank() != 0) std::cout << mine.str() << std::flush;
  } catch (const std::exception& e) {
    print_error_line("multigrad train: rank ", rank, " of ", size, ": ", e.what());
    parallel::mpi_abort(1);
  }
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
    PrintedLog log("train");
    const RunReport report = train::run(o, data, make_model(o, data), devices, nullptr, &log);
    if (!o.trace.empty()) parallel::write_chrome_trace(o.trace, report.trace);
    print_summary(report, run_peak(o, devices.front(), devices.size(), false), devices, {{-1, report.params_sha256}});
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
    PrintedLog log("train");  // rank 0's speaks
    reports[size_t(comm.rank())] = train::run(o, data, nets[size_t(comm.rank())], {comm.device()}, &comm, &log);
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
  print_summary(reports[0], run_peak(o, devices.front(), devices.size(), true), devices, hashes);
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
  cmd->add_option("--grad-accum", o.grad_accum, "micro-batches per global batch (parallel/data/micro_batches.h)")
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
  cmd->add_option("--ledger", o.ledger,
                  "the simulated CUDA build: write one step's CUDA ledger (every launch, library call, copy, "
                  "allocation and host synchronisation, as JSON lines; docs/simulator.md)");
  cmd->add_option("--ledger-step", o.ledger_step, "the step --ledger records (default 2: the first after warm-up)")
      ->check(sign_check(false));
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
