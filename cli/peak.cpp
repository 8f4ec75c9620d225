// cli/peak.cpp — peak FLOP/s of a device at a precision (see peak.h).
#include "cli/peak.h"

#include <cstdio>

#include "multigrad/kernels/cpu_libraries.h"

namespace mg::cli {
namespace {

// float32 FMA lanes per SM (the CUDA C++ Programming Guide's arithmetic-instruction throughput).
int fp32_lanes_per_sm(int major, int minor) {
  if (major == 6 && minor == 0) return 64;
  if (major == 7 || (major == 8 && minor == 0)) return 64;
  return major >= 5 ? 128 : 0;
}

// Dense bf16/fp16 tensor-core FLOPs per SM per cycle (peak.h); 0 when unknown or absent (no bf16
// before 8.0).
int tensor_flops_per_sm(int major, int minor, Precision precision) {
  if (major == 7) return precision == Precision::Float16 && (minor == 0 || minor == 5) ? 1024 : 0;
  if (major == 8) return minor == 0 ? 2048 : (minor == 6 || minor == 9) ? 1024 : 0;
  return major == 9 && minor == 0 ? 4096 : 0;
}

PeakFlops cpu_peak(const Device& device, Precision precision, int threads_given) {
  const kernels::CpuThreadPeak thread = kernels::cpu_thread_peak();
  if (thread.ghz <= 0) return {0, "no CPU clock rate found (neither cpufreq nor /proc/cpuinfo has one)", ""};
  const int threads = threads_given > 0 ? threads_given : cpu_thread_budget(device);
  int per_cycle = thread.float32_flops_per_cycle;
  std::string of = "float32", note;
  if (precision == Precision::BFloat16 && thread.bf16_flops_per_cycle > 0) {
    per_cycle = thread.bf16_flops_per_cycle;
    of = "bf16";
    note = " of " + thread.bf16_isa;
  } else if (precision != Precision::Float32) {
    note = std::string("; ") + precision_name(precision) + " multiplied in float32 here";
  }
  char how[128];
  std::snprintf(how, sizeof how, "%d threads x %.2f GHz x %d FLOPs/cycle%s", threads, thread.ghz, per_cycle,
                note.c_str());
  return {threads * thread.ghz * 1e9 * per_cycle, how, of};
}

}  // namespace

PeakFlops peak_flops(const Device& device, Precision precision, int threads) {
  if (device.is_cpu()) return cpu_peak(device, precision, threads);
  const CudaDeviceInfo info = cuda_device_info(device.index());
  const double ghz = info.clock_khz / 1e6;
  char how[128];
  if (precision == Precision::Float32) {
    const int lanes = fp32_lanes_per_sm(info.major, info.minor);
    if (lanes == 0 || info.clock_khz <= 0) return {0, "no float32 rate known for this GPU", ""};
    std::snprintf(how, sizeof how, "%d SMs x %.2f GHz x %d lanes x 2 FLOPs", info.sm_count, ghz, lanes);
    return {info.sm_count * ghz * 1e9 * lanes * 2, how, "float32"};
  }
  const int per_sm = tensor_flops_per_sm(info.major, info.minor, precision);
  const std::string of = precision_name(precision);
  if (per_sm == 0 || info.clock_khz <= 0) {
    return {0, "no " + of + " tensor-core rate known for compute capability " + std::to_string(info.major) + "." +
                   std::to_string(info.minor), ""};
  }
  std::snprintf(how, sizeof how, "%d SMs x %.2f GHz x %d FLOPs/cycle of tensor cores", info.sm_count, ghz, per_sm);
  return {info.sm_count * ghz * 1e9 * per_sm, how, of};
}

}  // namespace mg::cli
