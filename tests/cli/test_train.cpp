// tests/cli/test_train.cpp — `multigrad train`, run as a user would: the built binary
// (MG_CLI_PATH) on the installed Fashion-MNIST files (short runs, --limit) and on small IDX
// files written here to be truncated, corrupt or mismatched.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_cli.h"
#include "multigrad/kernels/cpu/isa.h"
#include "multigrad/kernels/cpu/matmul_bf16.h"
#include "io/io_test_util.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using mg::test::lines;
using mg::test::TempDir;

using Run = mg::test::RunSummary;

using mg::test::contains;
using mg::test::require_one_line_error;

Run train(const std::string& args, const std::string& env = "") {
  return mg::test::parse_summary(mg::test::run_cli("train " + args, env));
}

// Every params_sha256 line's digest, in order (a rank's each).
std::vector<std::string> rank_hashes(const Run& r) {
  std::vector<std::string> out;
  for (const std::string& line : lines(r.out))
    if (line.rfind("params_sha256: ", 0) == 0) out.push_back(line.substr(15, 64));
  return out;
}

// The "step N: ..." line of --eval-every's evaluation at step n ("" when there is none).
std::string step_line(const std::string& out, int64_t n) {
  const std::string prefix = "step " + std::to_string(n) + ": ";
  for (const std::string& line : lines(out))
    if (line.rfind(prefix, 0) == 0) return line;
  return "";
}

// ---- small IDX files ----

void put_u32(std::vector<uint8_t>& bytes, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(uint8_t(v >> shift));
}

// An unsigned-byte IDX array (magic 0 0 0x08 ndim, big-endian dims, data), gzip-compressed
// into `path` + ".gz" like the Debian package's files.
void write_idx_gz(const std::string& path, const std::vector<uint32_t>& dims, size_t data_bytes,
                  uint8_t type = 0x08) {
  std::vector<uint8_t> bytes = {0, 0, type, uint8_t(dims.size())};
  for (uint32_t d : dims) put_u32(bytes, d);
  for (size_t i = 0; i < data_bytes; ++i) bytes.push_back(uint8_t(i % 10));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  REQUIRE(std::system(("gzip -f '" + path + "'").c_str()) == 0);
}

constexpr uint32_t kImages = 8;            // per split of the small data sets
constexpr size_t kImageBytes = 28 * 28;

// A complete small data set: train and t10k, kImages images each.
void write_valid_set(const TempDir& dir) {
  for (const std::string split : {"train", "t10k"}) {
    write_idx_gz(dir.file(split + "-images-idx3-ubyte"), {kImages, 28, 28}, kImages * kImageBytes);
    write_idx_gz(dir.file(split + "-labels-idx1-ubyte"), {kImages}, kImages);
  }
}

constexpr const char* kSummaryKeys[] = {"test_accuracy", "test_loss", "samples_per_s", "peak_memory_mb",
                                        "params_sha256"};

}  // namespace

TEST_CASE("train: a short MLP run lowers its loss, writes the metrics CSV and prints every summary key",
          "[train]") {
  TempDir dir;
  Run r = train("--limit 1024 --epochs 2 --batch-size 64 --seed 1 --metrics '" + dir.file("m.csv") + "'");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  for (const char* key : kSummaryKeys) {
    INFO("summary key " << key);
    CHECK(r.summary.count(key) == 1);
  }
  CHECK(r.summary["peak_memory_mb"].rfind("cpu:0=", 0) == 0);
  CHECK(r.summary["params_sha256"].size() == 64);
  CHECK(std::stod(r.summary["test_accuracy"]) > 0.5);  // ten classes: chance is 0.1

  std::ifstream csv(dir.file("m.csv"));
  std::string header, row1, row2, extra;
  std::getline(csv, header);
  std::getline(csv, row1);
  std::getline(csv, row2);
  CHECK(header == "epoch,train_loss,train_accuracy,test_loss,test_accuracy,samples_per_s,seconds");
  CHECK_FALSE(std::getline(csv, extra));
  double loss1 = 0, loss2 = 0;
  int epoch1 = 0, epoch2 = 0;
  REQUIRE(std::sscanf(row1.c_str(), "%d,%lf", &epoch1, &loss1) == 2);
  REQUIRE(std::sscanf(row2.c_str(), "%d,%lf", &epoch2, &loss2) == 2);
  CHECK(epoch1 == 1);
  CHECK(epoch2 == 2);
  CHECK(loss2 < loss1);
  // Not a terminal: plain progress lines, never a '\r' redraw.
  CHECK(contains(r.out, "epoch 1/2  100%"));
  CHECK_FALSE(contains(r.out, "\r"));
}

TEST_CASE("train: --grad-accum 2 gives parameters close to --grad-accum 1", "[train]") {
  TempDir dir;
  const std::string common = "--limit 512 --epochs 1 --batch-size 64 --seed 2 --checkpoint-dir '";
  const Run one = train(common + (dir.file("one")) + "'");
  const Run two = train(common + (dir.file("two")) + "' --grad-accum 2");
  INFO("stdout: " << one.out << two.out << "\nstderr: " << one.err << two.err);
  REQUIRE(one.status == 0);
  REQUIRE(two.status == 0);
  CHECK(contains(two.out, "in 2 micro-batch(es)"));
  const auto a = mg::io::load_checkpoint(dir.file("one/epoch-1.safetensors")).model_state;
  const auto b = mg::io::load_checkpoint(dir.file("two/epoch-1.safetensors")).model_state;
  REQUIRE(a.size() == b.size());
  for (const auto& [name, tensor] : a) {
    INFO("parameter " << name);
    mg::test::require_close(b.at(name), mg::test::values(tensor), 1e-3, 1e-5);
  }
}

TEST_CASE("train: --epochs 1 then --epochs 2 --resume ends with the same params_sha256 as --epochs 2",
          "[train]") {
  // A constant rate: under the default cosine schedule a 1-epoch run anneals to 0 (another run).
  TempDir dir;
  const std::string common = "--limit 512 --batch-size 64 --seed 3 --optimizer adam --lr-schedule constant";
  Run straight = train(common + " --epochs 2");
  Run first = train(common + " --epochs 1 --checkpoint-dir '" + dir.path() + "'");
  Run resumed = train(common + " --epochs 2 --resume --checkpoint-dir '" + dir.path() + "'");
  INFO("stdout: " << straight.out << first.out << resumed.out << "\nstderr: " << straight.err << first.err
                  << resumed.err);
  REQUIRE(straight.status == 0);
  REQUIRE(first.status == 0);
  REQUIRE(resumed.status == 0);
  CHECK(contains(resumed.out, "epochs 2..2"));
  CHECK(first.summary["params_sha256"] != straight.summary["params_sha256"]);
  CHECK(resumed.summary["params_sha256"] == straight.summary["params_sha256"]);
  CHECK(resumed.summary["test_accuracy"] == straight.summary["test_accuracy"]);
}

TEST_CASE("train: a cosine-schedule run stopped after epoch 1 and resumed ends as it would have", "[train]") {
  TempDir dir;
  const std::string common = "--limit 512 --batch-size 64 --seed 4 --checkpoint-dir '" + dir.path() + "'";
  Run whole = train(common + " --epochs 2");
  REQUIRE(whole.status == 0);
  fs::remove(dir.file("epoch-2.safetensors"));  // as if killed during epoch 2
  Run resumed = train(common + " --epochs 2 --resume");
  INFO("stdout: " << whole.out << resumed.out << "\nstderr: " << whole.err << resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(resumed.summary["params_sha256"] == whole.summary["params_sha256"]);
  // Resuming under another schedule would not continue that run: refused.
  fs::remove(dir.file("epoch-2.safetensors"));
  require_one_line_error(train(common + " --epochs 3 --resume"), {"multigrad train: ", "learning rate", "--epochs"});
}

TEST_CASE("train: a run resumed inside an epoch from --checkpoint-every's checkpoints ends as it would have",
          "[train]") {
  TempDir dir;
  // 5 batches an epoch, 10 steps, a cosine schedule over all of them
  const std::string common = "--limit 320 --batch-size 64 --epochs 2 --seed 5 --checkpoint-every 2 "
                             "--checkpoint-dir '" + dir.path() + "'";
  const Run whole = train(common + " --workers 2");
  INFO("stdout: " << whole.out << "\nstderr: " << whole.err);
  REQUIRE(whole.status == 0);
  // every 2 steps inside an epoch, and after each epoch
  for (const char* name : {"step-2", "step-4", "epoch-1", "step-6", "step-8", "epoch-2"})
    CHECK(fs::exists(dir.file(std::string(name) + ".safetensors")));
  CHECK(!fs::exists(dir.file("step-10.safetensors")));
  for (const char* gone : {"epoch-1", "step-6", "step-8", "epoch-2"}) fs::remove(dir.file(std::string(gone) + ".safetensors"));
  const Run from_4 = train(common + " --resume --workers 2");  // 1 batch of epoch 1 left, then epoch 2
  INFO("stdout: " << from_4.out << "\nstderr: " << from_4.err);
  REQUIRE(from_4.status == 0);
  CHECK(contains(from_4.out, "epochs 1..2"));
  CHECK(from_4.summary.at("params_sha256") == whole.summary.at("params_sha256"));
  CHECK(fs::exists(dir.file("step-8.safetensors")));  // written again on the way
  fs::remove(dir.file("epoch-2.safetensors"));
  const Run from_8 = train(common + " --resume --workers 0");  // inside epoch 2; the worker count changes nothing
  INFO("stdout: " << from_8.out << "\nstderr: " << from_8.err);
  REQUIRE(from_8.status == 0);
  CHECK(contains(from_8.out, "epochs 2..2"));
  CHECK(from_8.summary.at("params_sha256") == whole.summary.at("params_sha256"));
}

TEST_CASE("train: --resume with another --batch-size is refused, without a checkpoint it starts afresh, saying so",
          "[train]") {
  TempDir dir;
  require_one_line_error(train("--resume"), {"multigrad train: ", "--checkpoint-dir"});
  const std::string run = "--limit 256 --epochs 1 --batch-size 64 --test-limit 100";
  const Run plain = train(run);
  for (const std::string& folder : {dir.path(), dir.file("not-yet")}) {
    const Run fresh = train(run + " --resume --checkpoint-dir '" + folder + "'");
    INFO("stdout: " << fresh.out << "\nstderr: " << fresh.err);
    REQUIRE(fresh.status == 0);
    CHECK(contains(fresh.out, "resume: no checkpoint in " + folder + " yet, starting from the beginning\n"));
    CHECK(fresh.summary.at("params_sha256") == plain.summary.at("params_sha256"));
  }
  require_one_line_error(train("--limit 256 --epochs 2 --batch-size 32 --resume --checkpoint-dir '" +
                               dir.path() + "'"),
                         {"multigrad train: ", "step 4", "--batch-size"});
}

TEST_CASE("train: --resume refuses another value of a setting that decides the result, naming it, the others may "
          "change", "[train]") {
  TempDir dir;
  const std::string run = "--limit 256 --batch-size 64 --test-limit 100 --epochs 2 --seed 3 --lr-schedule constant "
                          "--checkpoint-dir '" + dir.path() + "'";
  const Run whole = train(run + " --weight-decay 1e-4");
  REQUIRE(whole.status == 0);
  fs::remove(dir.file("epoch-2.safetensors"));
  const std::vector<std::pair<std::string, std::string>> changed = {
      {"--seed 4", "--seed '3', this run has '4'"},
      {"--momentum 0.5", "--momentum '0.9', this run has '0.5'"},
      {"--weight-decay 2e-4", "--weight-decay '1e-04', this run has '2e-04'"},
      {"--lr 0.05", "--lr '0.1', this run has '0.05'"},
      {"--optimizer adam", "--optimizer 'sgd', this run has 'adam'"},
      {"--model cnn", "--model 'mlp', this run has 'cnn'"},
      {"--limit 250", "--data, --limit '256 images, sha256 "}};
  for (const auto& [flag, message] : changed) {
    INFO(flag);
    std::string args = run + " --weight-decay 1e-4 --resume " + flag;
    if (flag.rfind("--seed", 0) == 0) args = std::regex_replace(args, std::regex("--seed 3 "), "");
    if (flag.rfind("--limit", 0) == 0) args = std::regex_replace(args, std::regex("--limit 256 "), "");
    if (flag.rfind("--weight-decay", 0) == 0) args = run + " --resume " + flag;
    require_one_line_error(train(args), {"--resume: ", "epoch-1.safetensors was written with " + message});
  }
  // How the work is split may change: the same arithmetic over other devices and micro-batches.
  const Run split = train(run + " --weight-decay 1e-4 --resume --grad-accum 2 --workers 0");
  INFO("stdout: " << split.out << "\nstderr: " << split.err);
  REQUIRE(split.status == 0);
  CHECK(contains(split.out, "epochs 2..2"));
}

TEST_CASE("train: --resume skips an unreadable newest checkpoint, with a warning, and ends as the whole run did",
          "[train]") {
  TempDir dir;
  const std::string common = "--limit 512 --batch-size 64 --seed 4 --test-limit 100 --epochs 3 --checkpoint-dir '" +
                             dir.path() + "'";
  const Run whole = train(common);
  REQUIRE(whole.status == 0);
  fs::remove(dir.file("epoch-3.safetensors"));
  fs::resize_file(dir.file("epoch-2.safetensors"), 1000);  // a disk that lost its end
  const Run resumed = train(common + " --resume");
  INFO("stdout: " << resumed.out << "\nstderr: " << resumed.err);
  REQUIRE(resumed.status == 0);
  const std::vector<std::string> warnings = lines(mg::test::without_gemm_warning(resumed.err));
  REQUIRE(warnings.size() == 1);
  CHECK(contains(warnings[0], "multigrad train: warning: --resume skips " + dir.file("epoch-2.safetensors") + ": "));
  CHECK(contains(resumed.out, "epochs 2..3"));
  CHECK(resumed.summary.at("params_sha256") == whole.summary.at("params_sha256"));
  // With none readable: an error naming the newest's fault.
  for (const char* name : {"epoch-1", "epoch-2", "epoch-3"}) mg::test::write_bytes(dir.file(std::string(name) + ".safetensors"), "junk");
  const Run none = train(common + " --resume");
  CHECK(none.status == 1);
  CHECK(contains(none.err, "multigrad train: --resume: none of the 3 checkpoints in " + dir.path() +
                               " can be read (the newest: load_safetensors: '" + dir.file("epoch-3.safetensors")));
}

TEST_CASE("train: --keep-last N keeps the N latest checkpoints", "[train]") {
  TempDir dir;
  require_one_line_error(train("--keep-last 2"), {"--keep-last 2 needs --checkpoint-dir"});
  // 5 batches an epoch: step-2, step-4, epoch-1 (5), step-7, step-9, epoch-2 (10)
  const Run r = train("--limit 320 --batch-size 64 --epochs 2 --test-limit 100 --checkpoint-every 2 --keep-last 2 "
                      "--checkpoint-dir '" + dir.path() + "'");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path())) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"epoch-2.safetensors", "step-8.safetensors"});
}

