// core/stream.cpp — CUDA streams and events per logical device, and the current stream of each
// thread.
//
// Each logical CUDA device gets a default stream, created with cudaStreamNonBlocking on first
// use so that it never synchronises with the legacy NULL stream (which third-party code may
// use). Streams made by Stream::create go into a per-device pool and are never destroyed, so a
// Stream handle stays valid for the life of the process. The current stream is thread-local and
// per device; a thread that never set one gets the device's default stream.
//
// Every function first checks that its device is an existing CUDA device, so without a GPU
// each throws "cuda:0: no such device (0 CUDA devices: <the driver's reason>)"; a build without
// CUDA throws "<function>: cuda:0: multigrad was built without CUDA".
#include "multigrad/core/stream.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "multigrad/core/error.h"

#if MG_WITH_CUDA
#include "multigrad/core/cuda_check.h"
#include "multigrad/core/cuda_device_guard.h"
#endif

namespace mg {

#if MG_WITH_CUDA

namespace {

void check_cuda_device(const Device& device, const char* fn) {
  MG_CHECK(device.is_cuda(), fn, ": expected a CUDA device, got ", device);
  check_device_exists(device);
}

// Streams of one logical device.
struct DeviceStreams {
  std::once_flag default_created;
  cudaStream_t default_stream = nullptr;
  std::mutex pool_mutex;
  std::vector<cudaStream_t> pool;  // from Stream::create
};

// One entry per logical device; the count is fixed for the life of the process. Leaked so that
// streams stay usable during static destruction.
DeviceStreams& streams_of(const Device& device) {
  static auto* table = new std::vector<std::unique_ptr<DeviceStreams>>([] {
    std::vector<std::unique_ptr<DeviceStreams>> v(size_t(device_count(DeviceType::CUDA)));
    for (auto& s : v) s = std::make_unique<DeviceStreams>();
    return v;
  }());
  return *(*table)[size_t(device.index())];
}

cudaStream_t new_stream(const Device& device) {
  detail::CudaDeviceGuard guard(cuda_physical_index(device.index()));
  cudaStream_t stream = nullptr;
  MG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

cudaStream_t default_stream(const Device& device) {
  DeviceStreams& s = streams_of(device);
  std::call_once(s.default_created, [&] { s.default_stream = new_stream(device); });
  return s.default_stream;
}

// The calling thread's stream choices, by logical device index; null means the default stream.
// Held through a plain pointer, whose storage outlives every thread_local destructor of the
// thread: a StreamGuard destroyed late in the thread's exit (one that a thread_local holds) finds
// the table or null, never a destroyed vector.
thread_local std::vector<cudaStream_t>* current_streams = nullptr;
struct CurrentStreamsOwner {
  ~CurrentStreamsOwner() {
    delete current_streams;
    current_streams = nullptr;
  }
};
thread_local CurrentStreamsOwner current_streams_owner;

std::vector<cudaStream_t>& thread_streams() {
  if (current_streams == nullptr) {
    static_cast<void>(&current_streams_owner);  // constructs it: it frees the table at thread exit
    current_streams = new std::vector<cudaStream_t>;
  }
  return *current_streams;
}

}  // namespace

Stream Stream::create(const Device& device) {
  check_cuda_device(device, "Stream::create");
  cudaStream_t stream = new_stream(device);
  DeviceStreams& s = streams_of(device);
  std::lock_guard<std::mutex> lock(s.pool_mutex);
  s.pool.push_back(stream);
  return Stream(device, stream);
}

void Stream::synchronize() const {
  check_cuda_device(device_, "Stream::synchronize");
  MG_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
}

Stream current_stream(const Device& device) {
  check_cuda_device(device, "current_stream");
  size_t i = size_t(device.index());
  cudaStream_t chosen = current_streams != nullptr && i < current_streams->size() ? (*current_streams)[i] : nullptr;
  return Stream(device, chosen != nullptr ? chosen : default_stream(device));
}

// Waits for the whole physical GPU: that covers every stream of this logical device (and, when
// logical devices share the GPU, the others' too, which is more waiting but never less).
void synchronize(const Device& device) {
  check_cuda_device(device, "synchronize");
  detail::CudaDeviceGuard guard(cuda_physical_index(device.index()));
  MG_CUDA_CHECK(cudaDeviceSynchronize());
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(current_stream(stream.device())) {
  size_t i = size_t(stream.device().index());
  std::vector<cudaStream_t>& streams = thread_streams();
  if (streams.size() <= i) streams.resize(i + 1, nullptr);
  streams[i] = static_cast<cudaStream_t>(stream.handle());
}

StreamGuard::~StreamGuard() {
  if (current_streams == nullptr) return;  // the thread is exiting and its table is gone
  (*current_streams)[size_t(previous_.device().index())] = static_cast<cudaStream_t>(previous_.handle());
}

Event::Event(const Device& device) : device_(device) {
  check_cuda_device(device, "Event");
  detail::CudaDeviceGuard guard(cuda_physical_index(device.index()));
  cudaEvent_t event = nullptr;
  MG_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  handle_ = event;
}

Event::~Event() { cudaEventDestroy(static_cast<cudaEvent_t>(handle_)); }

void Event::record(const Stream& stream) {
  MG_CHECK(stream.device() == device_, "Event::record: event of ", device_, " recorded on a stream of ",
           stream.device());
  MG_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(stream.handle())));
}

void Event::wait(const Stream& stream) const {
  check_cuda_device(stream.device(), "Event::wait");
  MG_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()), static_cast<cudaEvent_t>(handle_), 0));
}

void Event::synchronize() const { MG_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_))); }

bool Event::query() const {
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is an answer, not an error to keep
    return false;
  }
  MG_CUDA_CHECK(err);
  return true;
}

void set_cuda_device(const Device& device) {
  check_cuda_device(device, "set_cuda_device");
  MG_CUDA_CHECK(cudaSetDevice(cuda_physical_index(device.index())));
}

namespace detail {

bool cuda_sync_launches() {
  static const bool sync = [] {
    const char* env = std::getenv("MG_CUDA_SYNC");
    return env != nullptr && std::strcmp(env, "0") != 0 && env[0] != '\0';
  }();
  return sync;
}

}  // namespace detail

#else  // without CUDA there are no CUDA devices: each function names itself and throws.

namespace {

[[noreturn]] void unavailable(const Device& device, const char* fn) {
  MG_CHECK(device.is_cuda(), fn, ": expected a CUDA device, got ", device);
  MG_ERROR(fn, ": ", device, ": multigrad was built without CUDA");
}

}  // namespace

Stream Stream::create(const Device& device) { unavailable(device, "Stream::create"); }
void Stream::synchronize() const { unavailable(device_, "Stream::synchronize"); }
Stream current_stream(const Device& device) { unavailable(device, "current_stream"); }
void synchronize(const Device& device) { unavailable(device, "synchronize"); }
StreamGuard::StreamGuard(const Stream& stream) { unavailable(stream.device(), "StreamGuard"); }
StreamGuard::~StreamGuard() = default;
Event::Event(const Device& device) : device_(device) { unavailable(device, "Event"); }
Event::~Event() = default;
void Event::record(const Stream& stream) { unavailable(stream.device(), "Event::record"); }
void Event::wait(const Stream& stream) const { unavailable(stream.device(), "Event::wait"); }
void Event::synchronize() const { unavailable(device_, "Event::synchronize"); }
bool Event::query() const { unavailable(device_, "Event::query"); }
void set_cuda_device(const Device& device) { unavailable(device, "set_cuda_device"); }

#endif

}  // namespace mg
