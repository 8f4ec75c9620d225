// core/stream.h — CUDA streams and events, with a current stream per thread and device.
//
// CUDA ops run asynchronously on the current stream of their device. Each thread starts on the
// device's default stream (a non-blocking stream created once per device); StreamGuard switches
// it for a scope. Handles are opaque here so that core headers do not need cuda_runtime.h.
// On a build without CUDA every function that would touch a GPU throws naming the device.
#pragma once

#include "multigrad/core/device.h"

namespace mg {

class Stream {
 public:
  Stream() = default;
  Stream(const Device& device, void* handle) : device_(device), handle_(handle) {}
  // A new stream on a CUDA device (owned by a process-wide pool, never destroyed).
  static Stream create(const Device& device);

  const Device& device() const { return device_; }
  void* handle() const { return handle_; }  // cudaStream_t
  void synchronize() const;
  bool operator==(const Stream& o) const { return device_ == o.device_ && handle_ == o.handle_; }

 private:
  Device device_;
  void* handle_ = nullptr;
};

// The calling thread's current stream on a CUDA device.
Stream current_stream(const Device& device);
// Waits for all work on every stream of the device.
void synchronize(const Device& device);

class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

class Event {
 public:
  explicit Event(const Device& device);  // a CUDA event without timing
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void wait(const Stream& stream) const;  // stream waits for this event's work (no host block)
  void synchronize() const;               // host waits
  bool query() const;                     // true once the recorded work finished

 private:
  Device device_;
  void* handle_ = nullptr;  // cudaEvent_t
};

// Makes the calling thread's CUDA context the one of `device` (cudaSetDevice on its physical GPU).
void set_cuda_device(const Device& device);

}  // namespace mg
