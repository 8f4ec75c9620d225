// cli/eval.cpp — `multigrad eval`: the held-out loss and accuracy of a checkpoint of `multigrad
// train`, on the data the run evaluated on and at its precision, with the run's summary lines:
// the same numbers as the run's own last evaluation.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/printed_log.h"
#include "multigrad/train/checkpoints.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/preflight.h"
#include "multigrad/autograd/autocast.h"
#include "multigrad/core/device.h"
#include "multigrad/data/data.h"
#include "multigrad/io/checkpoint.h"
#include "multigrad/nn/gpt.h"
#include "multigrad/train/log.h"
#include "multigrad/train/named_models.h"
#include "multigrad/train/options.h"
#include "multigrad/train/parallelize.h"
#include "multigrad/train/setup.h"
#include "multigrad/train/step.h"

namespace mg::cli {
namespace {

using namespace train;

struct EvalOptions {
  std::string checkpoint;
  std::optional<std::string> data;  // as multigrad train's --data
  int64_t test_limit = 0;
  std::string device = "auto";
  std::optional<int64_t> batch_size;  // default: kEvalBatch images, or kGptBatch windows
  std::optional<std::string> precision;  // default: the checkpoint's run's --precision
  bool no_memory_check = false;          // skip the check that a batch's logits fit
};

// The checkpoint's model (train/named_models.h) on the held-out data that `multigrad train` evaluates
// on (Fashion-MNIST's test split, or the last tenth of --data's text in the checkpoint's
// tokenizer and context), with the summary lines of a run: the same numbers as the run's last
// evaluation, for the same data.
void run_eval(const EvalOptions& e) {
  const Device device = e.device == "auto" ? (device_count(DeviceType::CUDA) > 0 ? Device("cuda:0") : Device("cpu:0"))
                                           : Device(e.device);
  check_device_exists(device);
  PrintedLog log("eval");
  const io::Checkpoint ck = load_checkpoint_noting(e.checkpoint, device, &log);
  const std::shared_ptr<nn::Module> net = checkpoint_model(ck, e.checkpoint, device);
  RunOptions o;
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
  const std::unique_ptr<ParallelModel> t = parallelize({net, o.model == "mlp"}, {device}, {}, {});
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
  const Totals held = evaluate(*t, loader);
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
