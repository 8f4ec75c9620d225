// tests/sim/test_cost_model.cpp — the H100 cost model (sim/cost_model.h) on hand-written ledger
// lines: each rule against its formula over sim/h100.h's constants (so the tests hold whatever
// the constants become), the counts issue 44's targets use, the step's tokens/s and MFU, and the
// errors for a file that is not a ledger.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "multigrad/sim/cost_model.h"
#include "multigrad/sim/h100.h"
#include "test_util.h"

using namespace mg;
using namespace mg::sim;

namespace {

cost::Prediction predict(const std::vector<std::string>& lines) { return cost::predict_lines(lines, "ledger.jsonl"); }

std::string launch(int blocks, int threads, double bytes, double flops, int device = 0) {
  return "{\"event\": \"launch\", \"thread\": 0, \"family\": \"norm\", \"kernel\": \"k\", \"grid\": [" +
         std::to_string(blocks) + ", 1, 1], \"block\": [" + std::to_string(threads) + ", 1, 1], \"device\": " +
         std::to_string(device) + ", \"stream\": 0, \"bytes\": " + std::to_string(bytes) +
         ", \"flops\": " + std::to_string(flops) + "}";
}

const double kHbm = h100::kHbmBytesPerS * h100::kHbmEfficiency;

}  // namespace

TEST_CASE("cost model: a launch is its roofline time at the share of the GPU its grid fills, plus a launch",
          "[cost]") {
  // 264 blocks of 256 threads: 8 resident per SM, one wave of 264 x 256 threads against the
  // 132 x 1024 that saturate: half the GPU.
  const cost::Prediction memory_bound = predict({launch(264, 256, 1e9, 1e6)});
  CHECK(memory_bound.seconds == Approx(1e9 / kHbm / 0.5 + h100::kLaunchSeconds));
  const cost::Prediction compute_bound = predict({launch(264, 256, 1e3, 1e12)});
  CHECK(compute_bound.seconds == Approx(1e12 / (h100::kFp32Flops * h100::kFp32Efficiency) / 0.5 + h100::kLaunchSeconds));
  // Three blocks (LayerNorm's parameter gradients today): 768 threads do the work of 135,168.
  const cost::Prediction starved = predict({launch(3, 256, 1e8, 0)});
  CHECK(starved.seconds == Approx(1e8 / kHbm / (768.0 / (132 * 1024)) + h100::kLaunchSeconds));
  CHECK(starved.underfilled == 1);
  CHECK(predict({launch(3, 256, 1e3, 0)}).underfilled == 0);  // small: not worth a full grid
  // Many waves: 10 full waves of 1024 blocks of 1024 threads (2 per SM) fill the GPU.
  CHECK(predict({launch(2640, 1024, 1e9, 0)}).seconds == Approx(1e9 / kHbm + h100::kLaunchSeconds));
  CHECK(memory_bound.launches == 1);
  CHECK(memory_bound.families.at(0).name == "norm");
}

TEST_CASE("cost model: GEMMs at cuBLAS's efficiency of the tensor-core or CUDA-core peak, tiles quantised in waves",
          "[cost]") {
  const std::string gemm = "{\"event\": \"gemm\", \"thread\": 0, \"family\": \"matmul\", \"m\": 4096, \"n\": 4096, "
                           "\"k\": 4096, \"batch\": 1, \"transa\": false, \"transb\": false, \"device\": 0, "
                           "\"stream\": 0, \"accumulate\": \"f32\", \"inputs\": ";
  const double flops = 2.0 * 4096 * 4096 * 4096;
  const double filled = 1024.0 / (8 * 132);  // 32 x 32 tiles of 128 x 128 in 8 waves of 132
  const cost::Prediction bf16 = predict({gemm + "\"bf16\"}"});
  CHECK(bf16.seconds ==
        Approx(flops / (h100::kBf16TensorFlops * h100::kGemmTensorEfficiency * filled) + h100::kLaunchSeconds));
  CHECK(bf16.flops == flops);
  CHECK(bf16.bytes == 2.0 * 4096 * 4096 * 2 + 4.0 * 4096 * 4096);
  CHECK(bf16.families.at(0).name == "cublas");
  // A weight gradient: a 768 x 768 output (36 tiles) summed over 16,384 tokens is split 3 ways in k.
  const std::string weight_grad = "{\"event\": \"gemm\", \"m\": 768, \"n\": 768, \"k\": 16384, \"batch\": 1, "
                                  "\"accumulate\": \"f32\", \"inputs\": \"bf16\"}";
  const cost::Prediction split = predict({weight_grad});
  CHECK(split.seconds == Approx(2.0 * 768 * 768 * 16384 /
                                    (h100::kBf16TensorFlops * h100::kGemmTensorEfficiency * (108.0 / 132)) +
                                h100::kLaunchSeconds));
  CHECK(split.underfilled == 0);  // cuBLAS picks its grid: only the project's own launches count
  const cost::Prediction f32 = predict({gemm + "\"f32\"}"});
  CHECK(f32.seconds ==
        Approx(flops / (h100::kFp32Flops * h100::kGemmFp32Efficiency * filled) + h100::kLaunchSeconds));
}

