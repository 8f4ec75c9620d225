// sim/executor.h — how the simulator runs a grid: CUDA's execution model on one CPU thread.
//
// A grid's blocks run one after another on the thread that executes the launch (its stream's
// worker, sim/runtime.cpp). A block's threads are fibers of that thread (Boost.Context), each with
// its own stack, so a kernel's locals are per CUDA thread and `__shared__` variables (static
// thread_local, sim/device.h) are per block. A fiber runs until it finishes or waits:
//   - __syncthreads: until every thread of the block has arrived. A thread that exits while
//     others wait at a barrier is an error, as compute-sanitizer's synccheck reports it, and so is
//     a block whose threads all wait on something that never comes (a barrier or a shuffle only
//     some reach).
//   - a warp shuffle: until every lane its mask names has arrived with the same mask; a lane
//     outside the mask, or a source lane outside it, is an error.
// The scheduler resumes the runnable fibers in thread order, in reverse, or in a seeded shuffle
// on every pass (MG_CUDA_SIM_SCHEDULE=forward|reverse|shuffle[:seed], read once), so that a
// missing __syncthreads changes the result instead of being hidden by one lucky order.
// Errors are thrown as SimError to the caller of run_grid, naming the block and thread.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace mg::sim {

struct SimError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The CUDA thread a fiber runs: its indices and the block it belongs to.
struct Block;
struct ThreadState;
struct CurrentThread {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
  int linear = 0;  // x + y * dim.x + z * dim.x * dim.y: lane = linear % 32
  Block* block = nullptr;
  ThreadState* state = nullptr;
};
extern thread_local CurrentThread* tls_thread;

// Runs `call` (one kernel invocation) on every thread of every block of the grid.
void run_grid(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& call);

void syncthreads();
// Lane (lane ^ lane_mask) of the calling warp's value, all 32 lanes of `mask` taking part; bytes
// are exchanged, so any trivially copyable value of up to 16 bytes crosses.
void shuffle_xor_bytes(unsigned mask, const void* value, void* result, size_t size, int lane_mask, int width);

template <class T>
T shfl_xor(unsigned mask, T value, int lane_mask, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 16, "shuffle of a type wider than 16 bytes");
  T result;
  shuffle_xor_bytes(mask, &value, &result, sizeof(T), lane_mask, width);
  return result;
}

}  // namespace mg::sim
