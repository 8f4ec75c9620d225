// core/device.h — where a tensor lives.
//
// CPU virtual devices: cpu:0 ... cpu:N-1 are separate memory domains, each with its own
// allocator statistics and a share of the cores (its thread budget), exactly as separate GPUs
// would be; ops that mix them are errors and .to() copies between them. N comes from
// mg::set_cpu_device_count(N) or the environment variable MG_CPU_DEVICES (default 1).
//
// CUDA devices: cuda:0 ... are the GPUs the driver reports. MG_CUDA_LOGICAL_DEVICES=N exposes
// N logical devices mapped round-robin onto the physical ones, each with its own streams and
// caching allocator, so multi-device code runs on one GPU.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace mg {

enum class DeviceType : uint8_t { CPU, CUDA };

class Device {
 public:
  Device() = default;  // cpu:0
  Device(DeviceType type, int index = 0);
  // Parses "cpu", "cpu:N", "cuda", "cuda:N" (no index means 0); throws naming the string.
  Device(const std::string& spec);  // NOLINT: implicit, so {.device = "cuda:1"} reads well
  Device(const char* spec) : Device(std::string(spec)) {}  // NOLINT

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  std::string str() const;  // "cpu:0", "cuda:1"

  bool operator==(const Device& o) const { return type_ == o.type_ && index_ == o.index_; }
  bool operator!=(const Device& o) const { return !(*this == o); }

 private:
  DeviceType type_ = DeviceType::CPU;
  int index_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

// Number of devices of this type: CPU = the virtual device count; CUDA = logical devices
// (0 when the build has no CUDA or the driver reports none; never throws).
int device_count(DeviceType type);
// At most kMaxCpuDevices (and MG_CPU_DEVICES likewise): more is a typo, not a plan. Each CPU device
// is a rank's thread in the parallel modes, and the thread budgets bottom out at one thread per
// device long before (the largest CPUs have a few hundred hardware threads).
inline constexpr int kMaxCpuDevices = 1024;
void set_cpu_device_count(int n);
// Threads the CPU devices share: MG_CPU_THREADS (read once; a malformed value is an error naming
// it), else the hardware threads.
int cpu_thread_count();
// Threads an op on this CPU device may use: cpu_thread_count() / CPU devices, at least 1.
int cpu_thread_budget(const Device& device);
// Throws unless the device exists, e.g. "cuda:7: no such device (1 CUDA device found)".
void check_device_exists(const Device& device);

// Why there are no CUDA devices, in the driver's words ("built without CUDA", "no CUDA-capable
// device is detected", ...); empty when there are some.
std::string cuda_unavailable_reason();
// The physical GPU a logical CUDA device runs on.
int cuda_physical_index(int logical_index);

struct CudaDeviceInfo {
  std::string name;          // "NVIDIA H200"
  int64_t total_memory = 0;  // bytes
  int sm_count = 0;
  int major = 0, minor = 0;  // compute capability
  int clock_khz = 0;         // the SMs' peak clock (cudaDevAttrClockRate)
  int physical_index = 0;
};
// Properties of a logical CUDA device; throws if it does not exist.
CudaDeviceInfo cuda_device_info(int logical_index);
// The bytes the driver reports free on a logical CUDA device's GPU (cudaMemGetInfo): shared by the
// logical devices on that GPU, and less what this process's caching allocator holds. Throws if it
// does not exist.
int64_t cuda_free_memory(int logical_index);

}  // namespace mg
