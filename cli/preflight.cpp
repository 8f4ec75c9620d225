// cli/preflight.cpp — the memory preflight of cli/preflight.h.
#include "cli/preflight.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "multigrad/core/error.h"
#include "multigrad/nn/gpt.h"
#include "multigrad/parallel/memory_model.h"
#include "multigrad/parallel/comm/mpi.h"
#include "multigrad/train/named_models.h"

namespace mg::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// bytes in GiB, or MiB below one GiB.
std::string gib(double bytes) {
  char text[32];
  if (bytes < kGiB) std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1024.0 * 1024.0));
  else std::snprintf(text, sizeof text, "%.1f GiB", bytes / kGiB);
  return text;
}

// Throws unless `ranks` ranks of the plan fit in the `available` bytes of one memory (`where`
// names it: "the host", "cuda:0's GPU").
void require_fits(const StepPlan& plan, double per_rank, int64_t ranks, double available, const std::string& where) {
  const double here = per_rank * double(ranks);
  if (here <= available) return;
  const double params = double(plan.params) * 4, state = params * plan.state_per_param;
  MG_CHECK(plan.training, plan.params ? "the model (" + gib(params) + " of parameters) and " : "", "the logits of ",
           plan.activations_of, " need at least ", gib(per_rank), " (a lower bound), but ", where, " has ",
           gib(available), " left: ", plan.remedy, " (--no-memory-check runs it anyway)");
  MG_ERROR("a training step needs at least ", gib(per_rank),
           plan.ranks == 1 ? std::string() : detail::str_cat(" on each of ", plan.ranks, " ranks"), " (parameters ",
           gib(params), ", optimizer state ", gib(state), ", and the larger of the gradients, ", gib(params),
           ", and the activations, ", gib(double(plan.activation_bytes)), " for ", plan.activations_of,
           plan.replicated ? "" : "; all of it shared among the ranks", "; a lower bound, parallel/memory_model.h)",
           ranks > 1 ? detail::str_cat(", ", gib(here), " for the ", ranks, " of them on ", where) : "", ", but ",
           where, " has ", gib(available), " available: try --recompute (a GPT), a smaller --batch-size, a larger ",
           "--grad-accum or more devices (--no-memory-check runs it anyway)");
}

}  // namespace

int64_t step_bytes_per_rank(const StepPlan& plan) {
  const long double value = 4;  // float32 parameters, gradients and optimizer state
  const long double persistent = (long double)plan.params * value * (1.0L + plan.state_per_param);
  const long double transient = plan.training
                                     ? std::max<long double>(plan.activation_bytes, (long double)plan.params * value)
                                     : (long double)plan.activation_bytes;
  long double bytes = (plan.training ? persistent : (long double)plan.params * value) + transient;
  if (!plan.replicated) bytes /= (long double)std::max<int64_t>(plan.ranks, 1);
  return bytes >= (long double)std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                                    : int64_t(bytes);
}

int64_t available_host_bytes() {
  if (const char* test = std::getenv("MG_TEST_MEMORY_AVAILABLE_MB")) return std::atoll(test) * 1024 * 1024;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream in(line);
    std::string key;
    int64_t kib = 0;
    if (in >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return std::numeric_limits<int64_t>::max();  // unknown: nothing to refuse on
}

void check_step_fits(const StepPlan& plan) {
  // The ranks that share one memory: the host's (CPU devices), or a GPU's (its logical devices).
  std::map<int, std::pair<Device, int64_t>> sharing;  // -1: the host, else the physical GPU: a device, ranks
  for (const Device& d : plan.devices_here) {
    auto& [device, ranks] = sharing.try_emplace(d.is_cpu() ? -1 : cuda_physical_index(d.index()), d, 0).first->second;
    ++ranks;
  }
  const double per_rank = double(step_bytes_per_rank(plan));
  for (const auto& [memory, group] : sharing) {
    const auto& [device, ranks] = group;
    const double available = double(memory == -1 ? available_host_bytes() : cuda_free_memory(device.index()));
    require_fits(plan, per_rank, ranks, available, memory == -1 ? "the host" : detail::str_cat(device, "'s GPU"));
  }
}

StepPlan step_plan(const train::RunOptions& o, const train::DataSets& data, const std::vector<Device>& devices,
                   bool per_process) {
  StepPlan plan;
  const bool gpt = o.model == "gpt";
  const nn::GPTConfig config = gpt ? train::gpt_config(o, data.tokenizer->vocab_size()) : nn::GPTConfig{};
  if (gpt) {
    plan.params = nn::gpt_parameter_count(config);
  } else {
    for (const Tensor& p : train::build_model(o.model)->parameters()) plan.params += p.numel();  // small: built
  }
  plan.state_per_param = o.optimizer == "sgd" ? (o.momentum > 0 ? 1 : 0) : 2;
  plan.ranks = per_process ? std::max(1, parallel::mpi_env_size()) : int64_t(devices.size());
  plan.replicated = o.mesh.empty() && (o.parallel == "none" || o.parallel == "dp" || o.parallel == "ddp");
  // The rows one micro-batch gives a replica (or the whole micro-batch, when the ranks split it otherwise).
  const int64_t micro = train::pipelined(o) ? o.micro_batches : o.grad_accum;
  const int64_t share = plan.replicated ? plan.ranks * micro : micro;
  const int64_t rows = (std::min(o.batch_size, data.train->size()) + share - 1) / share;
  if (gpt) {
    plan.activation_bytes = parallel::gpt_activation_bytes(rows, config.context, config.n_layer, config.n_embd,
                                                           config.vocab_size, o.recompute, o.precision == "fp32" ? 4 : 2);
    plan.activations_of = detail::str_cat(rows, " sequence", rows == 1 ? "" : "s", " of ", config.context, " tokens");
  } else if (o.model == "mlp") {
    plan.activation_bytes = parallel::mlp_activation_bytes(train::kMlpWidths, rows);
    plan.activations_of = detail::str_cat(rows, " images");
  } else {
    plan.activations_of = "the cnn's images (not counted)";
  }
  plan.devices_here = devices;
  return plan;
}

}  // namespace mg::cli
