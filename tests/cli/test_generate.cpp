// tests/cli/test_generate.cpp — `multigrad generate` on a checkpoint that `multigrad train --model
// gpt` wrote: the prompt continued by --tokens bytes, the same text for the same --seed, words
// from a BPE checkpoint's merges, and one clear line for a checkpoint that is not a GPT's, a
// missing file, bad flags and a model that cannot fit in memory.
#include <functional>
#include <string>

#include "cli/run_cli.h"
#include "multigrad/io/checkpoint.h"
#include "io/io_test_util.h"
#include "test_util.h"

namespace {

using mg::test::CliResult;
using mg::test::require_one_line_error;
using mg::test::run_cli;
using mg::test::TempDir;
using mg::test::without_gemm_warning;

// Trains the tiny GPT on the repeated sentence for `steps` steps with `flags` added, and returns
// the path of its last checkpoint.
std::string train_tiny_gpt(const TempDir& dir, const std::string& flags, int steps) {
  const std::string text = mg::test::write_sentences(dir.file("text.txt"), 5000);
  const CliResult trained = run_cli("train --model gpt --config tiny --data " + text + flags + " --max-steps " +
                                    std::to_string(steps) + " --batch-size 8 --lr 1e-2 --test-limit 4 --checkpoint-dir '" +
                                    dir.file("ck") + "'");
  INFO("stdout: " << trained.out << "\nstderr: " << trained.err);
  REQUIRE(trained.status == 0);
  return dir.file("ck/step-" + std::to_string(steps) + ".safetensors");
}

}  // namespace

TEST_CASE("generate: a trained GPT's checkpoint continues the prompt, the same text for the same seed", "[cli][gpt]") {
  TempDir dir;
  const std::string ck = "--checkpoint '" + train_tiny_gpt(dir, "", 150) + "'";
  const CliResult a = run_cli("generate " + ck + " --prompt 'the quick' --tokens 30 --seed 1");
  const CliResult b = run_cli("generate " + ck + " --prompt 'the quick' --tokens 30 --seed 1");
  const CliResult c = run_cli("generate " + ck + " --prompt 'the quick' --tokens 30 --seed 2 --temperature 2");
  for (const CliResult* r : {&a, &b, &c}) {
    INFO("stdout: " << r->out << "\nstderr: " << r->err);
    REQUIRE(r->status == 0);
    CHECK(without_gemm_warning(r->err).empty());
    REQUIRE(r->out.size() == 9 + 30 + 1);  // the prompt, 30 bytes, a newline
    CHECK(r->out.substr(0, 9) == "the quick");
  }
  CHECK(a.out == b.out);
  CHECK(a.out != c.out);
  // greedy after 150 steps on one sentence: the model has learnt at least its next word
  const CliResult greedy = run_cli("generate " + ck + " --prompt 'the quick' --tokens 6 --temperature 0");
  INFO("greedy: " << greedy.out);
  CHECK(greedy.out.substr(0, 15) == "the quick brown");
  // --top-k 1 samples among the most likely token alone: greedy's text, whatever the seed.
  const CliResult top1 = run_cli("generate " + ck + " --prompt 'the quick' --tokens 6 --top-k 1 --seed 7");
  INFO("top-k 1: " << top1.out << "\nstderr: " << top1.err);
  REQUIRE(top1.status == 0);
  CHECK(top1.out == greedy.out);
  require_one_line_error(run_cli("generate " + ck + " --prompt ''"), {"--prompt is empty"});
  require_one_line_error(run_cli("generate " + ck + " --top-k -2"), {"--top-k"});
  // The memory preflight, on a host with nothing to give (the test hook): the model and the
  // logits of the longest window (9 + 30 tokens, cut to the tiny config's context of 16).
  require_one_line_error(run_cli("generate " + ck + " --prompt 'the quick' --tokens 30", "MG_TEST_MEMORY_AVAILABLE_MB=0"),
                         {"multigrad generate: the model (", " of parameters) and the logits of a window of 16 tokens",
                          "0.0 MiB left", "--no-memory-check"});
  CHECK(run_cli("generate " + ck + " --prompt 'the quick' --tokens 30 --seed 1 --no-memory-check",
                "MG_TEST_MEMORY_AVAILABLE_MB=0")
            .out == a.out);
}

