// sim/runtime.cpp — the CUDA runtime API functions multigrad calls, simulated on the host.
//
// Devices: MG_CUDA_SIM_DEVICES of them (default 2, read once), each reporting the properties of
// a small sm_90 GPU (4 SMs, 16 GiB, 48 KB of shared memory per block) so that grid-stride loops
// take several turns. Device memory is host memory from aligned_alloc, filled with 0xFF bytes
// (NaN for floats) so that reading what was never written shows; cudaFree waits for the device
// first, as CUDA's does. Copies follow CUDA's host-visible rules: from pageable host memory the
// data is taken at the call (staged), into pageable host memory the call waits for the copy, and
// to or from pinned memory (cudaHostAlloc) the copy is asynchronous, so pinned buffers must stay
// valid and unchanged until their stream gets there. Device pointers are checked against their
// allocations: a copy or memset out of range is cudaErrorInvalidValue. Errors follow the runtime's
// rules: every failing call records its error for cudaGetLastError (which clears it), and a fault
// while running (sim/state.h) is sticky: every later call on that device returns it. Record-only
// mode (sim/ledger.h) reports an H100's 132 SMs and 80 GB, maps device memory as zero pages that
// nothing touches, and records kernels, copies and memsets without running them; a copy to the
// host writes zeros there.
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "multigrad/sim/executor.h"
#include "multigrad/sim/h100.h"
#include "multigrad/sim/launch.h"
#include "multigrad/sim/ledger.h"
#include "multigrad/sim/state.h"

struct CUstream_st {
  int device = 0;
  unsigned flags = 0;
  bool legacy = false;
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  uint64_t enqueued = 0, done = 0;  // tickets
  bool stop = false;
  std::thread worker;
};

