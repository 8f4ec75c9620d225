// cli/peak.cpp — peak float32 FLOP/s of a device (see peak.h).
#include "cli/peak.h"

#include <cstdio>

#include "kernels/cpu/isa.h"

namespace mg::cli {
namespace {

// float32 FMA lanes per SM (the CUDA C++ Programming Guide's arithmetic-instruction throughput).
int fp32_lanes_per_sm(int major, int minor) {
  if (major == 6 && minor == 0) return 64;
  if (major == 7 || (major == 8 && minor == 0)) return 64;
  return major >= 5 ? 128 : 0;
}

}  // namespace

PeakFlops peak_flops(const Device& device) {
  char how[128];
  if (device.is_cpu()) {
    const kernels::cpu::CpuPeak thread = kernels::cpu::cpu_thread_peak();
    const int threads = cpu_thread_budget(device);
    if (thread.ghz <= 0) return {0, "no CPU clock rate found (neither cpufreq nor /proc/cpuinfo has one)"};
    std::snprintf(how, sizeof how, "%d threads x %.2f GHz x %d FLOPs/cycle", threads, thread.ghz,
                  thread.flops_per_cycle);
    return {threads * thread.flops_per_s(), how};
  }
  const CudaDeviceInfo info = cuda_device_info(device.index());
  const int lanes = fp32_lanes_per_sm(info.major, info.minor);
  if (lanes == 0 || info.clock_khz <= 0) return {0, "no float32 rate known for this GPU"};
  const double ghz = info.clock_khz / 1e6;
  std::snprintf(how, sizeof how, "%d SMs x %.2f GHz x %d lanes x 2 FLOPs", info.sm_count, ghz, lanes);
  return {info.sm_count * ghz * 1e9 * lanes * 2, how};
}

}  // namespace mg::cli
