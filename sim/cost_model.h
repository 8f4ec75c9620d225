// sim/cost_model.h — a predicted H100 time for the CUDA work in a ledger (sim/ledger.h): what a
// training step recorded on the simulator would take on an H100 SXM, by kernel family, with the
// counts issue 44's targets name (launches, host synchronisations, allocations, launches that
// leave most of the GPU idle). Every figure it gives is a prediction; its constants and
// assumptions are sim/h100.h, its rules docs/cost-model.md.
//
// The rules, per entry:
//   kernel launch  max(bytes / HBM, flops / FP32) at the launch's share of the GPU, plus a launch's
//                  overhead. The share: the threads one wave keeps resident, over the 132 SMs x
//                  the threads an SM needs to reach its peaks (wave quantisation and occupancy from
//                  the grid and the block; registers and shared memory are not modelled).
//   cuBLAS GEMM    max(2 m n k / (tensor-core or FP32 peak x cuBLAS's efficiency x the 128 x 128
//                  tiles' wave quantisation, k split across blocks where the tiles are fewer
//                  than the SMs), its operands' bytes / HBM), plus a launch.
//   cuDNN conv     as a float32 GEMM of the convolution's multiply-adds.
//   NCCL call      its bus bytes (nccl-tests' factors) over NVLink; nothing on one rank.
//   copy, memset   bytes over PCIe (host <-> device), HBM (on the device) or NVLink (peer).
//   sync, malloc   fixed costs (a host synchronisation, a cudaMalloc or cudaFree).
// Each device's entries add up in order (streams are not overlapped: an upper bound where they
// would be); the step is its slowest device's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mg::sim::cost {

struct Family {
  std::string name;     // a kernel file's stem ("norm", "attention"), "cublas", "copy", "sync", ...
  double seconds = 0;   // predicted
  int64_t entries = 0;  // launches, calls, copies
  double bytes = 0;
  double flops = 0;
};

struct Prediction {
  std::vector<Family> families;  // by predicted time, largest first
  double seconds = 0;            // the predicted step: the slowest device's sum
  int devices = 0;
  int64_t launches = 0;     // kernel launches and library calls (GEMMs, convolutions, NCCL)
  int64_t host_syncs = 0;   // points where the host waits for the device
  int64_t mallocs = 0;      // cudaMalloc calls
  int64_t underfilled = 0;  // kernel launches moving > 1 MB or doing > 1 GFLOP on fewer blocks than SMs
  double bytes = 0;         // moved by launches and copies
  double flops = 0;
  // From the ledger's "step" entry (multigrad train --ledger), else 0 / empty.
  int64_t step = 0, tokens = 0;
  double flops_per_token = 0;
  std::string precision;
  bool record_only = false;

  double tokens_per_s() const { return seconds > 0 ? double(tokens) / seconds : 0; }
  // The model's FLOPs (flops_per_token x tokens) per second over the peak of the step's precision
  // (bf16/fp16: the dense tensor-core peak; fp32: the CUDA cores', TF32 being off).
  double mfu() const;
  double peak_flops() const;
};

// Reads a ledger (one JSON object per line) and predicts it. Throws naming the file and line
// when it cannot be read or a line is not a ledger entry.
Prediction predict_file(const std::string& path);
// The same over lines already read (`where` names them in errors).
Prediction predict_lines(const std::vector<std::string>& lines, const std::string& where);

// The report `multigrad predict` prints: one line per family, then the totals, every time
// labelled predicted.
std::string report(const Prediction& p);

}  // namespace mg::sim::cost