TEST_CASE("train: a finished run extended by more epochs goes on from its last checkpoint, saying so", "[train]") {
  TempDir dir;
  const std::string common = "--limit 256 --batch-size 64 --seed 2 --test-limit 100 --checkpoint-dir '" + dir.path() + "'";
  REQUIRE(train(common + " --epochs 1").status == 0);
  const Run extended = train(common + " --epochs 2 --resume");
  INFO("stdout: " << extended.out << "\nstderr: " << extended.err);
  REQUIRE(extended.status == 0);
  CHECK(contains(extended.out, "resume: extending the run that finished at step 4 to step 8; the learning rate goes "
                               "on from this run's schedule at that step (0.05)\n"));
  CHECK(contains(extended.out, "epochs 2..2"));
  CHECK(fs::exists(dir.file("epoch-2.safetensors")));
  // A run stopped before its end is not finished: another length is still refused.
  fs::remove(dir.file("epoch-2.safetensors"));
  REQUIRE(train(common + " --epochs 3 --max-steps 8 --overwrite").status == 0);  // epoch-1 is now of a run to step 8
  fs::remove(dir.file("epoch-2.safetensors"));
  require_one_line_error(train(common + " --epochs 3 --resume"), {"learning rate", "--epochs"});
}

TEST_CASE("train: a resumed run's --metrics has each epoch once, though the stopped run wrote rows after its "
          "checkpoint", "[train]") {
  TempDir dir;
  const std::string common = "--limit 256 --batch-size 64 --test-limit 100 --epochs 3 --metrics '" +
                             dir.file("m.csv") + "' --checkpoint-dir '" + dir.file("ck") + "'";
  REQUIRE(train(common).status == 0);
  // As if killed after epoch 3's metrics row and before its checkpoint, and epoch 2's lost.
  fs::remove(dir.file("ck/epoch-3.safetensors"));
  fs::remove(dir.file("ck/epoch-2.safetensors"));
  REQUIRE(train(common + " --resume").status == 0);
  const std::vector<std::string> rows = lines(mg::test::read_bytes(dir.file("m.csv")));
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].rfind("epoch,", 0) == 0);
  for (int e = 1; e <= 3; ++e) CHECK(rows[size_t(e)].rfind(std::to_string(e) + ",", 0) == 0);
}

TEST_CASE("train: a checkpoint write that a file-size limit stops is one line and leaves no temporary file, stale "
          "ones are removed", "[train]") {
  TempDir dir;
  // A killed writer's temp file (a pid above Linux's largest: no such process).
  mg::test::write_bytes(dir.file("epoch-1.safetensors.tmp.999999999"), "half a checkpoint");
  const Run r = train("--limit 256 --batch-size 64 --epochs 1 --test-limit 100 --checkpoint-dir '" + dir.path() + "'",
                      "prlimit --fsize=100000");
  require_one_line_error(r, {"multigrad train: save_safetensors: writing '" + dir.file("epoch-1.safetensors.tmp."),
                             "File too large"});
  CHECK(contains(r.out, "checkpoints: removed " + dir.file("epoch-1.safetensors.tmp.999999999") +
                            ", left by a write that was interrupted\n"));
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("train: --trace without a pipeline or ddp, and pipeline flags that do not fit, are refused", "[train]") {
  require_one_line_error(train("--trace t.json"), {"--trace t.json", "--parallel pipeline or ddp"});
  require_one_line_error(train("--parallel pipeline --grad-accum 2"), {"--micro-batches", "--grad-accum 2"});
  require_one_line_error(train("--parallel pipeline --batch-size 4 --micro-batches 8"),
                         {"--micro-batches 8", "--batch-size 4"});
  require_one_line_error(train("--parallel pipeline --devices cpu:0,cpu:1,cpu:2,cpu:3,cpu:4,cpu:5"),
                         {"multigrad train: ", "5 layers, fewer than the 6 stages"});
  require_one_line_error(train("--parallel pipeline --schedule zigzag"), {"--schedule", "zigzag"});
  require_one_line_error(train("--parallel pipeline --chunks 2"),
                         {"--chunks 2 is for a pipeline's --schedule interleaved", "--schedule 1f1b"});
  require_one_line_error(train("--parallel pipeline --schedule interleaved --micro-batches 3 --devices cpu:0,cpu:1"),
                         {"micro_batches=3 is not a multiple of stages=2"});
  require_one_line_error(train("--parallel pipeline --schedule interleaved --micro-batches 3 --devices cpu:0,cpu:1,cpu:2"),
                         {"5 layers, fewer than the 6 virtual stages (3 stages x 2 chunks)"});
}

// The pipeline's defining property (parallel/pipeline/pipeline.h): with --deterministic, GPipe and 1F1B on
// 2, 3 and 4 stages end with the parameters of one device accumulating the same m micro-batches.
TEST_CASE("train: deterministic gpipe and 1f1b pipelines end bit-identical to --grad-accum m", "[train][parallel]") {
  struct Case {
    std::string model, common, devices;
  };
  for (const Case& c : {Case{"mlp", "--limit 3200 --batch-size 32", "cpu:0,cpu:1,cpu:2,cpu:3"},
                        Case{"mlp", "--limit 3200 --batch-size 32", "cpu:0,cpu:1"},
                        Case{"cnn", "--limit 320 --batch-size 16", "cpu:0,cpu:1,cpu:2"}}) {
    const std::string common = "--model " + c.model + " " + c.common + " --epochs 1 --test-limit 1000 --deterministic --optimizer adam";
    const Run reference = train(common + " --grad-accum 4");
    INFO(c.model << " on " << c.devices << "\nstdout: " << reference.out << "\nstderr: " << reference.err);
    REQUIRE(reference.status == 0);
    for (const std::string schedule : {"gpipe", "1f1b"}) {
      const Run r = train(common + " --parallel pipeline --micro-batches 4 --schedule " + schedule + " --devices " +
                          c.devices);
      INFO(schedule << "\nstdout: " << r.out << "\nstderr: " << r.err);
      REQUIRE(r.status == 0);
      CHECK(r.summary.at("params_sha256") == reference.summary.at("params_sha256"));
      CHECK(r.summary.at("test_accuracy") == reference.summary.at("test_accuracy"));  // batch norm statistics too
      CHECK(contains(r.summary.at("bubble_fraction"), "(measured; formula (p-1)/(m+p-1) = "));
    }
  }
}

// Interleaved 1F1B keeps that property: the MLP in 2 x 2 pieces and the CNN in 3 x 2 (12 layers).
TEST_CASE("train: deterministic interleaved pipelines end bit-identical to --grad-accum m", "[train][parallel]") {
  struct Case {
    std::string model, common, devices;
    int micro_batches;
  };
  for (const Case& c : {Case{"mlp", "--limit 3200 --batch-size 32", "cpu:0,cpu:1", 4},
                        Case{"cnn", "--limit 320 --batch-size 16", "cpu:0,cpu:1,cpu:2", 3}}) {
    const std::string m = std::to_string(c.micro_batches);
    const std::string common = "--model " + c.model + " " + c.common + " --epochs 1 --test-limit 1000 --deterministic --optimizer adam";
    const Run reference = train(common + " --grad-accum " + m);
    INFO(c.model << " on " << c.devices << "\nstdout: " << reference.out << "\nstderr: " << reference.err);
    REQUIRE(reference.status == 0);
    const Run r = train(common + " --parallel pipeline --schedule interleaved --chunks 2 --micro-batches " + m +
                        " --devices " + c.devices);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.status == 0);
    CHECK(r.summary.at("params_sha256") == reference.summary.at("params_sha256"));
    CHECK(r.summary.at("test_accuracy") == reference.summary.at("test_accuracy"));
    CHECK(contains(r.summary.at("bubble_fraction"), "(measured; formula (p-1)/(v m+p-1) = "));
  }
}