// An event's state lives apart from its handle: queued records and waits hold it, so that
// cudaEventDestroy may return before they ran, as CUDA's does.
struct EventState {
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;  // tickets
  std::chrono::steady_clock::time_point time;
};
struct CUevent_st {
  int device = 0;
  bool timing = true;
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

namespace mg::sim {
namespace {

constexpr int kDefaultDevices = 2;
constexpr size_t kDeviceMemory = size_t(16) << 30;  // what each simulated device reports
constexpr int kSms = 4;
constexpr int kClockKhz = 1000000;  // the simulated SMs' clock (1 GHz): a round number for MFU's peak
constexpr size_t kAlignment = 256;                  // cudaMalloc's alignment
constexpr unsigned char kFreshByte = 0xFF;          // fresh device memory: NaN floats, -1 integers

struct DeviceState {
  std::mutex mutex;
  std::vector<CUstream_st*> streams;  // every live stream but the legacy one
  CUstream_st* legacy = nullptr;
  std::atomic<cudaError_t> sticky{cudaSuccess};
  std::atomic<size_t> allocated{0};
};

int device_count_from_env() {
  const char* env = std::getenv("MG_CUDA_SIM_DEVICES");
  if (env == nullptr) return kDefaultDevices;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || n < 0 || n > 64) {
    std::fprintf(stderr, "multigrad CUDA simulator: MG_CUDA_SIM_DEVICES='%s' is not a count of 0 to 64 devices\n", env);
    return 0;
  }
  return int(n);
}

std::vector<std::unique_ptr<DeviceState>>& devices() {
  static auto* table = [] {
    auto* t = new std::vector<std::unique_ptr<DeviceState>>(size_t(device_count_from_env()));
    for (auto& d : *t) d = std::make_unique<DeviceState>();
    return t;
  }();
  return *table;
}

// Record-only mode (sim/ledger.h) reports an H100's SMs and memory, so that grids are sized as on one.
size_t device_memory() { return ledger::record_only() ? size_t(h100::kMemoryBytes) : kDeviceMemory; }
int sm_count() { return ledger::record_only() ? h100::kSms : kSms; }

bool valid_device(int device) { return device >= 0 && device < int(devices().size()); }
DeviceState& device_state(int device) { return *devices()[size_t(device)]; }

thread_local int tls_device = 0;
thread_local cudaError_t tls_last_error = cudaSuccess;

cudaError_t fail(cudaError_t error) { return set_last_error(error); }

// ---- streams ----

void run_stream(CUstream_st* s) {
  std::unique_lock<std::mutex> lock(s->mutex);
  for (;;) {
    s->cv.wait(lock, [s] { return s->stop || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stopped and drained
    std::function<void()> op = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    DeviceState& d = device_state(s->device);
    if (d.sticky.load() == cudaSuccess) {  // after a fault nothing more runs on the device
      tls_device = s->device;
      try {
        op();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "multigrad CUDA simulator: device %d: %s\n", s->device, e.what());
        cudaError_t expected = cudaSuccess;
        d.sticky.compare_exchange_strong(expected, cudaErrorLaunchFailure);
      }
    }
    lock.lock();
    ++s->done;
    s->cv.notify_all();
  }
}

CUstream_st* new_stream(int device, unsigned flags, bool legacy) {
  auto* s = new CUstream_st;
  s->device = device;
  s->flags = flags;
  s->legacy = legacy;
  s->worker = std::thread(run_stream, s);
  return s;
}

CUstream_st* legacy_stream(int device) {
  DeviceState& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  if (d.legacy == nullptr) d.legacy = new_stream(device, 0, true);  // leaked, as the process's
  return d.legacy;
}

// 0, cudaStreamLegacy and cudaStreamPerThread all mean the current device's legacy stream here.
CUstream_st* resolve(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return legacy_stream(tls_device);
  return stream;
}

uint64_t push(CUstream_st* s, std::function<void()> op) {
  std::lock_guard<std::mutex> lock(s->mutex);
  s->queue.push_back(std::move(op));
  s->cv.notify_all();
  return ++s->enqueued;
}

uint64_t ticket_of(CUstream_st* s) {
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->enqueued;
}

void wait_for_ticket(CUstream_st* s, uint64_t ticket) {
  std::unique_lock<std::mutex> lock(s->mutex);
  s->cv.wait(lock, [&] { return s->done >= ticket; });
}

// Makes `s` wait, at this point of its queue, for what `other` has queued so far.
void order_after(CUstream_st* s, CUstream_st* other) {
  const uint64_t ticket = ticket_of(other);
  if (ticket > 0) push(s, [other, ticket] { wait_for_ticket(other, ticket); });
}

// ---- memory ----

struct Allocation {
  size_t size;
  MemoryKind kind;
  int device;
};
std::mutex memory_mutex;
std::map<uintptr_t, Allocation> allocations;  // by start address

size_t rounded_size(size_t bytes) { return std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment); }

void* allocate(size_t bytes, MemoryKind kind, int device) {
  const size_t rounded = rounded_size(bytes);
  void* p = nullptr;
  if (kind == MemoryKind::Device && ledger::record_only()) {  // zero pages that nothing writes
    p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
  } else {
    p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr) return nullptr;
    if (kind == MemoryKind::Device) std::memset(p, kFreshByte, rounded);
  }
  std::lock_guard<std::mutex> lock(memory_mutex);
  allocations[reinterpret_cast<uintptr_t>(p)] = {bytes, kind, device};
  return p;
}

// The allocation of `kind` that `p` starts, or false.
bool release(void* p, MemoryKind kind) {
  std::lock_guard<std::mutex> lock(memory_mutex);
  auto it = allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == allocations.end() || it->second.kind != kind) return false;
  if (kind == MemoryKind::Device) device_state(it->second.device).allocated -= it->second.size;
  if (kind == MemoryKind::Device && ledger::record_only())
    munmap(p, rounded_size(it->second.size));
  else
    std::free(p);
  allocations.erase(it);
  return true;
}

void synchronize_device(int device) {
  std::vector<CUstream_st*> streams;
  {
    DeviceState& d = device_state(device);
    std::lock_guard<std::mutex> lock(d.mutex);
    streams = d.streams;
    if (d.legacy != nullptr) streams.push_back(d.legacy);
  }
  for (CUstream_st* s : streams) wait_for_ticket(s, ticket_of(s));
}

const char* copy_kind(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return "h2d";
    case cudaMemcpyDeviceToHost:
      return "d2h";
    case cudaMemcpyDeviceToDevice:
      return "d2d";
    default:
      return "h2h";
  }
}