TEST_CASE("generate: a GPT trained with --tokenizer bpe writes with the checkpoint's merges", "[cli][gpt]") {
  TempDir dir;
  const std::string ck = train_tiny_gpt(dir, " --tokenizer bpe --vocab-size 300", 100);
  // Greedy: " brown" and " fox" are one token each, so 2 tokens write both words.
  const CliResult greedy = run_cli("generate --checkpoint '" + ck + "' --prompt 'the quick' --tokens 2 --temperature 0");
  INFO("stdout: " << greedy.out << "\nstderr: " << greedy.err);
  REQUIRE(greedy.status == 0);
  CHECK(greedy.out == "the quick brown fox\n");
}

TEST_CASE("generate: a checkpoint that is not a GPT's, a missing file and bad flags are one clear line", "[cli][gpt]") {
  TempDir dir;
  const CliResult mlp = run_cli("train --limit 128 --batch-size 64 --epochs 1 --checkpoint-dir '" + dir.path() + "'");
  REQUIRE(mlp.status == 0);
  const std::string ck = dir.file("epoch-1.safetensors");
  require_one_line_error(run_cli("generate --checkpoint '" + ck + "'"),
                         {"multigrad generate: ", ck, "--model mlp", "--model gpt"});
  require_one_line_error(run_cli("generate --checkpoint '" + dir.file("none") + "'"), {"multigrad generate: ", "none"});
  require_one_line_error(run_cli("generate"), {"multigrad generate: ", "--checkpoint"});
  require_one_line_error(run_cli("generate --checkpoint '" + ck + "' --tokens -3"), {"--tokens"});
  require_one_line_error(run_cli("generate --checkpoint '" + ck + "' --temperature -1"), {"--temperature"});
}

TEST_CASE("generate: a checkpoint whose tokenizer is unknown, incomplete or the wrong size is one clear line",
          "[cli][gpt]") {
  TempDir dir;
  const std::string ck = train_tiny_gpt(dir, " --tokenizer bpe --vocab-size 300", 2);
  // The same checkpoint, its info edited.
  const auto rewritten = [&](const std::string& name, const std::function<void(mg::io::Checkpoint&)>& edit) {
    mg::io::Checkpoint c = mg::io::load_checkpoint(ck);
    edit(c);
    mg::io::save_checkpoint(dir.file(name), c);
    return "generate --checkpoint '" + dir.file(name) + "'";
  };
  require_one_line_error(run_cli(rewritten("words.safetensors", [](auto& c) { c.info["tokenizer"] = "words"; })),
                         {"words.safetensors", "tokenizer 'words'", "(bytes, bpe)"});
  require_one_line_error(run_cli(rewritten("none.safetensors", [](auto& c) { c.info.erase("bpe_merges"); })),
                         {"none.safetensors", "holds no bpe_merges"});
  require_one_line_error(run_cli(rewritten("bad.safetensors", [](auto& c) { c.info["bpe_merges"] += "1 2 3\n"; })),
                         {"bad.safetensors (bpe_merges)", "'1 2 3' is not a merge"});
  // One merge fewer than the model has ids (the sentence's words took fewer than 300).
  const int64_t vocab = std::stoll(mg::io::load_checkpoint(ck).info.at("gpt.vocab_size"));
  REQUIRE(vocab > 256);
  require_one_line_error(run_cli(rewritten("short.safetensors", [](auto& c) {
                           std::string& merges = c.info["bpe_merges"];
                           merges.erase(merges.rfind('\n', merges.size() - 2) + 1);
                         })),
                         {"short.safetensors", "its tokenizer has " + std::to_string(vocab - 1) +
                                                   " ids but its model " + std::to_string(vocab)});
}