// The contents of a file.
static std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("train: --trace writes ddp's backward and all-reduces as a Chrome trace, lanes per rank", "[train][parallel]") {
  TempDir dir;
  const Run r = train("--limit 256 --epochs 1 --parallel ddp --devices cpu:0,cpu:1 --trace '" + dir.file("t.json") + "'");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  const std::string trace = read_text(dir.file("t.json"));
  for (const std::string part : {"\"rank 0\"", "\"rank 1 all-reduce\"", "\"name\":\"backward\"",
                                 "\"name\":\"bucket 0\""}) {
    INFO(part);
    CHECK(contains(trace, part));
  }
}

// --bucket-cap-mb: smaller buckets, more all-reduces (the trace has one event per bucket and rank),
// the same bits (the sums are elementwise, in rank order); zero2's units likewise.
TEST_CASE("train: --bucket-cap-mb sizes ddp's buckets and zero2's units, the same bits, refused where there are none",
          "[train][parallel]") {
  TempDir dir;
  const std::string common = "--limit 512 --batch-size 64 --test-limit 200 --deterministic --epochs 1 "
                             "--devices cpu:0,cpu:1 ";
  const auto buckets = [](const std::string& trace) {  // bucket events of rank 0's lane and rank 1's
    int64_t n = 0;
    for (size_t at = trace.find("\"name\":\"bucket "); at != std::string::npos;
         at = trace.find("\"name\":\"bucket ", at + 1))
      ++n;
    return n;
  };
  const Run plain = train(common + "--parallel ddp --trace '" + dir.file("plain.json") + "'");
  const Run small = train(common + "--parallel ddp --bucket-cap-mb 0.05 --trace '" + dir.file("small.json") + "'");
  const Run zero = train(common + "--parallel zero2 --bucket-cap-mb 0.1");
  INFO("stdout: " << small.out << "\nstderr: " << small.err << "\n" << zero.err);
  REQUIRE(plain.status == 0);
  REQUIRE(small.status == 0);
  REQUIRE(zero.status == 0);
  // The MLP's 0.9 MiB of gradients: one bucket (the first holds up to 1 MiB). Capped at 0.05 MiB,
  // in reverse order: b3, W3 and b2 (5.5 KiB) fill one, and W2 (128 KiB), b1 and W1 (784 KiB) do not
  // fit the one before them: four.
  CHECK(buckets(read_text(dir.file("plain.json"))) == 2);
  CHECK(buckets(read_text(dir.file("small.json"))) == 8);
  CHECK(small.summary.at("params_sha256") == plain.summary.at("params_sha256"));
  CHECK(zero.summary.at("params_sha256") == plain.summary.at("params_sha256"));
  require_one_line_error(train(common + "--parallel zero3 --bucket-cap-mb 1"),
                         {"--bucket-cap-mb 1 sizes DDP's gradient buckets and zero1's and zero2's units (zero3's "
                          "units are the layers); got --parallel zero3"});
  require_one_line_error(train(common + "--parallel ddp --bucket-cap-mb 0"), {"--bucket-cap-mb", "greater than 0"});
  require_one_line_error(train(common + "--parallel ddp --bucket-cap-mb nan"), {"--bucket-cap-mb", "finite"});
}

TEST_CASE("train: --trace writes the pipeline's timeline as a Chrome trace, a lane per stage", "[train][parallel]") {
  TempDir dir;
  const Run r = train("--limit 256 --batch-size 64 --epochs 1 --parallel pipeline --devices cpu:0,cpu:1 "
                      "--micro-batches 4 --trace '" + dir.file("trace.json") + "'");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  const std::string trace = read_text(dir.file("trace.json"));
  CHECK(trace.front() == '[');
  // 1F1B on 2 stages: activation 0 is sent alone (warm-up), the later ones in an exchange.
  for (const std::string part : {"\"stage 0 (cpu:0)\"", "\"stage 1 (cpu:1)\"", "\"name\":\"F3\"",
                                 "\"name\":\"B0\"", "\"name\":\"send activation 0\"",
                                 "\"name\":\"send activation 2 + recv grad 1\"", "\"ph\":\"X\""}) {
    INFO(part);
    CHECK(contains(trace, part));
  }
}

TEST_CASE("train: device lists that do not fit the parallel mode are refused", "[train]") {
  require_one_line_error(train("--devices cpu:0,cpu:1"), {"multigrad train: ", "2 devices", "--parallel dp or ddp"});
  require_one_line_error(train("--parallel ddp --devices cpu:0,cpu:0"), {"cpu:0 is listed twice"});
  require_one_line_error(train("--parallel ddp --devices cpu:0,cuda:7"), {"multigrad train: ", "cuda:7"});
  require_one_line_error(train("--parallel ddp --timeout 0"), {"--timeout"});
  require_one_line_error(train("--backend nccl"),
                         {"--backend nccl is for --parallel ddp, zero1, zero2, zero3, tp or pipeline (got --parallel none)"});
  // Pipeline stages over NCCL are threads of run_ranks_nccl, which takes GPUs only (or says the
  // build has no NCCL).
  require_one_line_error(train("--parallel pipeline --backend nccl --devices cpu:0,cpu:1 --limit 64"),
                         {"multigrad train: ", "run_ranks_nccl: "});
}

// The defining property of the data-parallel modes (parallel/README.md): with --deterministic,
// N devices end with the parameters of one device accumulating the same N micro-batches.
// A few hundred steps of the MLP, a hundred of the CNN (batch norm included).
TEST_CASE("train: deterministic dp and ddp end bit-identical to --grad-accum on one device", "[train][parallel]") {
  struct Case {
    std::string model, common;
  };
  for (const Case& c : {Case{"mlp", "--limit 6400 --batch-size 32 --epochs 1"},
                        Case{"cnn", "--limit 800 --batch-size 8 --epochs 1"}}) {
    const std::string common = "--model " + c.model + " " + c.common + " --test-limit 1000 --deterministic --optimizer adam";
    const Run accum2 = train(common + " --grad-accum 2");
    const Run accum4 = train(common + " --grad-accum 4");
    const Run dp2 = train(common + " --parallel dp --devices cpu:0,cpu:1");
    const Run ddp2 = train(common + " --parallel ddp --devices cpu:0,cpu:1");
    const Run ddp4 = train(common + " --parallel ddp --devices cpu:0,cpu:1,cpu:2,cpu:3");
    for (const Run* r : {&accum2, &accum4, &dp2, &ddp2, &ddp4}) {
      INFO(c.model << "\nstdout: " << r->out << "\nstderr: " << r->err);
      REQUIRE(r->status == 0);
    }
    INFO(c.model);
    CHECK(accum2.summary.at("params_sha256") != accum4.summary.at("params_sha256"));  // a real difference
    CHECK(rank_hashes(dp2) == std::vector<std::string>{accum2.summary.at("params_sha256")});
    CHECK(rank_hashes(ddp2) == std::vector<std::string>(2, accum2.summary.at("params_sha256")));
    CHECK(rank_hashes(ddp4) == std::vector<std::string>(4, accum4.summary.at("params_sha256")));
  }
}

// ZeRO-1 shards the optimizer state, ZeRO-2 the gradients too, ZeRO-3 the parameters too; the
// arithmetic is DDP's, so the same bits.
TEST_CASE("train: deterministic zero1, zero2 and zero3 end bit-identical to --grad-accum, their checkpoints resume on "
          "another world size", "[train][parallel]") {
  TempDir dir;
  const std::string common = "--limit 1024 --batch-size 32 --test-limit 200 --deterministic --optimizer adam "
                             "--lr-schedule constant";
  for (int ranks : {2, 3}) {
    const std::string devices = ranks == 2 ? "cpu:0,cpu:1" : "cpu:0,cpu:1,cpu:2";
    const Run accum = train(common + " --epochs 2 --grad-accum " + std::to_string(ranks));
    const Run zero = train(common + " --epochs 2 --parallel zero1 --devices " + devices);
    const Run zero2 = train(common + " --epochs 2 --parallel zero2 --devices " + devices);
    const Run zero3 = train(common + " --epochs 2 --parallel zero3 --devices " + devices);
    INFO("stdout: " << accum.out << zero.out << zero2.out << zero3.out << "\nstderr: " << accum.err << zero.err
                    << zero2.err << zero3.err);
    REQUIRE(accum.status == 0);
    REQUIRE(zero.status == 0);
    REQUIRE(zero2.status == 0);
    REQUIRE(zero3.status == 0);
    CHECK(contains(zero.out, "on " + std::to_string(ranks) + " ranks (zero1, local backend)"));
    CHECK(std::stod(zero.summary.at("comm_ms_per_step")) > 0);  // its reduce-scatters and all-gathers
    CHECK(std::stod(zero2.summary.at("comm_ms_per_step")) > 0);
    CHECK(rank_hashes(zero) == std::vector<std::string>(size_t(ranks), accum.summary.at("params_sha256")));
    CHECK(rank_hashes(zero2) == std::vector<std::string>(size_t(ranks), accum.summary.at("params_sha256")));
    CHECK(rank_hashes(zero3) == std::vector<std::string>(size_t(ranks), accum.summary.at("params_sha256")));
    CHECK(zero3.summary.at("test_accuracy") == accum.summary.at("test_accuracy"));
    // Epoch 1 under ZeRO on these ranks, epoch 2 on one device (and zero3's epoch 2 on the other
    // world size): the checkpoint holds the whole model and optimizer state.
    const std::string ck = dir.file("ck" + std::to_string(ranks));
    const std::string stage = ranks == 2 ? " --parallel zero1" : " --parallel zero2";
    REQUIRE(train(common + " --epochs 1" + stage + " --devices " + devices + " --checkpoint-dir '" + ck + "'").status == 0);
    const Run resumed = train(common + " --epochs 2 --resume --grad-accum " + std::to_string(ranks) +
                              " --checkpoint-dir '" + ck + "'");
    INFO("stdout: " << resumed.out << "\nstderr: " << resumed.err);
    REQUIRE(resumed.status == 0);
    CHECK(resumed.summary.at("params_sha256") == accum.summary.at("params_sha256"));
    // zero3 writes epoch 1's checkpoint (gathered), which --grad-accum resumes to the same end; and
    // zero3 on the other world size resumes from a copy of it as --grad-accum with that count does.
    const std::string ck3 = dir.file("ck3-" + std::to_string(ranks)), copy = ck3 + "-a", copy_b = ck3 + "-b";
    REQUIRE(train(common + " --epochs 1 --parallel zero3 --devices " + devices + " --checkpoint-dir '" + ck3 + "'")
                .status == 0);
    std::filesystem::copy(ck3, copy);
    std::filesystem::copy(ck3, copy_b);
    const Run from3 = train(common + " --epochs 2 --resume --grad-accum " + std::to_string(ranks) +
                            " --checkpoint-dir '" + ck3 + "'");
    REQUIRE(from3.status == 0);
    CHECK(from3.summary.at("params_sha256") == accum.summary.at("params_sha256"));
    const std::string other = ranks == 2 ? "cpu:0,cpu:1,cpu:2" : "cpu:0,cpu:1";
    const Run into3 = train(common + " --epochs 2 --resume --parallel zero3 --devices " + other +
                            " --checkpoint-dir '" + copy + "'");
    INFO("stdout: " << into3.out << "\nstderr: " << into3.err);
    REQUIRE(into3.status == 0);
    const Run accum_other = train(common + " --epochs 2 --grad-accum " + std::to_string(5 - ranks) +
                                  " --resume --checkpoint-dir '" + copy_b + "'");
    REQUIRE(accum_other.status == 0);
    CHECK(rank_hashes(into3) == std::vector<std::string>(size_t(5 - ranks), accum_other.summary.at("params_sha256")));
  }
  // A GPT: AdamW's weight-decay groups cut across the shards.
  const std::string gpt = "--model gpt --config tiny --data " + mg::test::write_sentences(dir.file("t.txt"), 5000) +
                          " --max-steps 6 --batch-size 8 --test-limit 4 --deterministic";
  const Run gpt_accum = train(gpt + " --grad-accum 2");
  const Run gpt_zero = train(gpt + " --parallel zero1 --devices cpu:0,cpu:1");
  INFO("stdout: " << gpt_zero.out << "\nstderr: " << gpt_zero.err);
  REQUIRE(gpt_zero.status == 0);
  CHECK(rank_hashes(gpt_zero) == std::vector<std::string>(2, gpt_accum.summary.at("params_sha256")));
  // Two micro-batches per rank: zero2's first backward under no_sync, as ddp's.
  const Run gpt_ddp = train(gpt + " --parallel ddp --grad-accum 2 --devices cpu:0,cpu:1");
  const Run gpt_zero2 = train(gpt + " --parallel zero2 --grad-accum 2 --devices cpu:0,cpu:1");
  INFO("stdout: " << gpt_zero2.out << "\nstderr: " << gpt_zero2.err);
  REQUIRE(gpt_zero2.status == 0);
  CHECK(rank_hashes(gpt_zero2) == rank_hashes(gpt_ddp));
  // zero3: the tied head keeps the embedding's unit gathered through the step; --eval-every
  // evaluates between steps (the parameters gathered on every rank first).
  const Run gpt_zero3 = train(gpt + " --parallel zero3 --grad-accum 2 --eval-every 3 --devices cpu:0,cpu:1");
  INFO("stdout: " << gpt_zero3.out << "\nstderr: " << gpt_zero3.err);
  REQUIRE(gpt_zero3.status == 0);
  CHECK(rank_hashes(gpt_zero3) == rank_hashes(gpt_ddp));
  CHECK(gpt_zero3.summary.at("val_loss") == gpt_ddp.summary.at("val_loss"));
}

