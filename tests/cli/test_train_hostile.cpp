// tests/cli/test_train_hostile.cpp — `multigrad train` and `eval` under hostile use: corrupt and
// edited checkpoints, a checkpoint folder of another run, limits past the data, and evaluation
// at the run's precision. Run as a user would: the built binary (MG_CLI_PATH).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/run_cli.h"
#include "io/io_test_util.h"
#include "multigrad/io/safetensors.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using mg::test::contains;
using mg::test::require_one_line_error;
using mg::test::TempDir;
using Run = mg::test::RunSummary;

Run cli(const std::string& args) { return mg::test::parse_summary(mg::test::run_cli(args)); }

// Flips one bit of the first byte of a safetensors file's data section (the tensor first in name
// order).
void flip_first_data_bit(const std::string& path) {
  std::string bytes = mg::test::read_bytes(path);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), sizeof(header));
  bytes[8 + header] ^= 0x01;
  mg::test::write_bytes(path, bytes);
}

// Rewrites a safetensors file with metadata `key` set to `value` (or removed when empty) and
// every key starting with `drop` removed.
void edit_metadata(const std::string& path, const std::string& key, const std::string& value,
                   const std::string& drop = "") {
  mg::io::SafetensorsFile file = mg::io::load_safetensors(path);
  mg::io::Metadata meta;
  for (const auto& [k, v] : file.metadata)
    if (drop.empty() || !k.starts_with(drop)) meta.emplace(k, v);
  if (!key.empty()) meta[key] = value;
  mg::io::save_safetensors(path, file.tensors, meta);
}

}  // namespace

TEST_CASE("eval: a bf16 gpt's checkpoint is evaluated at bf16, giving the run's numbers, --precision overrides",
          "[train][eval]") {
  TempDir dir;
  const std::string text = mg::test::write_sentences(dir.file("text.txt"), 5000);
  const Run run = cli("train --model gpt --config tiny --precision bf16 --data " + text +
                      " --max-steps 4 --batch-size 8 --test-limit 4 --checkpoint-dir '" + dir.file("ck") + "'");
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  REQUIRE(run.status == 0);
  const std::string checkpoint = dir.file("ck/step-4.safetensors");
  const Run eval = cli("eval --data " + text + " --test-limit 4 --checkpoint '" + checkpoint + "'");
  INFO("eval stdout: " << eval.out << "\nstderr: " << eval.err);
  REQUIRE(eval.status == 0);
  CHECK(contains(eval.out, ", bf16 (the run's)\n"));
  for (const char* key : {"val_loss", "val_bpb", "params_sha256"}) CHECK(eval.summary.at(key) == run.summary.at(key));
  const Run fp32 = cli("eval --data " + text + " --test-limit 4 --precision fp32 --checkpoint '" + checkpoint + "'");
  REQUIRE(fp32.status == 0);
  CHECK(contains(fp32.out, ", fp32 (--precision)\n"));
  require_one_line_error(mg::test::run_cli("eval --precision fp64 --checkpoint '" + checkpoint + "'"),
                         {"--precision", "fp64"});
}

TEST_CASE("train and eval: a gpt's --limit or --test-limit past its data is refused, naming the windows",
          "[train][eval][gpt]") {
  TempDir dir;
  const std::string text = mg::test::write_sentences(dir.file("text.txt"), 5000);
  const std::string gpt = "train --model gpt --config tiny --max-steps 1 --batch-size 4 --data " + text;
  // 4500 training bytes: 4484 windows of 16 (stride 1); 500 validation bytes: 31 windows (stride 16).
  require_one_line_error(mg::test::run_cli(gpt + " --test-limit 99999999"),
                         {"--test-limit 99999999 is larger than the validation set (31 windows)"});
  require_one_line_error(mg::test::run_cli(gpt + " --limit 9223372036854775807"),
                         {"--limit 9223372036854775807 is larger than the training set (4484 windows)"});
  const Run ok = cli(gpt + " --limit 4484 --test-limit 31 --checkpoint-dir '" + dir.file("ck") + "'");
  INFO("stdout: " << ok.out << "\nstderr: " << ok.err);
  REQUIRE(ok.status == 0);
  require_one_line_error(mg::test::run_cli("eval --data " + text + " --test-limit 32 --checkpoint '" +
                                           dir.file("ck/step-1.safetensors") + "'"),
                         {"--test-limit 32 is larger than the validation set (31 windows)"});
}

