// core/device.cpp — device names, the CPU virtual device count and the CUDA device table.
//
// CPU devices: the count is set by set_cpu_device_count, or else read once from
// MG_CPU_DEVICES at first use (default 1). It may change at any time, also downwards: a tensor
// already on a device that vanishes stays valid (its allocator lives for the whole process, see
// core/allocator.cpp), but nothing new can be created there. They share MG_CPU_THREADS threads
// (read once; default: the hardware threads).
//
// CUDA devices: the driver is asked once. MG_CUDA_LOGICAL_DEVICES=N then exposes N logical
// devices, logical i running on physical GPU i % (number of GPUs). device_count never throws, so
// a malformed MG_CUDA_LOGICAL_DEVICES leaves 0 CUDA devices, and cuda_unavailable_reason says why.
#include "multigrad/core/device.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "multigrad/core/error.h"

#if MG_WITH_CUDA
#include <cuda_runtime.h>

#include "multigrad/core/cuda_device_guard.h"
#endif

namespace mg {

namespace {

// A non-negative decimal integer with nothing around it, or nullopt.
std::optional<int> parse_index(const std::string& text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || text[0] == '-' || text[0] == '+' || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// ---- CPU virtual devices ----

std::mutex cpu_count_mutex;
std::atomic<int> cpu_count{0};  // 0 until first use or set_cpu_device_count

int read_cpu_count_from_env() {
  const char* env = std::getenv("MG_CPU_DEVICES");
  if (env == nullptr) return 1;
  std::optional<int> n = parse_index(env);
  MG_CHECK(n && *n >= 1 && *n <= kMaxCpuDevices, "MG_CPU_DEVICES='", env, "': expected an integer from 1 to ",
           kMaxCpuDevices);
  return *n;
}

int cpu_device_count() {
  int n = cpu_count.load(std::memory_order_acquire);
  if (n > 0) return n;
  std::lock_guard<std::mutex> lock(cpu_count_mutex);
  if (cpu_count.load() == 0) cpu_count.store(read_cpu_count_from_env(), std::memory_order_release);
  return cpu_count.load();
}

// ---- CUDA devices ----

struct CudaTopology {
  int physical = 0;    // GPUs the driver reports
  int logical = 0;     // devices multigrad exposes
  std::string reason;  // why logical is 0
};

CudaTopology probe_cuda() {
  CudaTopology t;
#if MG_WITH_CUDA
  cudaError_t err = cudaGetDeviceCount(&t.physical);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the error so later CUDA calls do not report it again
    t.physical = 0;
    t.reason = cudaGetErrorString(err);
    return t;
  }
  if (t.physical == 0) {
    t.reason = "the CUDA driver reports no devices";
    return t;
  }
  t.logical = t.physical;
  if (const char* env = std::getenv("MG_CUDA_LOGICAL_DEVICES")) {
    std::optional<int> n = parse_index(env);
    if (!n || *n < 1) {
      t.logical = 0;
      t.reason = detail::str_cat("MG_CUDA_LOGICAL_DEVICES='", env, "' is not a positive integer");
    } else {
      t.logical = *n;
    }
  }
#else
  t.reason = "multigrad was built without CUDA";
#endif
  return t;
}

const CudaTopology& cuda_topology() {
  static const CudaTopology topology = probe_cuda();
  return topology;
}

std::string plural(int n, const char* what) {
  return detail::str_cat(n, " ", what, n == 1 ? " device" : " devices");
}

}  // namespace

Device::Device(DeviceType type, int index) : type_(type), index_(index) {
  MG_CHECK(index >= 0, "Device: index must be non-negative, got ", index);
}

Device::Device(const std::string& spec) {
  size_t colon = spec.find(':');
  std::string name = spec.substr(0, colon);
  std::optional<int> index = colon == std::string::npos ? 0 : parse_index(spec.substr(colon + 1));
  MG_CHECK((name == "cpu" || name == "cuda") && index, "invalid device '", spec,
           "': expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N' with N a non-negative integer");
  type_ = name == "cpu" ? DeviceType::CPU : DeviceType::CUDA;
  index_ = *index;
}

std::string Device::str() const { return detail::str_cat(is_cpu() ? "cpu:" : "cuda:", index_); }

int device_count(DeviceType type) {
  return type == DeviceType::CPU ? cpu_device_count() : cuda_topology().logical;
}

void set_cpu_device_count(int n) {
  MG_CHECK(n >= 1 && n <= kMaxCpuDevices, "set_cpu_device_count: expected 1 to ", kMaxCpuDevices, " devices, got ", n);
  std::lock_guard<std::mutex> lock(cpu_count_mutex);
  cpu_count.store(n, std::memory_order_release);
}

int cpu_thread_count() {
  // Read once: hardware_concurrency reads /sys on every call (~15 us), and ops ask for their
  // budget each time.
  static const int threads = [] {
    const char* env = std::getenv("MG_CPU_THREADS");
    if (env == nullptr) return int(std::max(1u, std::thread::hardware_concurrency()));
    std::optional<int> n = parse_index(env);
    MG_CHECK(n && *n >= 1, "MG_CPU_THREADS='", env, "': expected a positive integer");
    return *n;
  }();
  return threads;
}

int cpu_thread_budget(const Device& device) {
  MG_CHECK(device.is_cpu(), "cpu_thread_budget: expected a CPU device, got ", device);
  check_device_exists(device);
  return std::max(1, cpu_thread_count() / cpu_device_count());
}

void check_device_exists(const Device& device) {
  if (device.is_cpu()) {
    int n = cpu_device_count();
    MG_CHECK(device.index() < n, device, ": no such device (", plural(n, "CPU"),
             "; set_cpu_device_count or MG_CPU_DEVICES sets how many)");
    return;
  }
  const CudaTopology& t = cuda_topology();
  MG_CHECK(device.index() < t.logical, device, ": no such device (", plural(t.logical, "CUDA"),
           t.logical == 0 ? ": " + t.reason : std::string(), ")");
}

std::string cuda_unavailable_reason() { return cuda_topology().reason; }

int cuda_physical_index(int logical_index) {
  check_device_exists(Device(DeviceType::CUDA, logical_index));
  return logical_index % cuda_topology().physical;
}

CudaDeviceInfo cuda_device_info(int logical_index) {
  CudaDeviceInfo info;
  info.physical_index = cuda_physical_index(logical_index);
#if MG_WITH_CUDA
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDeviceProperties(&prop, info.physical_index);
  MG_CHECK(err == cudaSuccess, "cuda_device_info: cudaGetDeviceProperties(", info.physical_index,
           ") failed: ", cudaGetErrorString(err));
  info.name = prop.name;
  info.total_memory = int64_t(prop.totalGlobalMem);
  info.sm_count = prop.multiProcessorCount;
  info.major = prop.major;
  info.minor = prop.minor;
  err = cudaDeviceGetAttribute(&info.clock_khz, cudaDevAttrClockRate, info.physical_index);
  MG_CHECK(err == cudaSuccess, "cuda_device_info: cudaDeviceGetAttribute(cudaDevAttrClockRate, ", info.physical_index,
           ") failed: ", cudaGetErrorString(err));
#endif
  return info;
}

int64_t cuda_free_memory(int logical_index) {
  const int physical = cuda_physical_index(logical_index);
  size_t free = 0;
#if MG_WITH_CUDA
  detail::CudaDeviceGuard on(physical);
  size_t total = 0;
  const cudaError_t err = cudaMemGetInfo(&free, &total);
  MG_CHECK(err == cudaSuccess, "cuda_free_memory: cudaMemGetInfo on GPU ", physical, " failed: ",
           cudaGetErrorString(err));
#endif
  return int64_t(free);
}

}  // namespace mg
