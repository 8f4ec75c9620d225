// cli/generate.cpp — `multigrad generate`: text from a GPT checkpoint of `multigrad train --model
// gpt` (--checkpoint-dir). The checkpoint's info names the model's sizes and its tokenizer;
// the prompt is encoded, continued by nn::GPT::generate (nanoGPT's sampling: temperature, top-k),
// and the prompt with its continuation decoded and printed to stdout. The same checkpoint, prompt
// and --seed print the same text. Before it builds the model it checks that the model and the
// logits of its longest window fit the device (cli/preflight.h; --no-memory-check skips it).
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "cli/printed_log.h"
#include "multigrad/train/checkpoints.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "multigrad/train/named_models.h"
#include "cli/preflight.h"
#include "multigrad/core/random.h"
#include "multigrad/data/data.h"
#include "multigrad/io/checkpoint.h"
#include "multigrad/nn/gpt.h"

namespace mg::cli {
namespace {

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt = "\n";  // nanoGPT's sample.py starts from a newline too
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 0;
  std::string device = "cpu";
  bool no_memory_check = false;  // skip the memory preflight (cli/preflight.h)
};

void run_generate(const GenerateOptions& o) {
  const Device device(o.device);
  check_device_exists(device);
  PrintedLog log("generate");
  const io::Checkpoint ck = train::load_checkpoint_noting(o.checkpoint, device, &log);
  const auto model = ck.info.find("model");
  MG_CHECK(model != ck.info.end() && model->second == "gpt", o.checkpoint, " is a checkpoint of ",
           model == ck.info.end() ? "a model it does not name" : "--model " + model->second,
           "; generate needs one of --model gpt");
  const std::unique_ptr<data::Tokenizer> tokenizer = train::checkpoint_tokenizer(ck.info, o.checkpoint);
  const std::vector<int64_t> prompt = tokenizer->encode(o.prompt);
  MG_CHECK(!prompt.empty(), "--prompt is empty: give at least one character to continue");
  if (!o.no_memory_check) {  // the model still to build, and the logits of its longest window
    const nn::GPTConfig config = nn::gpt_config_from_info(ck.info, o.checkpoint);
    nn::check_gpt_state(config, ck.model_state, o.checkpoint);  // the sizes are the tensors' own
    const int64_t window = std::min(int64_t(prompt.size()) + o.tokens, config.context);
    check_step_fits({.params = nn::gpt_parameter_count(config),
                     .activation_bytes = window * config.vocab_size * 4,
                     .activations_of = detail::str_cat("a window of ", window, " tokens"),
                     .devices_here = {device},
                     .training = false,
                     .remedy = "a device with more memory"});
  }
  const auto net = std::dynamic_pointer_cast<nn::GPT>(train::checkpoint_model(ck, o.checkpoint, device));
  MG_CHECK(tokenizer->vocab_size() == net->config().vocab_size, o.checkpoint, ": its tokenizer has ",
           tokenizer->vocab_size(), " ids but its model ", net->config().vocab_size);
  manual_seed(o.seed);
  std::cout << tokenizer->decode(net->generate(prompt, o.tokens, o.temperature, o.top_k)) << "\n" << std::flush;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  GenerateOptions& o = *options;
  CLI::App* cmd = app.add_subcommand("generate", "print text that a trained GPT writes after a prompt");
  cmd->add_option("--checkpoint", o.checkpoint, "a checkpoint of multigrad train --model gpt")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--prompt", o.prompt, "the text to continue (default: a newline)");
  cmd->add_option("--tokens", o.tokens, "how many tokens to add")->check(sign_check(true))->capture_default_str();
  cmd->add_option("--temperature", o.temperature, "divides the logits (0: always the most likely token)")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--top-k", o.top_k, "sample among the K most likely tokens (0: all)")
      ->check(sign_check(true))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of the sampling")->check(seed_check())->capture_default_str();
  cmd->add_option("--device", o.device, "where the model runs (cpu, cuda:0, ...)")->capture_default_str();
  cmd->add_flag("--no-memory-check", o.no_memory_check, "run even when the memory preflight says it cannot fit");
  cmd->callback([options] { run_generate(*options); });
}

}  // namespace mg::cli
