// tests/cuda/test_cuda_ledger.cpp — the CUDA ledger (core/ledger.h, sim/ledger.h) in the simulated
// build: a GEMM, a launch, a copy the host waits for and an allocation each leave their entry, with
// the kernel family and the step phase they were made in; a training step's entries carry its
// phases; nothing is written once it stops. On a real GPU the ledger does not exist: skipped.
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "io/io_test_util.h"
#include "multigrad/core/ledger.h"
#include "multigrad/train/parallelize.h"
#include "multigrad/train/step.h"
#include "parallel/parallel_test_util.h"

using namespace mg;
using namespace mg::test;
using json = nlohmann::json;

namespace {

std::vector<json> read_ledger(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<json> entries;
  for (std::string line; std::getline(in, line);) entries.push_back(json::parse(line));
  return entries;
}

std::vector<json> of_event(const std::vector<json>& entries, const std::string& event) {
  std::vector<json> out;
  for (const json& e : entries)
    if (e["event"] == event) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("cuda ledger: a GEMM, a launch, a waited-for copy and an allocation, each with its family and phase",
          "[cuda][ledger]") {
  if (!cuda_ledger_available()) return skip_test("the CUDA ledger is the simulated build's");
  TempDir dir;
  const Tensor a = cpu_input({6, 4}).to(gpu()), b = cpu_input({4, 5}, DType::Float32, 2).to(gpu());
  cuda_ledger_start(dir.file("ledger.jsonl"));
  float total = 0;
  {
    const StepPhase phase("forward");
    const Tensor y = relu(matmul(a, b));
    const StepPhase inner("metrics");  // nested: the inner phase holds until it ends
    total = sum(y).item<float>();
  }
  const Tensor fresh = Tensor::empty({777, 1000}, {DType::Float32, gpu()});  // a size the cache has not seen
  const int64_t written = cuda_ledger_stop();
  const Tensor after = add(a, 1.0);  // not recorded
  (void)after.to(Device("cpu"));
  REQUIRE(total >= 0);

  const std::vector<json> entries = read_ledger(dir.file("ledger.jsonl"));
  REQUIRE(int64_t(entries.size()) == written);
  for (size_t i = 0; i < entries.size(); ++i) REQUIRE(entries[i]["seq"] == i);

  const std::vector<json> gemms = of_event(entries, "gemm");
  REQUIRE(gemms.size() == 1);  // (6 x 4) (4 x 5): k = 4, and m, n the 5 and 6 in cuBLAS's column-major order
  CHECK(gemms[0]["k"] == 4);
  CHECK(gemms[0]["m"].get<int>() * gemms[0]["n"].get<int>() == 30);
  CHECK(gemms[0]["batch"] == 1);
  CHECK(gemms[0]["inputs"] == "f32");
  CHECK(gemms[0]["phase"] == "forward");
  CHECK(gemms[0]["family"] == "matmul");

  bool forward_launch = false;
  for (const json& l : of_event(entries, "launch")) {
    for (const char* dims : {"grid", "block"}) {
      REQUIRE(l[dims].size() == 3);
      for (const json& d : l[dims]) CHECK(d.get<int64_t>() >= 1);
    }
    CHECK(!l["kernel"].get<std::string>().empty());
    if (l["phase"] == "forward" && l["family"] == "elementwise") {  // relu of the (6, 5) product
      forward_launch = true;
      CHECK(l["bytes"] == 6 * 5 * 2 * 4);  // its cost as the launcher declares it: read and written once
      CHECK(l["flops"] == 6 * 5);
    }
  }
  CHECK(forward_launch);

  const std::vector<json> copies = of_event(entries, "copy");
  REQUIRE(!copies.empty());
  const json& read_back = copies.back();  // .item(): the sum's 4 bytes, and the host waits for them
  CHECK(read_back["kind"] == "d2h");
  CHECK(read_back["bytes"] == 4);
  CHECK(read_back["host_waits"] == true);
  CHECK(read_back["phase"] == "metrics");

  const std::vector<json> mallocs = of_event(entries, "malloc");
  REQUIRE(!mallocs.empty());
  CHECK(mallocs.back()["bytes"].get<int64_t>() >= 777 * 1000 * 4);
  CHECK(mallocs.back()["phase"].is_null());  // outside every phase
}

TEST_CASE("cuda ledger: a training step's entries carry its phases, and its loss check waits for the device",
          "[cuda][ledger]") {
  if (!cuda_ledger_available()) return skip_test("the CUDA ledger is the simulated build's");
  TempDir dir;
  const auto batches = make_batches(ModelKind::Mlp, 2, 8);
  const auto m = train::parallelize({make_model(ModelKind::Mlp, 1)}, {gpu()}, {}, {});
  optim::SGD optimizer(m->model.net->parameters(), {.lr = 0.1, .momentum = 0.9});
  train::Metrics metrics;
  const auto step = [&](int64_t i) {
    const Batch& b = batches[size_t(i)];
    train::train_step(*m, optimizer, {b.inputs.to(gpu()), b.targets.to(gpu()), {}}, {.grad_accum = 2}, metrics, i + 1);
  };
  step(0);  // warm-up: the caching allocator's first blocks
  cuda_ledger_start(dir.file("step.jsonl"));
  step(1);
  cuda_ledger_stop();

  std::map<std::string, int> launches_by_phase;
  int loss_check_waits = 0;
  for (const json& e : read_ledger(dir.file("step.jsonl"))) {
    const std::string phase = e["phase"].is_null() ? "none" : e["phase"].get<std::string>();
    if (e["event"] == "launch" || e["event"] == "gemm") ++launches_by_phase[phase];
    if (e["event"] == "copy" && e["host_waits"] == true && phase == "loss_check") ++loss_check_waits;
  }
  for (const char* phase : {"forward", "backward", "optimizer"}) {  // zero_grad sets gradients to none: no work
    INFO(phase);
    CHECK(launches_by_phase[phase] > 0);
  }
  CHECK(loss_check_waits >= 1);  // the finite-loss check reads the loss: one of the syncs issue 44 counts
}

TEST_CASE("cuda ledger: an unwritable path is an error naming it", "[cuda][ledger]") {
  if (!cuda_ledger_available()) return skip_test("the CUDA ledger is the simulated build's");
  require_error([] { cuda_ledger_start("/nonexistent-folder/ledger.jsonl"); },
                {"the CUDA ledger", "/nonexistent-folder/ledger.jsonl", "cannot open"});
}