void ledger_copy(const char* event, const char* kind, size_t bytes, cudaStream_t stream, bool waits) {
  if (ledger::on()) ledger::record_copy(event, kind, bytes, stream_device(stream), stream, waits);
}

// A host synchronisation's entry: what the host waited for.
void ledger_sync(const char* what) {
  if (ledger::on()) ledger::record("sync", "\"on\": \"" + std::string(what) + "\"");
}

// `caller_waits`: cudaMemcpy, which waits for the copy whatever the memory.
cudaError_t copy_async(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream,
                       bool caller_waits = false) {
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
  const PointerInfo to = pointer_info(dst), from = pointer_info(src);
  if (kind == cudaMemcpyDefault) {
    const bool d_to = to.kind == MemoryKind::Device, d_from = from.kind == MemoryKind::Device;
    kind = d_from ? (d_to ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                  : (d_to ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  }
  const bool device_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool device_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if ((device_src && !device_range(src, count)) || (device_dst && !device_range(dst, count)) ||
      (!device_src && from.kind == MemoryKind::Device) || (!device_dst && to.kind == MemoryKind::Device))
    return fail(cudaErrorInvalidValue);
  ledger_copy("copy", copy_kind(kind), count, stream, caller_waits || (!device_dst && to.kind != MemoryKind::Pinned));
  CUstream_st* s = resolve(stream);
  std::function<void()> op = [dst, src, count] { std::memcpy(dst, src, count); };
  if (ledger::record_only()) {  // nothing moves: device memory stays untouched, host memory gets zeros
    if (!device_dst) ledger::host_reads_zeros();
    op = [dst, count, device_dst] {
      if (!device_dst) std::memset(dst, 0, count);
    };
  } else if (!device_src && from.kind != MemoryKind::Pinned) {  // pageable source: staged now
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + count);
    op = [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); };
  }
  const cudaError_t err = enqueue(s, std::move(op));
  if (err != cudaSuccess) return fail(err);
  if (!device_dst && to.kind != MemoryKind::Pinned) {  // pageable destination: the call waits
    const cudaError_t sync = synchronize_stream(s);
    if (sync != cudaSuccess) return fail(sync);
  }
  return cudaSuccess;
}

struct ErrorText {
  cudaError_t error;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
};

}  // namespace

cudaError_t set_last_error(cudaError_t error) {
  if (error != cudaSuccess) tls_last_error = error;
  return error;
}

int current_device() { return tls_device; }

cudaError_t sticky_error(int device) { return valid_device(device) ? device_state(device).sticky.load() : cudaSuccess; }

int stream_device(cudaStream_t stream) { return resolve(stream)->device; }

cudaError_t enqueue(cudaStream_t stream, std::function<void()> fn) {
  CUstream_st* s = resolve(stream);
  const cudaError_t sticky = sticky_error(s->device);
  if (sticky != cudaSuccess) return sticky;
  if (s->legacy) {
    DeviceState& d = device_state(s->device);
    std::vector<CUstream_st*> blocking;
    {
      std::lock_guard<std::mutex> lock(d.mutex);
      for (CUstream_st* other : d.streams)
        if ((other->flags & cudaStreamNonBlocking) == 0) blocking.push_back(other);
    }
    for (CUstream_st* other : blocking) order_after(s, other);
  } else if ((s->flags & cudaStreamNonBlocking) == 0) {
    order_after(s, legacy_stream(s->device));
  }
  push(s, std::move(fn));
  return cudaSuccess;
}

cudaError_t synchronize_stream(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  wait_for_ticket(s, ticket_of(s));
  return sticky_error(s->device);
}

bool device_range(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(memory_mutex);
  auto it = allocations.upper_bound(a);
  if (it == allocations.begin()) return false;
  --it;
  return it->second.kind == MemoryKind::Device && a + bytes <= it->first + it->second.size;
}

PointerInfo pointer_info(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(memory_mutex);
  auto it = allocations.upper_bound(a);
  if (it == allocations.begin()) return {};
  --it;
  if (a >= it->first + std::max<size_t>(it->second.size, 1)) return {};
  return {it->second.kind, it->second.device};
}