// ZeRO on 4 devices, each model: every rank ends with one device's parameters accumulating the
// same 4 micro-batches (the CNN's batch norms too: each rank's micro-batch updates its statistics,
// and the digest covers the parameters).
TEST_CASE("train: deterministic zero1, zero2 and zero3 on 4 devices end bit-identical to --grad-accum 4: mlp, cnn and "
          "gpt", "[train][parallel]") {
  TempDir dir;
  const std::string gpt_data = mg::test::write_sentences(dir.file("t.txt"), 5000);
  for (const std::string common :
       {std::string("--limit 1024 --batch-size 32 --epochs 1 --test-limit 200 --optimizer adam"),
        std::string("--model cnn --limit 256 --batch-size 16 --epochs 1 --test-limit 100 --optimizer adam"),
        "--model gpt --config tiny --data " + gpt_data + " --max-steps 6 --batch-size 8 --test-limit 4"}) {
    const std::string run = common + " --deterministic";
    const Run accum = train(run + " --grad-accum 4");
    INFO(common << "\nstdout: " << accum.out << "\nstderr: " << accum.err);
    REQUIRE(accum.status == 0);
    for (const std::string stage : {"zero1", "zero2", "zero3"}) {
      const Run zero = train(run + " --parallel " + stage + " --devices cpu:0,cpu:1,cpu:2,cpu:3");
      INFO(stage << "\nstdout: " << zero.out << "\nstderr: " << zero.err);
      REQUIRE(zero.status == 0);
      CHECK(contains(zero.out, "on 4 ranks (" + stage + ", local backend)"));
      CHECK(rank_hashes(zero) == std::vector<std::string>(4, accum.summary.at("params_sha256")));
    }
  }
}

// Tensor parallelism: not bit-identical to one device (split sums; the library's test bounds the
// difference), so its checks are its own: every rank's digest is the gathered one-device model's,
// a checkpoint holds that model (eval reads it, one device resumes it) and tp resumes it bit for
// bit; a dp x tp mesh equals tp accumulating the dp ranks' micro-batches, a tp x pp mesh tp
// accumulating the pipeline's.
// `common` --parallel tp on cpu:0 and cpu:1, checkpointing into `ck`: every rank's digest is
// that of the gathered one-device model, and `multigrad eval` of the run's last checkpoint (`last`,
// a file in ck) reads that model: the run's own test loss. Returns the run.
static Run tp_run_holding_one_device_model(const std::string& common, const std::string& ck, const std::string& last) {
  const Run tp2 = train(common + " --parallel tp --devices cpu:0,cpu:1 --checkpoint-dir '" + ck + "'");
  INFO("stdout: " << tp2.out << "\nstderr: " << tp2.err);
  REQUIRE(tp2.status == 0);
  CHECK(contains(tp2.out, "on 2 ranks (tp, local backend)"));
  CHECK(std::stod(tp2.summary.at("tp_comm_ms_per_step")) > 0);  // its all-reduces, timed
  const std::string digest = tp2.summary.at("params_sha256").substr(0, 64);
  CHECK(rank_hashes(tp2) == std::vector<std::string>(2, digest));
  const Run eval =
      mg::test::parse_summary(mg::test::run_cli("eval --test-limit 200 --checkpoint '" + ck + "/" + last + "'"));
  REQUIRE(eval.status == 0);
  CHECK(eval.summary.at("test_loss") == tp2.summary.at("test_loss"));
  CHECK(eval.summary.at("params_sha256") == digest);
  return tp2;
}

TEST_CASE("train: --parallel tp on 2 and 4 ranks, dp x tp and tp x pp on a mesh, the checkpoints hold the one-device "
          "model",
          "[train][parallel]") {
  TempDir dir;
  const std::string common = "--limit 1024 --batch-size 32 --test-limit 200 --deterministic --optimizer adam "
                             "--lr-schedule constant --epochs 2";
  const std::string ck = dir.file("ck"), copy = dir.file("copy"), plain_copy = dir.file("plain");
  const Run tp2 = tp_run_holding_one_device_model(common, ck, "epoch-2.safetensors");
  const std::string digest = tp2.summary.at("params_sha256").substr(0, 64);
  const Run tp4 = train(common + " --parallel tp --clip-grad-norm 0.5 --devices cpu:0,cpu:1,cpu:2,cpu:3");
  INFO("stdout: " << tp4.out << "\nstderr: " << tp4.err);
  REQUIRE(tp4.status == 0);
  CHECK(rank_hashes(tp4) == std::vector<std::string>(4, tp4.summary.at("params_sha256").substr(0, 64)));
  // Epoch 1's checkpoint: tp resumes it to the uninterrupted run's digest; one device runs on from it.
  for (const std::string& d : {copy, plain_copy}) {
    std::filesystem::create_directories(d);
    std::filesystem::copy(ck + "/epoch-1.safetensors", d);
  }
  const Run resumed = train(common + " --parallel tp --devices cpu:0,cpu:1 --resume --checkpoint-dir '" + copy + "'");
  REQUIRE(resumed.status == 0);
  CHECK(rank_hashes(resumed) == std::vector<std::string>(2, digest));
  const Run one = train(common + " --resume --checkpoint-dir '" + plain_copy + "'");
  INFO("stdout: " << one.out << "\nstderr: " << one.err);
  REQUIRE(one.status == 0);
  // dp x tp on a 2 x 2 mesh: DDP across two tp pairs, each half of the batch: tp with --grad-accum 2.
  const Run accum = train(common + " --parallel tp --grad-accum 2 --devices cpu:0,cpu:1");
  const Run mesh = train(common + " --mesh dp=2,tp=2 --devices cpu:0,cpu:1,cpu:2,cpu:3");
  INFO("stdout: " << mesh.out << "\nstderr: " << mesh.err);
  REQUIRE(accum.status == 0);
  REQUIRE(mesh.status == 0);
  CHECK(contains(mesh.out, "mlp (235146 parameters) on 4 ranks (mesh dp=2, tp=2, local backend)"));
  CHECK(rank_hashes(mesh) == std::vector<std::string>(4, accum.summary.at("params_sha256").substr(0, 64)));
  // tp x pp: a 2-stage pipeline of tp pairs, 2 micro-batches per batch: tp with --grad-accum 2, also
  // when --clip-grad-norm sums the norm's parts over the stages and the shards.
  const Run pipe =
      train(common + " --mesh pp=2,tp=2 --micro-batches 2 --schedule gpipe --devices cpu:0,cpu:1,cpu:2,cpu:3");
  INFO("stdout: " << pipe.out << "\nstderr: " << pipe.err);
  REQUIRE(pipe.status == 0);
  CHECK(contains(pipe.out, "mlp (235146 parameters) on 4 ranks (mesh pp=2, tp=2, local backend)"));
  CHECK(rank_hashes(pipe) == std::vector<std::string>(4, accum.summary.at("params_sha256").substr(0, 64)));
  const Run clipped = train(common + " --clip-grad-norm 0.5 --parallel tp --grad-accum 2 --devices cpu:0,cpu:1");
  const Run pipe_clipped =
      train(common + " --clip-grad-norm 0.5 --mesh pp=2,tp=2 --micro-batches 2 --devices cpu:0,cpu:1,cpu:2,cpu:3");
  INFO("stdout: " << pipe_clipped.out << "\nstderr: " << pipe_clipped.err);
  REQUIRE(clipped.status == 0);
  REQUIRE(pipe_clipped.status == 0);
  CHECK(clipped.summary.at("params_sha256") != accum.summary.at("params_sha256"));  // the clipping bites
  CHECK(rank_hashes(pipe_clipped) == std::vector<std::string>(4, clipped.summary.at("params_sha256").substr(0, 64)));
  // ZeRO in place of DDP across the dp dimension (each rank's tp shard sharded over the dp pair).
  for (const std::string zero : {"zero1", "zero2", "zero3"}) {
    const Run z = train(common + " --parallel " + zero + " --mesh dp=2,tp=2 --devices cpu:0,cpu:1,cpu:2,cpu:3");
    INFO(zero << "\nstdout: " << z.out << "\nstderr: " << z.err);
    REQUIRE(z.status == 0);
    CHECK(contains(z.out, "on 4 ranks (mesh dp=2, tp=2, " + zero + ", local backend)"));
    CHECK(rank_hashes(z) == std::vector<std::string>(4, accum.summary.at("params_sha256").substr(0, 64)));
  }
  const Run zero_clipped =
      train(common + " --clip-grad-norm 0.5 --parallel zero2 --mesh dp=2,tp=2 --devices cpu:0,cpu:1,cpu:2,cpu:3");
  INFO("stdout: " << zero_clipped.out << "\nstderr: " << zero_clipped.err);
  REQUIRE(zero_clipped.status == 0);
  CHECK(rank_hashes(zero_clipped) == std::vector<std::string>(4, clipped.summary.at("params_sha256").substr(0, 64)));
  // fp16 whose first steps overflow: the tp shards and the dp rows skip together, as one tp pair.
  const std::string fp16 = " --precision fp16 --init-loss-scale 16777216";
  const Run accum16 = train(common + fp16 + " --parallel tp --grad-accum 2 --devices cpu:0,cpu:1");
  const Run mesh16 = train(common + fp16 + " --mesh dp=2,tp=2 --devices cpu:0,cpu:1,cpu:2,cpu:3");
  REQUIRE(accum16.status == 0);
  REQUIRE(mesh16.status == 0);
  CHECK(!contains(accum16.summary.at("loss_scale"), "(0 steps skipped"));
  CHECK(mesh16.summary.at("loss_scale") == accum16.summary.at("loss_scale"));
  CHECK(rank_hashes(mesh16) == std::vector<std::string>(4, accum16.summary.at("params_sha256").substr(0, 64)));
  const Run pipe16 = train(common + fp16 + " --mesh pp=2,tp=2 --micro-batches 2 --devices cpu:0,cpu:1,cpu:2,cpu:3");
  REQUIRE(pipe16.status == 0);
  CHECK(pipe16.summary.at("loss_scale") == accum16.summary.at("loss_scale"));
  CHECK(rank_hashes(pipe16) == std::vector<std::string>(4, accum16.summary.at("params_sha256").substr(0, 64)));
  require_one_line_error(train("--mesh dp=2,pp=2 --parallel zero1 --devices cpu:0,cpu:1,cpu:2,cpu:3"),
                         {"--parallel zero1 --mesh dp=2,pp=2: ZeRO across pipelines is not built yet"});
  require_one_line_error(train("--mesh dp=2,pp=2 --batch-size 6 --micro-batches 4 --devices cpu:0,cpu:1,cpu:2,cpu:3"),
                         {"--mesh dp=2,pp=2: each of the 2 pipelines cuts its 3 rows of a batch into "
                          "--micro-batches 4"});
  require_one_line_error(train("--mesh tp=2,pp=2 --grad-accum 2 --devices cpu:0,cpu:1,cpu:2,cpu:3"),
                         {"--mesh tp=2,pp=2 takes its micro-batches from --micro-batches, not --grad-accum"});
  require_one_line_error(train("--mesh tp=2,xp=2 --devices cpu:0,cpu:1,cpu:2,cpu:3"),
                         {"--mesh tp=2,xp=2: unknown dimension 'xp' (dp: data parallelism"});
  require_one_line_error(train("--mesh dp=2,tp=2 --parallel ddp --devices cpu:0,cpu:1,cpu:2,cpu:3"),
                         {"--mesh dp=2,tp=2 sets the parallel modes: drop --parallel ddp (zero1, zero2 or zero3 may"});
  require_one_line_error(train("--mesh tp=2 --parallel zero1 --devices cpu:0,cpu:1"),
                         {"--parallel zero1 shards across --mesh's dp dimension, and tp=2 has none"});
  require_one_line_error(train("--mesh dp=2,tp=2 --devices cpu:0,cpu:1"),
                         {"--mesh dp=2,tp=2 has 4 ranks but --devices lists 2 devices"});
  require_one_line_error(train("--parallel tp --devices cpu:0,cpu:1,cpu:2"),
                         {"--parallel tp splits the MLP's 256 hidden features among the ranks: 3 devices"});
}

