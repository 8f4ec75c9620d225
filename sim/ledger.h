// sim/ledger.h — the simulator's ledger of the CUDA work a process asks for: every kernel launch
// (name, grid, block, stream), cuBLAS GEMM (shape, types), cuDNN convolution (shape), NCCL call
// (bytes), copy and memset (direction, bytes, whether the host waits), allocation, and host
// synchronisation, one JSON object per line, in the order the host threads made the calls.
// What a cost model prices (docs/simulator.md, "The ledger"), and what a reader counts: how many
// launches a training step makes, how many times it stops the host, how much it allocates.
//
// On while a file is open: MG_CUDA_SIM_LEDGER=FILE in the environment opens one at the first CUDA
// call, start() (mg::cuda_ledger_start, core/ledger.h) another. Each entry carries the calling
// host thread's context: the kernel family the library's KernelTimer named before a launch or a
// library call (kernels/kernel_times.h), and the training-step phase (mg::StepPhase).
// When off, recording costs one atomic load per call.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace mg::sim::ledger {

// Opens `path` (replacing it) for the entries from now on, closing an open ledger first; an
// error message when it cannot be opened, else empty.
std::string start(const std::string& path);
// Closes the ledger: entries from now on are dropped. Returns how many it holds.
long long stop();
bool on();

// The calling thread's context for its entries (null: none).
struct Context {
  const char* family = nullptr;  // a source path or family name (its stem is written)
  const char* phase = nullptr;   // "forward", "backward", "optimizer", ...
};
Context& context();

// One entry: {"seq": n, "event": event, "thread": t, "phase": ..., <fields>}; `fields` is the
// body of a JSON object ("\"bytes\": 4, ..."), possibly empty. `with_family` adds the context's
// kernel family (launches and library calls).
void record(const char* event, const std::string& fields, bool with_family = false);
// A stream's number in the ledger: 0 for a device's legacy stream (null), then 1, 2, ... in
// the order the ledger first meets them.
int stream_number(const void* stream);

// The runtime's entries (sim/runtime.cpp). A launch: the kernel, its configuration, and the bytes
// it moves and FLOPs it does as its launcher declared them (kernels/cuda/launch.cuh), which a cost
// model prices. A copy or memset: its kind ("h2d", "d2h", "d2d", "h2h", "peer"; "d" for a memset),
// the bytes, and whether the host waits for it.
void record_launch(const char* kernel, dim3 grid, dim3 block, int device, const void* stream, double bytes,
                   double flops);
void record_copy(const char* event, const char* kind, size_t bytes, int device, const void* stream, bool host_waits);
// The step a training loop recorded (mg::cuda_ledger_note_step): its number, tokens, the model's
// FLOPs per token, the precision, and whether this process runs kernels (record_only below).
void record_step(int64_t step, int64_t tokens, double flops_per_token, const std::string& precision);

// Record-only mode (MG_CUDA_SIM_EXECUTE=0 in the environment, read once): kernels, copies,
// memsets and cuBLAS, cuDNN and NCCL calls are recorded but not run, the devices report an H100's
// SMs and memory (so grids are sized as on one), and device memory is zero pages nothing writes.
// A step far too large to simulate (GPT-2 124M at batch 16 x 1024) then runs through its whole
// host path in minutes and leaves its real ledger. Every copy to the host writes zeros there:
// losses and norms are zeros, not the model's, and an index check finds nothing (bad_index.cuh).
// Unset or 1: everything runs. Any other value stops the process at the first CUDA call, naming it.
bool record_only();
// Where the host reads device memory in record-only mode: says once, on stderr, what it reads.
void host_reads_zeros();

}  // namespace mg::sim::ledger