void launch_kernel(const char* kernel, dim3 grid, dim3 block, cudaStream_t stream, double bytes, double flops,
                   std::function<void()> call) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  const bool valid = threads >= 1 && threads <= 1024 && block.x <= 1024 && block.y <= 1024 && block.z <= 64 &&
                     grid.x >= 1 && grid.x <= 2147483647u && grid.y >= 1 && grid.y <= 65535 && grid.z >= 1 &&
                     grid.z <= 65535;
  if (!valid) {
    set_last_error(cudaErrorInvalidConfiguration);
    return;
  }
  if (ledger::on()) ledger::record_launch(kernel, grid, block, stream_device(stream), stream, bytes, flops);
  if (ledger::record_only()) {
    set_last_error(sticky_error(stream_device(stream)));
    return;
  }
  const cudaError_t err =
      enqueue(stream, [kernel, grid, block, call = std::move(call)] { run_grid(kernel, grid, block, call); });
  set_last_error(err);
}

}  // namespace mg::sim

using namespace mg::sim;

// ---- devices ----

cudaError_t cudaGetDeviceCount(int* count) {
  *count = int(devices().size());
  return *count == 0 ? fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  tls_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = tls_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "multigrad CUDA simulator %d", device);
  prop->totalGlobalMem = device_memory();
  prop->sharedMemPerBlock = 48 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->multiProcessorCount = sm_count();
  prop->major = 9;
  prop->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, device);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = prop.multiProcessorCount;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = prop.maxThreadsPerBlock;
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = prop.warpSize;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = prop.major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = prop.minor;
      return cudaSuccess;
    case cudaDevAttrClockRate:
      *value = kClockKhz;
      return cudaSuccess;
    default:
      return fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaDeviceSynchronize() {
  ledger_sync("device");
  synchronize_device(tls_device);
  return fail(sticky_error(tls_device));
}

// ---- errors ----

cudaError_t cudaGetLastError() {
  const cudaError_t sticky = sticky_error(tls_device);
  if (sticky != cudaSuccess) return sticky;
  const cudaError_t last = tls_last_error;
  tls_last_error = cudaSuccess;
  return last;
}

cudaError_t cudaPeekAtLastError() {
  const cudaError_t sticky = sticky_error(tls_device);
  return sticky != cudaSuccess ? sticky : tls_last_error;
}

const char* cudaGetErrorString(cudaError_t error) {
  for (const ErrorText& e : kErrors)
    if (e.error == error) return e.text;
  return "unrecognized error code";
}

const char* cudaGetErrorName(cudaError_t error) {
  for (const ErrorText& e : kErrors)
    if (e.error == error) return e.name;
  return "cudaErrorUnknown";
}

// ---- memory ----

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = nullptr;
  const int device = tls_device;
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  if (const cudaError_t sticky = sticky_error(device); sticky != cudaSuccess) return fail(sticky);
  if (bytes == 0) return cudaSuccess;
  DeviceState& d = device_state(device);
  if (d.allocated.fetch_add(bytes) + bytes > device_memory()) {
    d.allocated -= bytes;
    return fail(cudaErrorMemoryAllocation);
  }
  *p = allocate(bytes, MemoryKind::Device, device);
  if (*p == nullptr) {
    d.allocated -= bytes;
    return fail(cudaErrorMemoryAllocation);
  }
  if (ledger::on())
    ledger::record("malloc", "\"bytes\": " + std::to_string(bytes) + ", \"device\": " + std::to_string(device));
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  const int device = tls_device;
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  const size_t used = device_state(device).allocated.load();
  *total = device_memory();
  *free = *total - std::min(used, *total);
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  const PointerInfo info = pointer_info(p);
  if (info.kind != MemoryKind::Device) return fail(cudaErrorInvalidValue);
  if (ledger::on()) ledger::record("free", "\"device\": " + std::to_string(info.device));  // it waits for the device
  synchronize_device(info.device);
  return release(p, MemoryKind::Device) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  if (ledger::on()) ledger::record("malloc_host", "\"bytes\": " + std::to_string(bytes));
  *p = allocate(std::max<size_t>(bytes, 1), MemoryKind::Pinned, -1);
  return *p == nullptr ? fail(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  return release(p, MemoryKind::Pinned) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy_async(dst, src, count, kind, stream);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  const cudaError_t err = copy_async(dst, src, count, kind, nullptr, true);
  if (err != cudaSuccess) return err;
  return fail(synchronize_stream(nullptr));
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                                cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (!valid_device(dst_device) || !valid_device(src_device)) return fail(cudaErrorInvalidDevice);
  if (!device_range(dst, count) || !device_range(src, count) || pointer_info(dst).device != dst_device ||
      pointer_info(src).device != src_device)
    return fail(cudaErrorInvalidValue);
  ledger_copy("copy", "peer", count, stream, false);
  if (ledger::record_only()) return fail(sticky_error(stream_device(stream)));
  return fail(enqueue(stream, [dst, src, count] { std::memcpy(dst, src, count); }));
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (!device_range(p, count)) return fail(cudaErrorInvalidValue);
  ledger_copy("memset", "d", count, stream, false);
  if (ledger::record_only()) return fail(sticky_error(stream_device(stream)));
  return fail(enqueue(stream, [p, value, count] { std::memset(p, value, count); }));
}