TEST_CASE("train: ddp reports every rank's parameters, the overlap and the communication time", "[train][parallel]") {
  const Run r = train("--limit 2048 --batch-size 64 --epochs 1 --parallel ddp --devices cpu:0,cpu:1 --timeout 60");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "on 2 ranks (ddp, local backend)"));
  CHECK(contains(r.out, " (rank 0)\n"));
  CHECK(contains(r.out, " (rank 1)\n"));
  const double overlap = std::stod(r.summary.at("allreduce_overlap"));
  CHECK(overlap >= 0);
  CHECK(overlap <= 1);
  CHECK(std::stod(r.summary.at("comm_ms_per_step")) > 0);
  CHECK(contains(r.summary.at("peak_memory_mb"), "cpu:0="));
  CHECK(contains(r.summary.at("peak_memory_mb"), "cpu:1="));
  CHECK(std::stod(r.summary.at("test_accuracy")) > 0.5);  // it trains
}

TEST_CASE("train: a ddp run's progress shows every rank's loss and accuracy, as its epoch line does",
          "[train][parallel]") {
  const Run r = train("--limit 512 --batch-size 64 --epochs 1 --test-limit 100 --parallel ddp --devices cpu:0,cpu:1");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  std::string last_progress, epoch_line;
  for (const std::string& line : lines(r.out)) {
    if (line.rfind("epoch 1/1  100%", 0) == 0) last_progress = line;
    if (line.rfind("epoch 1/1: ", 0) == 0) epoch_line = line;
  }
  REQUIRE(!last_progress.empty());
  REQUIRE(!epoch_line.empty());
  // "... loss 1.9757  acc 0.3828  ..." and "train loss 1.9757 acc 0.3828, ...": rank 0's half alone differs.
  const auto after = [](const std::string& line, const std::string& key) {
    const size_t at = line.find(key);
    return at == std::string::npos ? std::string() : line.substr(at + key.size(), 6);
  };
  CHECK(after(last_progress, "loss ") == after(epoch_line, "train loss "));
  CHECK(after(last_progress, "acc ") == after(epoch_line, "acc "));
}

TEST_CASE("train: bad flags are one clear line and a non-zero exit", "[train]") {
  require_one_line_error(train("--model resnet"), {"--model", "resnet"});
  require_one_line_error(train("--optimizer lbfgs"), {"--optimizer", "lbfgs"});
  require_one_line_error(train("--epochs 0"), {"--epochs"});
  require_one_line_error(train("--batch-size 64 --grad-accum 65"), {"--grad-accum 65", "--batch-size 64"});
  require_one_line_error(train("--devices gpu:0"), {"multigrad train: ", "gpu:0"});
  require_one_line_error(train("--devices cuda:5"), {"multigrad train: ", "cuda:5"});
  require_one_line_error(train("--limit 70000"), {"--limit 70000", "60000"});
  require_one_line_error(train("--test-limit 10001"), {"--test-limit 10001 is larger than the test set (10000 images)"});
  // Not numbers a run can use: an infinite rate would be NaN at the cosine schedule's end (inf * 0).
  require_one_line_error(train("--lr inf"), {"--lr", "expected a finite number, got inf"});
  require_one_line_error(train("--weight-decay nan"), {"--weight-decay", "expected a finite number, got nan"});
  require_one_line_error(train("--limit 256 --epochs 1 --warmup-steps 2"),
                         {"--warmup-steps 2 must be fewer than the run's 2 steps"});
}

TEST_CASE("train: the files and folder a run writes are checked before any work", "[train]") {
  TempDir dir;
  std::ofstream(dir.file("a-file")) << "x";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases{
      {"--parallel ddp --trace /nonexistent/t.json", {"--trace /nonexistent/t.json", "/nonexistent does not exist"}},
      {"--metrics '" + dir.path() + "'", {"--metrics", "is a folder, expected a file"}},
      {"--checkpoint-dir '" + dir.file("a-file") + "/ck'", {"--checkpoint-dir", "a-file is not a folder"}}};
  for (const auto& [args, parts] : cases) {
    const Run r = train("--limit 256 --epochs 1 --test-limit 10 " + args);
    require_one_line_error(r, parts);
    CHECK(r.out.empty());  // refused before the run began
  }
}

TEST_CASE("train: a NaN or infinite loss stops the run with one line, before its optimizer step", "[train]") {
  TempDir dir;
  const Run r = train("--limit 512 --batch-size 64 --epochs 1 --test-limit 10 --lr 1e30 --checkpoint-dir '" +
                      dir.path() + "'");
  require_one_line_error(r, {"multigrad train: the training loss is ", " at step ", "--lr", "--detect-anomaly"});
  CHECK(!fs::exists(dir.file("epoch-1.safetensors")));
}

TEST_CASE("train: a pipeline whose epochs end in a batch shorter than --micro-batches is refused before any work",
          "[train][parallel]") {
  const std::string run = "--parallel pipeline --devices cpu:0,cpu:1 --limit 1025 --batch-size 128 --micro-batches 4 "
                          "--test-limit 10";
  const Run r = train(run + " --epochs 1");
  require_one_line_error(r, {"1025 training images in batches of 128 leave a last batch of 1",
                             "fewer than --micro-batches 4"});
  CHECK(r.out.empty());
  // A run that stops before that batch (--max-steps) is fine.
  CHECK(train(run + " --epochs 1 --max-steps 2").status == 0);
}

TEST_CASE("train: --resume names a checkpoint whose number is too large for a run", "[train]") {
  TempDir dir;
  std::ofstream(dir.file("epoch-99999999999999999999.safetensors")) << "x";
  require_one_line_error(train("--resume --checkpoint-dir '" + dir.path() + "'"),
                         {"epoch-99999999999999999999.safetensors", "too large"});
}

TEST_CASE("train: OpenBLAS kernels below the CPU's level are one warning line, the run goes on", "[train]") {
  if (mg::kernels::cpu::cpu_isa_level() <= mg::kernels::cpu::IsaLevel::Sse3) return;  // Prescott is this CPU's level
  const Run r = train("--limit 256 --epochs 1 --test-limit 100", "OPENBLAS_CORETYPE=Prescott");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  REQUIRE(lines(r.err).size() == 1);
  CHECK(contains(r.err, "multigrad: warning: OPENBLAS_CORETYPE=Prescott: OpenBLAS runs its Prescott kernels"));
  CHECK(r.summary.count("params_sha256") == 1);
}

TEST_CASE("train: a missing data folder is one clear line naming it", "[train]") {
  require_one_line_error(train("--data /nonexistent/fashion"), {"multigrad train: ", "/nonexistent/fashion"});
}

TEST_CASE("train: a truncated image file is one clear line naming the file", "[train]") {
  TempDir dir;
  write_valid_set(dir);
  write_idx_gz(dir.file("train-images-idx3-ubyte"), {kImages, 28, 28}, kImages * kImageBytes / 2);
  require_one_line_error(train("--data '" + dir.path() + "'"),
                         {"multigrad train: ", "train-images-idx3-ubyte", "truncated"});
}

TEST_CASE("train: a corrupt file (wrong type code, cut gzip stream) is one clear line naming the file", "[train]") {
  TempDir dir;
  write_valid_set(dir);
  write_idx_gz(dir.file("train-labels-idx1-ubyte"), {kImages}, kImages, 0x0d);  // type float, not ubyte
  require_one_line_error(train("--data '" + dir.path() + "'"),
                         {"multigrad train: ", "train-labels-idx1-ubyte", "type"});

  write_valid_set(dir);
  const std::string gz = dir.file("t10k-images-idx3-ubyte.gz");
  fs::resize_file(gz, fs::file_size(gz) / 2);
  require_one_line_error(train("--data '" + dir.path() + "'"),
                         {"multigrad train: ", "t10k-images-idx3-ubyte", "gzip"});
}

