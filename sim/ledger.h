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

}  // namespace mg::sim::ledger