TEST_CASE("eval and generate: checkpoint metadata that contradict its tensors are refused before the model is built",
          "[train][eval][gpt]") {
  TempDir dir;
  const std::string text = mg::test::write_sentences(dir.file("text.txt"), 5000);
  REQUIRE(cli("train --model gpt --config tiny --max-steps 1 --batch-size 4 --test-limit 4 --data " + text +
              " --checkpoint-dir '" + dir.file("ck") + "'").status == 0);
  const std::string checkpoint = dir.file("ck/step-1.safetensors");
  edit_metadata(checkpoint, "info.gpt.context", "100000000");
  const std::vector<std::string> wanted{checkpoint, "gpt.context 100000000", "wpe.weight", "[16, 16]"};
  require_one_line_error(mg::test::run_cli("eval --data " + text + " --checkpoint '" + checkpoint + "'"), wanted);
  require_one_line_error(mg::test::run_cli("generate --tokens 2 --checkpoint '" + checkpoint + "'"), wanted);
  edit_metadata(checkpoint, "info.gpt.context", "16");
  edit_metadata(checkpoint, "info.gpt.n_layer", "3");
  require_one_line_error(mg::test::run_cli("eval --data " + text + " --checkpoint '" + checkpoint + "'"),
                         {"gpt.n_layer 3", "fewer"});
}

TEST_CASE("a flipped bit in a checkpoint: eval names the tensor, --resume goes back to the previous intact one",
          "[train][eval]") {
  TempDir dir;
  const std::string common = "train --limit 256 --batch-size 64 --seed 3 --test-limit 100 --epochs 2 --checkpoint-dir '" +
                             dir.path() + "'";
  const Run whole = cli(common);
  REQUIRE(whole.status == 0);
  const std::string newest = dir.file("epoch-2.safetensors");
  flip_first_data_bit(newest);
  require_one_line_error(mg::test::run_cli("eval --checkpoint '" + newest + "'"),
                         {newest, "tensor 'model.", "does not match its checksum"});
  const Run resumed = cli(common + " --resume");
  INFO("stdout: " << resumed.out << "\nstderr: " << resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(contains(resumed.err, "--resume skips " + newest + ": "));
  CHECK(contains(resumed.err, "checksum"));
  CHECK(contains(resumed.out, "resume: from " + dir.file("epoch-1.safetensors") + ", step 4\n"));
  CHECK(resumed.summary.at("params_sha256") == whole.summary.at("params_sha256"));

  // A checkpoint of an older multigrad (no checksums) loads, with a notice.
  edit_metadata(dir.file("epoch-2.safetensors"), "", "", "sha256.");
  const Run old = cli("eval --test-limit 100 --checkpoint '" + dir.file("epoch-2.safetensors") + "'");
  INFO("eval stdout: " << old.out << "\nstderr: " << old.err);
  REQUIRE(old.status == 0);
  CHECK(contains(old.err, "carries no checksums"));
  CHECK(old.summary.at("params_sha256") == whole.summary.at("params_sha256"));
}

TEST_CASE("train: a fresh run into another run's checkpoint folder is refused, naming what differs, --overwrite "
          "replaces its checkpoints",
          "[train]") {
  TempDir dir;
  const std::string common = "train --limit 256 --batch-size 64 --test-limit 100 --epochs 1 --checkpoint-dir '" +
                             dir.path() + "'";
  REQUIRE(cli(common + " --lr 0.1").status == 0);
  require_one_line_error(mg::test::run_cli(common + " --lr 0.05"),
                         {"--checkpoint-dir " + dir.path() + " holds the checkpoints of another run",
                          dir.file("epoch-1.safetensors"), "--lr 0.1 (this run: 0.05)", "--resume", "--overwrite"});
  require_one_line_error(mg::test::run_cli(common + " --lr 0.1"), {"holds the checkpoints of another run"});
  const Run replaced = cli(common + " --lr 0.05 --keep-last 1 --overwrite");
  INFO("stdout: " << replaced.out << "\nstderr: " << replaced.err);
  REQUIRE(replaced.status == 0);
  CHECK(contains(replaced.out, "checkpoints: --overwrite removed 1 checkpoint of an earlier run from " +
                                   dir.path() + "\n"));
  const Run again = cli(common + " --lr 0.05 --resume");  // the folder is the new run's now
  INFO("again stdout: " << again.out << "\nstderr: " << again.err);
  CHECK(again.status == 0);
}

TEST_CASE("train and generate: flags out of their range name what is needed, in words", "[train]") {
  const auto train = [](const std::string& args) { return mg::test::run_cli("train " + args); };
  // No 309-digit range in the message.
  require_one_line_error(train("--precision fp16 --init-loss-scale 0"),
                         {"--init-loss-scale", "between 2^-24 and 2^127", "got 0"});
  require_one_line_error(train("--precision fp16 --init-loss-scale 1e39"), {"--init-loss-scale", "got 1e39"});
  require_one_line_error(train("--timeout 0.0001"), {"--timeout", "between 0.001 and 604800 seconds", "got 0.0001"});
  require_one_line_error(train("--timeout 1e300"), {"--timeout", "got 1e300"});
  require_one_line_error(train("--seed -1"), {"--seed", "0 to 18446744073709551615", "got -1"});
  require_one_line_error(train("--seed 18446744073709551616"), {"--seed", "got 18446744073709551616"});
  for (const std::string flag : {"--tokens -1", "--temperature -0.5", "--top-k -2", "--seed -3"}) {
    const mg::test::CliResult r = mg::test::run_cli("generate --checkpoint /dev/null " + flag);
    INFO(flag << ": " << r.err);
    CHECK(r.status > 0);
    CHECK(r.err.size() < 200);
    CHECK(contains(r.err, flag.substr(0, flag.find(' '))));
  }
}

TEST_CASE("train: flags that do nothing in the mode given are refused, a mesh makes its own devices", "[train]") {
  const auto train = [](const std::string& args) { return mg::test::run_cli("train " + args); };
  require_one_line_error(train("--parallel ddp --micro-batches 8"),
                         {"--micro-batches is for a pipeline", "--parallel ddp"});
  require_one_line_error(train("--schedule gpipe"), {"--schedule is for a pipeline", "--parallel none"});
  require_one_line_error(train("--precision fp16 --detect-anomaly"), {"--detect-anomaly", "--precision fp16"});
  require_one_line_error(train("--mesh dp=2,tp=2 --devices cpu:0,cpu:1"),
                         {"--mesh dp=2,tp=2 has 4 ranks but --devices lists 2 devices", "cpu:0..cpu:3"});
  // The CUDA ledger: the simulated build's (this one is not), and --ledger-step says which step of it.
  require_one_line_error(train("--ledger step.jsonl"), {"--ledger step.jsonl", "-DMG_CUDA_SIM=ON"});
  require_one_line_error(train("--ledger-step 3"), {"--ledger-step 3", "no --ledger"});
  // --devices auto with a mesh: one CPU device per rank here (no GPU).
  const Run mesh = cli("train --mesh dp=2,tp=2 --limit 256 --batch-size 64 --epochs 1 --test-limit 100");
  INFO("stdout: " << mesh.out << "\nstderr: " << mesh.err);
  CHECK(mesh.status == 0);
  CHECK(contains(mesh.out, "cpu:3"));
}

TEST_CASE("train: a run that --max-steps ends inside an epoch shows its progress toward the last step, bpe shows its "
          "own",
          "[train][gpt]") {
  TempDir dir;
  const std::string text = mg::test::write_sentences(dir.file("text.txt"), 5000);
  // Far more windows than the 20 steps of 4 take: the run ends inside its first epoch.
  const Run r = cli("train --model gpt --config tiny --max-steps 20 --batch-size 4 --test-limit 4 --tokenizer bpe "
                    "--vocab-size 280 --data " + text);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "epochs 1..1 (20 steps)"));
  for (const char* tenth : {"epoch 1/1  10%  8/80  ", "epoch 1/1  50%  40/80  ", "epoch 1/1  100%  80/80  "})
    CHECK(contains(r.out, tenth));
  CHECK(contains(r.out, "epoch 1/1: train loss"));
  CHECK(contains(r.out, "bpe: learning up to 24 merges from 4500 bytes\n"));
  CHECK(contains(r.out, "bpe: 50% (268 of 280 tokens)"));
  CHECK(contains(r.out, "bpe: a vocabulary of 280 tokens in "));
}