TEST_CASE("train: an image and label count mismatch is one clear line naming both counts", "[train]") {
  TempDir dir;
  write_valid_set(dir);
  write_idx_gz(dir.file("train-labels-idx1-ubyte"), {kImages - 2}, kImages - 2);
  require_one_line_error(train("--data '" + dir.path() + "'"),
                         {"multigrad train: ", std::to_string(kImages), std::to_string(kImages - 2)});
}

TEST_CASE("train: a small valid data set trains and reports", "[train]") {
  TempDir dir;
  write_valid_set(dir);
  const Run r = train("--data '" + dir.path() + "' --epochs 1 --batch-size 4 --grad-accum 3 --workers 0");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.summary.count("params_sha256") == 1);
}

// ---- --model gpt ----

namespace {

std::string write_text(const TempDir& dir, size_t bytes) { return mg::test::write_sentences(dir.file("text.txt"), bytes); }

}  // namespace

TEST_CASE("train: --model gpt learns a text, reports val_loss, val_bpb and tokens_per_s, and --metrics has them",
          "[train][gpt]") {
  TempDir dir;
  const Run r = train("--model gpt --config tiny --data " + write_text(dir, 20000) +
                      " --max-steps 150 --batch-size 8 --lr 1e-2 --eval-every 50 --test-limit 20 --metrics '" +
                      dir.file("m.csv") + "'");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "multigrad train: gpt ("));
  CHECK(contains(r.out, "training / 20 val windows, adamw"));
  CHECK(contains(r.out, "cosine (warmup 15)"));  // a GPT's default: a tenth of the run
  CHECK(contains(r.out, "(150 steps)"));
  CHECK(contains(r.out, "step 50: val loss "));
  CHECK(contains(r.out, "step 100: val loss "));
  const double loss = std::stod(r.summary.at("val_loss"));
  CHECK(loss < 1.0);  // from ln 256 = 5.5 at the start (0.34 measured): the sentence mostly predicted
  CHECK(std::stod(r.summary.at("val_bpb")) == Approx(loss / std::log(2.0)).epsilon(1e-3));
  CHECK(std::stod(r.summary.at("tokens_per_s")) == Approx(16 * std::stod(r.summary.at("samples_per_s"))).epsilon(1e-3));
  CHECK(r.summary.count("test_accuracy") == 0);
  // The tokens' FLOPs over the devices' peak: a fraction, unless this machine gives no CPU clock.
  const std::string mfu = r.summary.at("mfu");
  if (mfu.rfind("unknown", 0) != 0) {
    CHECK(std::stod(mfu) > 0);
    CHECK(std::stod(mfu) < 1);
    CHECK(contains(mfu, "GFLOP/s float32 peak: " + std::to_string(mg::cpu_thread_count()) + " threads x "));
  }
  // The 150 steps end inside epoch 1: its one row, the held-out columns named val_, the summary's loss.
  std::ifstream csv(dir.file("m.csv"));
  std::string header, row, extra;
  std::getline(csv, header);
  std::getline(csv, row);
  CHECK(header == "epoch,train_loss,train_accuracy,val_loss,val_accuracy,samples_per_s,seconds");
  CHECK_FALSE(std::getline(csv, extra));
  int epoch = 0;
  double train_loss = 0, train_accuracy = 0, val_loss = 0;
  REQUIRE(std::sscanf(row.c_str(), "%d,%lf,%lf,%lf", &epoch, &train_loss, &train_accuracy, &val_loss) == 4);
  CHECK(epoch == 1);
  CHECK(val_loss == Approx(loss).margin(1e-4));  // the summary prints 4 decimals
  CHECK(train_loss > 0);
}

TEST_CASE("train: --tokenizer bpe learns its merges from the training text, val_bpb counts the text's bytes",
          "[train][gpt]") {
  TempDir dir;
  const Run r = train("--model gpt --config tiny --tokenizer bpe --vocab-size 300 --data " + write_text(dir, 20000) +
                      " --max-steps 60 --batch-size 8 --lr 1e-2 --test-limit 10");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  // The sentence's 45 bytes are 10 chunks (" the", " quick", ..., " dog", "."), each merged into one
  // token long before 44 merges run out: the 160 validation targets are 16 sentences' bytes.
  const double loss = std::stod(r.summary.at("val_loss"));
  CHECK(std::stod(r.summary.at("val_bpb")) == Approx(loss / std::log(2.0) * 10.0 / 45.0).epsilon(1e-3));
  CHECK(loss < 1.0);
}

TEST_CASE("train: a deterministic gpt on dp, ddp and pipelines, also --recompute, ends bit-identical to --grad-accum 2",
          "[train][gpt][parallel]") {
  TempDir dir;
  const std::string common = "--model gpt --config tiny --data " + write_text(dir, 5000) +
                             " --max-steps 12 --batch-size 8 --test-limit 4 --deterministic";
  const Run accum1 = train(common);
  const Run accum2 = train(common + " --grad-accum 2");
  const Run dp2 = train(common + " --parallel dp --devices cpu:0,cpu:1");
  const Run ddp2 = train(common + " --parallel ddp --devices cpu:0,cpu:1");
  const Run recompute = train(common + " --grad-accum 2 --recompute");
  const Run ddp2_recompute = train(common + " --parallel ddp --devices cpu:0,cpu:1 --recompute");
  // Stages by layers: the embeddings, 2 blocks, ln_f, and the head tied to the embedding.
  const std::string pipeline = " --parallel pipeline --devices cpu:0,cpu:1 --micro-batches 2";
  const Run one_f_one_b = train(common + pipeline + " --recompute");
  const Run interleaved = train(common + pipeline + " --schedule interleaved");
  for (const Run* r : {&accum1, &accum2, &dp2, &ddp2, &recompute, &ddp2_recompute, &one_f_one_b, &interleaved}) {
    INFO("stdout: " << r->out << "\nstderr: " << r->err);
    REQUIRE(r->status == 0);
  }
  const std::string want = accum2.summary.at("params_sha256");
  CHECK(accum1.summary.at("params_sha256") != want);  // the micro-batches change the bits
  CHECK(dp2.summary.at("params_sha256") == want);
  CHECK(contains(ddp2.out, want + " (rank 0)\n"));
  CHECK(contains(ddp2.out, want + " (rank 1)\n"));
  CHECK(recompute.summary.at("params_sha256") == want);
  CHECK(contains(ddp2_recompute.out, want + " (rank 0)\n"));
  CHECK(contains(ddp2_recompute.out, want + " (rank 1)\n"));
  CHECK(one_f_one_b.summary.at("params_sha256") == want);
  CHECK(interleaved.summary.at("params_sha256") == want);
  CHECK(one_f_one_b.summary.at("val_loss") == accum2.summary.at("val_loss"));
}

TEST_CASE("train: --precision bf16 trains a gpt, and its dp, ddp, zero3 and pipeline runs end bit-identical to "
          "bf16 --grad-accum 2", "[train][gpt][parallel][autocast]") {
  TempDir dir;
  const std::string common = "--model gpt --config tiny --data " + write_text(dir, 5000) +
                             " --max-steps 12 --batch-size 8 --test-limit 4 --deterministic";
  const Run fp32 = train(common + " --grad-accum 2");
  const std::string bf16 = common + " --precision bf16";
  const Run accum2 = train(bf16 + " --grad-accum 2 --checkpoint-dir " + dir.file("ck"));
  const Run dp2 = train(bf16 + " --parallel dp --devices cpu:0,cpu:1");
  const Run ddp2 = train(bf16 + " --parallel ddp --devices cpu:0,cpu:1 --recompute");
  const Run zero3 = train(bf16 + " --parallel zero3 --devices cpu:0,cpu:1");
  const Run pipeline = train(bf16 + " --parallel pipeline --devices cpu:0,cpu:1 --micro-batches 2 --recompute");
  for (const Run* r : {&fp32, &accum2, &dp2, &ddp2, &zero3, &pipeline}) {
    INFO("stdout: " << r->out << "\nstderr: " << r->err);
    REQUIRE(r->status == 0);
  }
  CHECK(contains(accum2.out, ", deterministic, bf16 autocast\n"));
  const std::string want = accum2.summary.at("params_sha256");
  CHECK(fp32.summary.at("params_sha256") != want);
  CHECK(dp2.summary.at("params_sha256") == want);
  CHECK(contains(ddp2.out, want + " (rank 1)\n"));
  CHECK(contains(zero3.out, want + " (rank 1)\n"));
  CHECK(pipeline.summary.at("params_sha256") == want);
  CHECK(pipeline.summary.at("val_loss") == accum2.summary.at("val_loss"));
  CHECK(std::stod(accum2.summary.at("val_loss")) < std::log(256.0));  // learnt: below the uniform guess over bytes
  // MFU is of the bf16 peak: the bf16 GEMMs' FLOPs per cycle where this CPU has them, else float32's.
  const std::string mfu = accum2.summary.at("mfu");
  if (mfu.rfind("unknown", 0) != 0) {
    const int per_cycle = mg::kernels::cpu::bf16_gemm_flops_per_cycle();
    INFO("mfu: " << mfu);
    if (per_cycle > 0) {
      CHECK(contains(mfu, "GFLOP/s bf16 peak: "));
      CHECK(contains(mfu, " x " + std::to_string(per_cycle) + " FLOPs/cycle of " +
                              mg::kernels::cpu::bf16_gemm_isa_name() + ")"));
    } else {
      CHECK(contains(mfu, "GFLOP/s float32 peak: "));
      CHECK(contains(mfu, " FLOPs/cycle; bf16 multiplied in float32 here)"));
    }
    CHECK(std::stod(mfu) > 0);
  }
  // The precision decides the result: a resume under another one is refused, naming it.
  const Run resumed = train(common + " --grad-accum 2 --resume --checkpoint-dir " + dir.file("ck"));
  CHECK(resumed.status != 0);
  CHECK(contains(resumed.err, "--precision 'bf16', this run has 'fp32'"));
  // So do the model's shape (--config, --context), and an unknown precision is one clear line.
  const std::string resume = bf16 + " --grad-accum 2 --resume --checkpoint-dir " + dir.file("ck");
  require_one_line_error(train(resume + " --context 24"), {"--resume: ", "--context '", "this run has '24'"});
  // (small's 128-token windows: the text holds 3 for validation)
  const std::string small = std::regex_replace(resume, std::regex("--config tiny"), "--config small");
  require_one_line_error(train(std::regex_replace(small, std::regex("--test-limit 4"), "--test-limit 3")),
                         {"--resume: ", "--config 'tiny', this run has 'small'"});
  require_one_line_error(train(common + " --precision fp8"), {"--precision", "fp8"});
}

