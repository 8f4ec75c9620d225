// sim/state.h — the simulated CUDA runtime's state, shared by runtime.cpp and the library shims
// (cublas.cpp, cudnn.cpp): devices, streams as asynchronous queues, events, the memory registry.
//
// Streams: each stream is a FIFO of operations run by a worker thread of its own, so work really
// runs asynchronously to the host, in stream order, and a missing synchronisation shows as a
// wrong result instead of being hidden by running everything inline. An operation that throws
// (a kernel's SimError, a library's misuse found while running) leaves the device with a sticky
// error, as a fault on a GPU does: every later call on that device returns it.
// The legacy default stream (0) of each device synchronises with the device's blocking streams
// (flags 0) as CUDA's does; cudaStreamNonBlocking streams run independently of it.
#pragma once

#include <cuda_runtime.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace mg::sim {

// Runs `fn` on the stream after everything enqueued before it (0: the current device's legacy
// stream). Returns the device's sticky error instead when it holds one.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> fn);
// Waits until the stream has run everything enqueued so far; its device's sticky error, if any.
cudaError_t synchronize_stream(cudaStream_t stream);
// The device a stream belongs to (0: the current device).
int stream_device(cudaStream_t stream);

// The calling thread's current device (cudaSetDevice), and the device's sticky error.
int current_device();
cudaError_t sticky_error(int device);

// Records `error` as the calling thread's last error (cudaGetLastError) and returns it.
cudaError_t set_last_error(cudaError_t error);

// What a pointer is: device memory (of which device), pinned host memory, or neither (pageable
// host memory, or not an allocation of this runtime).
enum class MemoryKind { Device, Pinned, Other };
struct PointerInfo {
  MemoryKind kind = MemoryKind::Other;
  int device = -1;
};
PointerInfo pointer_info(const void* p);
// Whether [p, p + bytes) lies inside one device allocation.
bool device_range(const void* p, size_t bytes);

}  // namespace mg::sim
