// examples/gpt.cpp — a GPT learning the next byte of a text, cut into a 1F1B pipeline of two stages,
// against one device.
//
//   build/examples/gpt                    # exits 1 if the pipeline's model differs from one device's
//
// The data: the text's bytes as tokens, next-token windows of 16 (data::TokenWindows: inputs are
// tokens i..i+15, targets i+1..i+16), batched by a DataLoader with two worker threads and a
// shuffled order (data/dataloader.cpp). The model: nn::gpt at the "tiny" size (context 16, 2
// blocks, 2 heads, 16 wide, the byte vocabulary of 256), GPT-2's layout (nn/gpt.h).
//
// The layout: GPT::layers() (the embeddings, the blocks, the final norm, the tied head) cut into
// 2 stages, a thread each on cpu:0 and cpu:1; every batch as 2 micro-batches that the 1F1B
// schedule (parallel/pipeline/schedule.h) runs through the stages, activations sent forward and
// their gradients back. The gradients accumulate in micro-batch order, as one device's
// --grad-accum 2: bit-identical. The head shares the token embedding's weight across the two
// stages; the pipeline adds the two stages' gradients of it in the order one device would.
// On the CLI: multigrad train --model gpt --parallel pipeline --schedule 1f1b --deterministic.
#include <cstdio>
#include <string>
#include <vector>

#include "example.h"  // the loop (example::train) and the comparison

namespace {

const char* const kText =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
    "of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season "
    "of Light, it was the season of Darkness, it was the spring of hope, it was the winter of "
    "despair, we had everything before us, we had nothing before us.";

std::shared_ptr<mg::nn::Module> tiny_gpt() {
  mg::manual_seed(0);  // both runs start from the same parameters
  return mg::nn::gpt(mg::nn::gpt_config("tiny", mg::data::ByteTokenizer::kVocabSize));
}

// The first example::kSteps batches of 8 windows, in the loader's shuffled order.
std::vector<mg::data::Batch> text_batches() {
  const std::vector<int64_t> tokens = mg::data::ByteTokenizer().encode(kText);
  auto windows = std::make_shared<mg::data::TokenWindows>(tokens, /*context=*/16, /*stride=*/4);
  mg::data::DataLoader loader(windows, {.batch_size = 8, .shuffle = true, .drop_last = true, .num_workers = 2});
  loader.start_epoch(0);
  std::vector<mg::data::Batch> out;
  while (out.size() < size_t(example::kSteps)) {
    std::optional<mg::data::Batch> batch = loader.next();
    if (!batch) break;
    out.push_back(*batch);
  }
  std::printf("%zu tokens, %lld windows, %zu batches of 8\n", tokens.size(), (long long)windows->size(), out.size());
  return out;
}

}  // namespace

int main() {
  mg::set_cpu_device_count(2);
  mg::set_deterministic(true);
  const std::vector<mg::Device> devices = {mg::Device("cpu:0"), mg::Device("cpu:1")};
  const std::vector<mg::data::Batch> batches = text_batches();

  std::puts("one device, each batch as 2 micro-batches:");
  const std::string reference = example::train(tiny_gpt(), batches, {}, {devices[0]}, {}, 2);

  std::puts("a 1F1B pipeline of 2 stages on cpu:0 and cpu:1, 2 micro-batches:");
  const mg::train::Plan plan{.pipeline = true, .pipeline_options = {.schedule = "1f1b", .micro_batches = 2}};
  const std::string pipeline = example::train(tiny_gpt(), batches, {}, devices, plan, 1);
  return example::compare("one device", reference, "1f1b", {pipeline});
}