TEST_CASE("train and eval: a step or batch that cannot fit in memory is refused before it runs, --no-memory-check runs it",
          "[train]") {
  // gpt2's sizes at 100000 sequences: terabytes of activations on any machine.
  require_one_line_error(mg::test::run_cli("train --model gpt --config gpt2 --batch-size 100000"),
                         {"a training step needs at least", "GiB", "activations", "100000 sequences of 1024 tokens",
                          "available", "--recompute", "--no-memory-check"});
  // A host with 1 MiB to give (the test hook): the MLP's 0.9 MiB of parameters, Adam's state and
  // the activations of 64 images do not fit; split over 2 ddp ranks, each holds them all.
  const std::string mlp = "train --limit 256 --batch-size 64 --epochs 1 --test-limit 100 --optimizer adam";
  require_one_line_error(mg::test::run_cli(mlp, "MG_TEST_MEMORY_AVAILABLE_MB=1"),
                         {"a training step needs at least 3.", "MiB", "64 images", "1.0 MiB available"});
  require_one_line_error(mg::test::run_cli(mlp + " --parallel ddp --devices cpu:0,cpu:1", "MG_TEST_MEMORY_AVAILABLE_MB=1"),
                         {"on each of 2 ranks", "32 images", "for the 2 of them on the host"});
  TempDir dir;
  const Run forced = mg::test::parse_summary(mg::test::run_cli(
      mlp + " --no-memory-check --checkpoint-dir '" + dir.path() + "'", "MG_TEST_MEMORY_AVAILABLE_MB=1"));
  INFO("stdout: " << forced.out << "\nstderr: " << forced.err);
  CHECK(forced.status == 0);
  // eval: a batch's logits against what is left once the model is in memory (here nothing).
  const std::string eval = "eval --test-limit 100 --checkpoint '" + dir.file("epoch-1.safetensors") + "'";
  require_one_line_error(mg::test::run_cli(eval, "MG_TEST_MEMORY_AVAILABLE_MB=0"),
                         {"the logits of 100 images need at least", "0.0 MiB left", "--batch-size"});
  CHECK(mg::test::run_cli(eval + " --no-memory-check", "MG_TEST_MEMORY_AVAILABLE_MB=0").status == 0);
}