TEST_CASE("train: --precision fp16 trains a gpt with loss scaling, dp, ddp, zero and pipelines equal --grad-accum 2, "
          "a resume restores the scale", "[train][gpt][parallel][autocast]") {
  TempDir dir;
  const std::string common = "--model gpt --config tiny --data " + write_text(dir, 5000) +
                             " --max-steps 12 --batch-size 8 --test-limit 4 --deterministic --precision fp16";
  // 2^20 overflows the first gradients: steps are skipped and the scale halves, down to 2^17 by
  // step 6 here, where the run checkpoints (another 2^20 from there would skip other steps).
  const std::string scaled = " --init-loss-scale 1048576";
  const std::string checkpoints = " --checkpoint-every 6 --checkpoint-dir '" + dir.file("ck") + "'";
  const Run plain = train(common + " --grad-accum 2");
  const Run accum2 = train(common + scaled + " --grad-accum 2" + checkpoints);
  const Run dp2 = train(common + scaled + " --parallel dp --devices cpu:0,cpu:1");
  const Run ddp2 = train(common + scaled + " --parallel ddp --devices cpu:0,cpu:1");
  for (const Run* r : {&plain, &accum2, &dp2, &ddp2}) {
    INFO("stdout: " << r->out << "\nstderr: " << r->err);
    REQUIRE(r->status == 0);
  }
  const std::string want = accum2.summary.at("params_sha256");
  CHECK(dp2.summary.at("params_sha256") == want);
  CHECK(contains(ddp2.out, want + " (rank 1)\n"));
  CHECK(plain.summary.at("loss_scale") == "65536 (0 steps skipped for an inf or NaN gradient)");
  const std::string mfu = plain.summary.at("mfu");  // the CPU's fp16 GEMMs run in float32: its peak
  if (mfu.rfind("unknown", 0) != 0) CHECK(contains(mfu, " FLOPs/cycle; fp16 multiplied in float32 here)"));
  CHECK(std::stod(plain.summary.at("val_loss")) < std::log(256.0));
  const std::string skipped = accum2.summary.at("loss_scale");
  CHECK(skipped != plain.summary.at("loss_scale"));
  CHECK(contains(skipped, " steps skipped"));
  CHECK(dp2.summary.at("loss_scale") == skipped);
  // From step 6: the scale and its growth count come back with the rest.
  fs::remove(dir.file("ck/step-12.safetensors"));
  const Run resumed = train(common + scaled + " --grad-accum 2 --resume" + checkpoints);
  INFO("stdout: " << resumed.out << "\nstderr: " << resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(resumed.summary.at("params_sha256") == want);
  CHECK(resumed.summary.at("loss_scale") == skipped);  // the whole run's skipped steps, not the resumed part's
  // Ranks that hold different gradients (ZeRO's shards, pipeline stages) skip together.
  for (const std::string mode : {"zero1", "zero3", "pipeline --micro-batches 2"}) {
    const Run r = train(common + scaled + " --devices cpu:0,cpu:1 --parallel " + mode);
    INFO(mode << "\nstdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.status == 0);
    CHECK(r.summary.at("loss_scale") == skipped);
    CHECK(contains(r.out, want));
  }
  require_one_line_error(train("--limit 256 --init-loss-scale 1024"),
                         {"--init-loss-scale 1024 is for --precision fp16 (got --precision fp32)"});
}

// A GPT split by heads (parallel::tensor_parallel_gpt): not bit-identical to one device (split
// sums; the library's float64 test holds the function), so as for the MLP: a dp x tp mesh equals tp
// accumulating the dp micro-batches (with DDP or ZeRO-3 across dp), a tp x pp mesh (the tied head
// on the last stage) tp accumulating the pipeline's, and the checkpoints hold the one-device GPT,
// which every layout resumes.
TEST_CASE("train: --parallel tp splits a gpt's heads, dp x tp, zero3 on dp x tp and tp x pp equal tp --grad-accum 2, "
          "its checkpoints hold the one-device gpt", "[train][gpt][parallel]") {
  TempDir dir;
  const std::string common = "--model gpt --config tiny --data " + write_text(dir, 5000) +
                             " --batch-size 8 --test-limit 4 --deterministic";
  const std::string ck = " --checkpoint-every 6 --checkpoint-dir '" + dir.file("ck") + "'";
  const Run tp =
      train(common + " --max-steps 12 --parallel tp --devices cpu:0,cpu:1 --grad-accum 2 --eval-every 6" + ck);
  const Run mesh = train(common + " --max-steps 12 --mesh dp=2,tp=2 --devices cpu:0,cpu:1,cpu:2,cpu:3 --recompute");
  const std::string pp = " --mesh tp=2,pp=2 --micro-batches 2 --devices cpu:0,cpu:1,cpu:2,cpu:3";
  const Run pipe = train(common + " --max-steps 12 --eval-every 6" + pp);
  const std::string zero3 = " --parallel zero3 --mesh dp=2,tp=2 --devices cpu:0,cpu:1,cpu:2,cpu:3";
  const Run sharded = train(common + " --max-steps 12" + zero3);
  for (const Run* r : {&tp, &mesh, &pipe, &sharded}) {
    INFO("stdout: " << r->out << "\nstderr: " << r->err);
    REQUIRE(r->status == 0);
  }
  const std::string want = rank_hashes(tp)[0];
  CHECK(rank_hashes(tp) == std::vector<std::string>(2, want));
  CHECK(rank_hashes(mesh) == std::vector<std::string>(4, want));
  CHECK(mesh.summary.at("val_loss") == tp.summary.at("val_loss"));
  CHECK(rank_hashes(pipe) == std::vector<std::string>(4, want));
  CHECK(rank_hashes(sharded) == std::vector<std::string>(4, want));
  // Sequence parallelism sums its own way (a layer norm's gradient over each rank's positions,
  // then over the ranks), so it is its own reference: dp x tp and tp x pp with it equal tp with it.
  // Its loss stays within float32 rounding of plain tp's: far inside 1e-3 nats after 12 steps.
  const std::string sp = " --max-steps 12 --sequence-parallel";
  const Run sp_tp = train(common + sp + " --parallel tp --devices cpu:0,cpu:1 --grad-accum 2");
  const Run sp_mesh = train(common + sp + " --mesh dp=2,tp=2 --devices cpu:0,cpu:1,cpu:2,cpu:3");
  const Run sp_pipe = train(common + sp + pp);
  for (const Run* r : {&sp_tp, &sp_mesh, &sp_pipe}) {
    INFO("stdout: " << r->out << "\nstderr: " << r->err);
    REQUIRE(r->status == 0);
    CHECK(rank_hashes(*r) == std::vector<std::string>(rank_hashes(*r).size(), rank_hashes(sp_tp)[0]));
  }
  CHECK(std::abs(std::stod(sp_tp.summary.at("val_loss")) - std::stod(tp.summary.at("val_loss"))) <= 1e-3);
  require_one_line_error(train(common + " --max-steps 2 --sequence-parallel --parallel ddp --devices cpu:0,cpu:1"),
                         {"--sequence-parallel is for --model gpt with tensor parallelism"});
  CHECK(pipe.summary.at("val_loss") == tp.summary.at("val_loss"));
  CHECK(!step_line(tp.out, 6).empty());
  CHECK(step_line(pipe.out, 6) == step_line(tp.out, 6));  // evaluated with every stage's parameters
  // The checkpoint is the one-device GPT's: generate reads it, and tp resumes it bit for bit, as
  // does the tp x pp mesh (every stage's shards taken from it).
  const mg::test::CliResult sample =
      mg::test::run_cli("generate --checkpoint '" + dir.file("ck/step-12.safetensors") + "' --prompt 'the' --tokens 5");
  INFO("generate: " << sample.out << sample.err);
  CHECK(sample.status == 0);
  fs::remove(dir.file("ck/step-12.safetensors"));
  const Run resumed = train(common + " --max-steps 12 --parallel tp --devices cpu:0,cpu:1 --grad-accum 2 --resume" + ck);
  INFO("stdout: " << resumed.out << "\nstderr: " << resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(rank_hashes(resumed) == std::vector<std::string>(2, want));
  fs::remove(dir.file("ck/step-12.safetensors"));
  const Run pipe_resumed = train(common + " --max-steps 12 --resume" + ck + pp);
  INFO("stdout: " << pipe_resumed.out << "\nstderr: " << pipe_resumed.err);
  REQUIRE(pipe_resumed.status == 0);
  CHECK(rank_hashes(pipe_resumed) == std::vector<std::string>(4, want));
  fs::remove(dir.file("ck/step-12.safetensors"));
  const Run sharded_resumed = train(common + " --max-steps 12 --resume" + ck + zero3);
  INFO("stdout: " << sharded_resumed.out << "\nstderr: " << sharded_resumed.err);
  REQUIRE(sharded_resumed.status == 0);
  CHECK(rank_hashes(sharded_resumed) == std::vector<std::string>(4, want));
  require_one_line_error(train(common + " --max-steps 2 --parallel tp --devices cpu:0,cpu:1,cpu:2,cpu:3"),
                         {"tensor_parallel_gpt: 2 attention heads do not split among 4 ranks"});
}

// dp x pp: DDP across pipelines. Each of the D pipelines takes its part of the batch in M
// micro-batches, accumulates their gradients in order, and the stages' gradients are summed over
// the pipelines in rank order: DDP on D devices with --grad-accum M, bit for bit (the MLP, also
// clipped, with fp16's skipped steps, and resumed from a checkpoint; the CNN; the GPT, its tied
// head on the last stage, under 1F1B and interleaved).
TEST_CASE("train: a dp x pp mesh equals ddp with --grad-accum m, bit for bit", "[train][parallel]") {
  TempDir dir;
  const std::string common = "--limit 512 --batch-size 32 --test-limit 200 --deterministic --optimizer adam "
                             "--lr-schedule constant --epochs 2";
  const std::string mesh = " --mesh dp=2,pp=2 --micro-batches 2 --devices cpu:0,cpu:1,cpu:2,cpu:3";
  const std::string ddp = " --parallel ddp --grad-accum 2 --devices cpu:0,cpu:1";
  const auto same = [&](const std::string& flags, const std::string& mesh_flags) {
    const Run want = train(flags + ddp), got = train(flags + mesh + mesh_flags);
    INFO(flags << mesh_flags << "\nstdout: " << got.out << "\nstderr: " << got.err << "\n" << want.err);
    REQUIRE(want.status == 0);
    REQUIRE(got.status == 0);
    CHECK(rank_hashes(got) == std::vector<std::string>(4, want.summary.at("params_sha256").substr(0, 64)));
    return got;
  };
  const std::string ck = dir.file("ck"), copy = dir.file("copy");
  const Run plain = same(common, " --checkpoint-dir '" + ck + "'");
  CHECK(contains(plain.out, "mlp (235146 parameters) on 4 ranks (mesh dp=2, pp=2, local backend)"));
  std::filesystem::create_directories(copy);
  std::filesystem::copy(ck + "/epoch-1.safetensors", copy);
  const Run resumed = train(common + mesh + " --resume --checkpoint-dir '" + copy + "'");
  REQUIRE(resumed.status == 0);
  CHECK(rank_hashes(resumed) == rank_hashes(plain));
  same(common + " --clip-grad-norm 0.5", " --schedule 1f1b");
  const Run fp16 = same(common + " --precision fp16 --init-loss-scale 16777216", "");
  CHECK(!contains(fp16.summary.at("loss_scale"), "(0 steps skipped"));
  same("--model cnn --limit 256 --batch-size 32 --test-limit 200 --deterministic --epochs 1", "");
  const std::string gpt = "--model gpt --config tiny --data " + write_text(dir, 5000) +
                          " --max-steps 12 --batch-size 8 --test-limit 4 --deterministic";
  same(gpt, " --schedule 1f1b");
  same(gpt, " --schedule interleaved");
}

// dp x tp x pp on 8 devices: DDP across two pipelines whose stages are tp pairs equals the dp x tp
// mesh with --grad-accum 2 (each tp group accumulating its micro-batches, DDP summing the groups):
// the MLP, clipped (every stage's and shard's counted part of the norm, once: the first pipeline's)
// and resumed; the GPT with sequence parallelism (its vocabulary-split tied head on the last stage).
TEST_CASE("train: a dp x tp x pp mesh equals dp x tp with --grad-accum m, bit for bit", "[train][parallel]") {
  TempDir dir;
  const std::string d4 = " --devices cpu:0,cpu:1,cpu:2,cpu:3";
  const std::string d8 = d4 + ",cpu:4,cpu:5,cpu:6,cpu:7";
  const auto same = [&](const std::string& flags, const std::string& extra) {
    const Run want = train(flags + " --mesh dp=2,tp=2 --grad-accum 2" + d4);
    const Run got = train(flags + extra + " --mesh dp=2,tp=2,pp=2 --micro-batches 2" + d8);
    INFO(flags << extra << "\nstdout: " << got.out << "\nstderr: " << got.err << "\n" << want.err);
    REQUIRE(want.status == 0);
    REQUIRE(got.status == 0);
    CHECK(rank_hashes(got) == std::vector<std::string>(8, want.summary.at("params_sha256").substr(0, 64)));
    return got;
  };
  const std::string common = "--limit 512 --batch-size 32 --test-limit 200 --deterministic --optimizer adam "
                             "--lr-schedule constant --epochs 2";
  const std::string ck = dir.file("ck"), copy = dir.file("copy");
  const Run plain = same(common, " --checkpoint-dir '" + ck + "'");
  CHECK(contains(plain.out, "mlp (235146 parameters) on 8 ranks (mesh dp=2, tp=2, pp=2, local backend)"));
  std::filesystem::create_directories(copy);
  std::filesystem::copy(ck + "/epoch-1.safetensors", copy);
  const Run resumed =
      train(common + " --mesh dp=2,tp=2,pp=2 --micro-batches 2 --resume --checkpoint-dir '" + copy + "'" + d8);
  REQUIRE(resumed.status == 0);
  CHECK(rank_hashes(resumed) == rank_hashes(plain));
  same(common + " --clip-grad-norm 0.5", "");
  same("--model gpt --config tiny --data " + write_text(dir, 5000) +
           " --max-steps 8 --batch-size 8 --test-limit 4 --deterministic --sequence-parallel",
       "");
}

// The CNN under tp: its classifier's Linear pair split, the convolutions whole on every rank. As
// for the MLP, each rank's digest is the gathered one-device model's, and the meshes equal tp
// accumulating their micro-batches (the parameters: batch norm's running statistics come from dp
// rank 0's half of the batch, as under DDP, so a dp x tp mesh's test figures may differ).
TEST_CASE("train: --parallel tp splits the cnn's classifier, dp x tp and tp x pp equal tp --grad-accum 2",
          "[train][parallel]") {
  TempDir dir;
  const std::string common = "--model cnn --limit 256 --batch-size 32 --test-limit 200 --deterministic "
                             "--optimizer adam --lr-schedule constant --epochs 1";
  tp_run_holding_one_device_model(common, dir.file("ck"), "epoch-1.safetensors");
  const Run accum = train(common + " --parallel tp --grad-accum 2 --devices cpu:0,cpu:1");
  REQUIRE(accum.status == 0);
  for (const std::string mesh : {"--mesh dp=2,tp=2", "--mesh pp=2,tp=2 --micro-batches 2 --schedule gpipe"}) {
    const Run r = train(common + " " + mesh + " --devices cpu:0,cpu:1,cpu:2,cpu:3");
    INFO(mesh << "\nstdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.status == 0);
    CHECK(rank_hashes(r) == std::vector<std::string>(4, accum.summary.at("params_sha256").substr(0, 64)));
  }
  require_one_line_error(train("--model cnn --parallel tp --devices cpu:0,cpu:1,cpu:2"),
                         {"--parallel tp splits the CNN classifier's 128 hidden features among the ranks: 3 devices "
                          "do not divide them"});
}

TEST_CASE("train: a gpt run inside its first epoch writes step checkpoints and resumes from one", "[train][gpt]") {
  TempDir dir;
  const std::string base = "--model gpt --config tiny --data " + write_text(dir, 5000) +
                           " --batch-size 8 --test-limit 4 --checkpoint-every 3 --checkpoint-dir '" + dir.file("ck") +
                           "'";
  const std::string common = base + " --max-steps 6";
  const Run whole = train(common);
  INFO("stdout: " << whole.out << "\nstderr: " << whole.err);
  REQUIRE(whole.status == 0);
  CHECK(fs::exists(dir.file("ck/step-3.safetensors")));
  CHECK(fs::exists(dir.file("ck/step-6.safetensors")));  // where --max-steps ended, inside epoch 1
  CHECK(!fs::exists(dir.file("ck/epoch-1.safetensors")));
  fs::remove(dir.file("ck/step-6.safetensors"));
  const Run resumed = train(common + " --resume");
  INFO("stdout: " << resumed.out << "\nstderr: " << resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(resumed.summary.at("params_sha256") == whole.summary.at("params_sha256"));
  // Another model is refused; so is another --max-steps from inside the run (another cosine schedule:
  // not this run's continuation), while from its last step it extends the finished run.
  require_one_line_error(train("--limit 256 --max-steps 6 --resume --checkpoint-dir '" + dir.file("ck") + "'"),
                         {"step-6.safetensors was written with --model 'gpt', this run has 'mlp'"});
  const Run extended = train(base + " --max-steps 9 --resume");
  INFO("stdout: " << extended.out << "\nstderr: " << extended.err);
  REQUIRE(extended.status == 0);
  CHECK(contains(extended.out, "resume: extending the run that finished at step 6 to step 9"));
  for (const char* later : {"ck/step-6.safetensors", "ck/step-9.safetensors"}) fs::remove(dir.file(later));
  require_one_line_error(train(base + " --max-steps 12 --resume"), {"learning rate", "--max-steps"});
}

TEST_CASE("eval: a checkpoint's held-out loss and accuracy are those of the run's last evaluation", "[train][eval]") {
  TempDir dir;
  const Run run = train("--limit 1024 --epochs 1 --test-limit 300 --checkpoint-dir '" + dir.file("mlp") + "'");
  REQUIRE(run.status == 0);
  const Run eval = mg::test::parse_summary(mg::test::run_cli("eval --test-limit 300 --checkpoint '" +
                                                              dir.file("mlp/epoch-1.safetensors") + "'"));
  INFO("stdout: " << eval.out << "\nstderr: " << eval.err);
  REQUIRE(eval.status == 0);
  CHECK(contains(eval.out, "multigrad eval: mlp (235146 parameters) of " + dir.file("mlp/epoch-1.safetensors") +
                               " (step 8) on cpu:0, 300 test images, fp32 (the run's)\n"));
  for (const char* key : {"test_accuracy", "test_loss", "params_sha256"}) CHECK(eval.summary.at(key) == run.summary.at(key));

  const std::string text = write_text(dir, 5000);
  const Run gpt = train("--model gpt --config tiny --tokenizer bpe --vocab-size 300 --data " + text +
                        " --max-steps 4 --batch-size 8 --test-limit 4 --checkpoint-dir '" + dir.file("gpt") + "'");
  REQUIRE(gpt.status == 0);
  const Run gpt_eval = mg::test::parse_summary(mg::test::run_cli("eval --data " + text + " --test-limit 4 --checkpoint '" +
                                                                  dir.file("gpt/step-4.safetensors") + "'"));
  INFO("stdout: " << gpt_eval.out << "\nstderr: " << gpt_eval.err);
  REQUIRE(gpt_eval.status == 0);
  for (const char* key : {"val_loss", "val_bpb", "params_sha256"}) CHECK(gpt_eval.summary.at(key) == gpt.summary.at(key));
  CHECK(gpt_eval.summary.count("val_accuracy") == 1);

  // Bad input: one line naming it.
  mg::test::write_bytes(dir.file("junk.safetensors"), "junk");
  require_one_line_error(mg::test::run_cli("eval --checkpoint '" + dir.file("junk.safetensors") + "'"),
                         {"multigrad eval: load_safetensors: ", "junk.safetensors"});
  require_one_line_error(mg::test::run_cli("eval --data /nonexistent --checkpoint '" +
                                           dir.file("mlp/epoch-1.safetensors") + "'"),
                         {"multigrad eval: ", "/nonexistent"});
  require_one_line_error(mg::test::run_cli("eval --test-limit 10001 --checkpoint '" +
                                           dir.file("mlp/epoch-1.safetensors") + "'"),
                         {"--test-limit 10001 is larger than the test set (10000 images)"});
  require_one_line_error(mg::test::run_cli("eval --checkpoint /nonexistent.safetensors"), {"multigrad eval: ", "--checkpoint"});
}

TEST_CASE("train: gpt flags that do not fit are one clear line", "[train][gpt]") {
  TempDir dir;
  const std::string text = write_text(dir, 100);
  require_one_line_error(train("--model mlp --config tiny"),
                         {"--config, --context, --recompute and --tokenizer are for --model gpt"});
  require_one_line_error(train("--model mlp --tokenizer bpe"), {"--tokenizer are for --model gpt", "--model mlp"});
  require_one_line_error(train("--model gpt --tokenizer words"), {"--tokenizer", "words"});
  require_one_line_error(train("--model gpt --vocab-size 300"), {"--vocab-size 300 is for --tokenizer bpe"});
  require_one_line_error(train("--model gpt --tokenizer bpe --vocab-size 100 --data " + text),
                         {"--vocab-size 100 must be at least 256"});
  require_one_line_error(train("--model gpt --config huge"), {"--config", "huge"});
  require_one_line_error(train("--model gpt --context 0"), {"--context"});
  require_one_line_error(train("--model gpt --config tiny --data " + text), {"100 bytes of text", "--context 16"});
  require_one_line_error(train("--model gpt --data " + dir.file("none")), {dir.file("none"), "does not exist"});
  require_one_line_error(train("--model gpt --config tiny --data " + text + " --checkpoint-every 5"),
                         {"--checkpoint-every 5 needs --checkpoint-dir"});
}

// The norm is an exact sum of squares (optim/clip_grad.h): ranks and stages that hold parts of the
// gradients sum theirs to the same bits one device gets.
TEST_CASE("train: --clip-grad-norm clips by the same norm in every --parallel mode, bit for bit", "[train][parallel]") {
  const std::string common = "--limit 512 --batch-size 32 --epochs 1 --test-limit 100 --deterministic";
  const std::string clip = " --clip-grad-norm 0.05";
  const auto first_hash = [](const Run& r) {
    for (const std::string& line : lines(r.out))
      if (line.rfind("params_sha256: ", 0) == 0) return line.substr(15, 64);
    return std::string();
  };
  const Run plain = train(common + " --grad-accum 2");
  const Run accum = train(common + clip + " --grad-accum 2");
  REQUIRE(accum.status == 0);
  const std::string want = accum.summary.at("params_sha256");
  CHECK(first_hash(plain) != want);  // it clips
  for (const std::string mode : {"dp", "ddp", "zero1", "zero2", "zero3", "pipeline --micro-batches 2"}) {
    const Run r = train(common + clip + " --devices cpu:0,cpu:1 --parallel " + mode);
    INFO(mode << "\nstdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.status == 0);
    CHECK(first_hash(r) == want);
  }
  require_one_line_error(train("--clip-grad-norm -1"), {"--clip-grad-norm", "-1"});
}