TEST_CASE("cost model: host synchronisations, allocations and collectives", "[cost]") {
  const cost::Prediction p = predict({
      // a read the host waits for, then its stream's sync: one stop
      R"({"event": "copy", "thread": 0, "kind": "d2h", "bytes": 8, "device": 0, "stream": 0, "host_waits": true})",
      R"({"event": "sync", "thread": 0, "on": "stream"})",
      R"({"event": "sync", "thread": 0, "on": "device"})",  // a second stop
      R"({"event": "malloc", "thread": 0, "bytes": 1048576, "device": 0})",
      R"({"event": "nccl", "thread": 0, "call": "ncclAllReduce", "bytes": 1000000000, "ranks": 4, "rank": 0, "device": 0, "stream": 1})",
      R"({"event": "wait_event", "thread": 0, "device": 0, "stream": 1})",
  });
  CHECK(p.host_syncs == 2);
  CHECK(p.mallocs == 1);
  CHECK(p.launches == 1);
  const double copy = 8 / (h100::kPcieBytesPerS * h100::kPcieEfficiency) + h100::kHostSyncSeconds;
  const double all_reduce = 2 * 0.75 * 1e9 / (h100::kNvlinkBytesPerS * h100::kNvlinkEfficiency) + h100::kLaunchSeconds;
  CHECK(p.seconds == Approx(copy + h100::kHostSyncSeconds + h100::kMallocSeconds + all_reduce));
}

TEST_CASE("cost model: a step is its slowest device's, with tokens/s and MFU from the step entry", "[cost]") {
  const cost::Prediction p = predict({
      launch(2640, 1024, 1e9, 0, 0),
      launch(2640, 1024, 3e9, 0, 1),
      R"({"event": "step", "seq": 2, "step": 2, "tokens": 16384, "flops_per_token": 1e9, "precision": "bf16", "record_only": true})",
  });
  const double slowest = 3e9 / kHbm + h100::kLaunchSeconds;
  CHECK(p.devices == 2);
  CHECK(p.seconds == Approx(slowest));
  CHECK(p.tokens_per_s() == Approx(16384 / slowest));
  CHECK(p.mfu() == Approx(16384 * 1e9 / slowest / h100::kBf16TensorFlops));
  CHECK(p.record_only);
  const std::string text = cost::report(p);
  CHECK_THAT(text, Catch::Contains("predicted_step_ms:"));
  CHECK_THAT(text, Catch::Contains("predicted_tokens_per_s:"));
  CHECK_THAT(text, Catch::Contains("predicted_mfu:"));
  CHECK_THAT(text, Catch::Contains("no GPU ran this"));
}

TEST_CASE("cost model: a file that is not a ledger is an error naming the file and line", "[cost]") {
  test::require_error([] { predict({launch(1, 32, 1, 1), "not json"}); }, {"ledger.jsonl:2", "not a ledger entry"});
  test::require_error([] { predict({R"({"seq": 0})"}); }, {"ledger.jsonl:1", "no \"event\""});
  test::require_error([] { predict({R"({"event": "teleport"})"}); }, {"ledger.jsonl:1", "unknown ledger event 'teleport'"});
  test::require_error([] { predict({R"({"event": "launch", "grid": [1, 1, 1]})"}); },
                      {"ledger.jsonl:1", "'launch' entry without the fields"});
  test::require_error([] { cost::predict_file("/nonexistent/ledger.jsonl"); },
                      {"/nonexistent/ledger.jsonl", "cannot open"});
}