// ---- streams ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  const int device = tls_device;
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  CUstream_st* s = new_stream(device, flags, false);
  DeviceState& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  d.streams.push_back(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return fail(cudaErrorInvalidResourceHandle);
  DeviceState& d = device_state(stream->device);
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    d.streams.erase(std::remove(d.streams.begin(), d.streams.end(), stream), d.streams.end());
  }
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    stream->stop = true;  // its queued work still runs, as CUDA lets it
    stream->cv.notify_all();
  }
  stream->worker.join();
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  ledger_sync("stream");
  return fail(synchronize_stream(stream));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->done >= s->enqueued ? sticky_error(s->device) : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> e = event->state;
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(e->mutex);
    ticket = e->recorded;
  }
  if (ticket == 0) return cudaSuccess;  // never recorded: nothing to wait for
  if (ledger::on())
    ledger::record("wait_event", "\"device\": " + std::to_string(stream_device(stream)) +
                                     ", \"stream\": " + std::to_string(ledger::stream_number(stream)));
  return fail(enqueue(stream, [e, ticket] {
    std::unique_lock<std::mutex> lock(e->mutex);
    e->cv.wait(lock, [&] { return e->completed >= ticket; });
  }));
}

// ---- events ----

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  auto* e = new CUevent_st;
  e->device = tls_device;
  e->timing = (flags & cudaEventDisableTiming) == 0;
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> e = event->state;
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(e->mutex);
    ticket = ++e->recorded;
  }
  const cudaError_t err = enqueue(stream, [e, ticket] {
    std::lock_guard<std::mutex> lock(e->mutex);
    e->completed = std::max(e->completed, ticket);
    e->time = std::chrono::steady_clock::now();
    e->cv.notify_all();
  });
  if (err != cudaSuccess) {  // never to complete: withdraw the record
    std::lock_guard<std::mutex> lock(e->mutex);
    if (e->recorded == ticket) --e->recorded;
  }
  return fail(err);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(event->state->mutex);
  return event->state->completed >= event->state->recorded ? cudaSuccess : fail(cudaErrorNotReady);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  ledger_sync("event");
  EventState& e = *event->state;
  {
    std::unique_lock<std::mutex> lock(e.mutex);
    e.cv.wait(lock, [&] { return e.completed >= e.recorded; });
  }
  return fail(sticky_error(event->device));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr || !start->timing || !end->timing) return fail(cudaErrorInvalidResourceHandle);
  EventState &a = *start->state, &b = *end->state;
  std::unique_lock<std::mutex> lock_a(a.mutex), lock_b;
  if (&a != &b) lock_b = std::unique_lock<std::mutex>(b.mutex);
  if (a.recorded == 0 || b.recorded == 0) return fail(cudaErrorInvalidResourceHandle);
  if (a.completed < a.recorded || b.completed < b.recorded) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(b.time - a.time).count();
  return cudaSuccess;
}
