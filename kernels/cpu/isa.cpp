// kernels/cpu/isa.cpp — the instruction sets of this CPU (isa.h).
#include "multigrad/kernels/cpu/isa.h"

#include <cstdlib>
#include <fstream>
#include <string>

namespace mg::kernels::cpu {

const char* isa_level_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::Sse3: return "SSE3";
    case IsaLevel::Avx: return "AVX";
    case IsaLevel::Avx2: return "AVX2";
    case IsaLevel::Avx512: return "AVX-512";
    case IsaLevel::Avx512Bf16: return "AVX-512 BF16";
    case IsaLevel::Unknown: break;
  }
  return "an unknown instruction set";
}

IsaLevel cpu_isa_level() {
  static const IsaLevel level = [] {
#if defined(__x86_64__) && defined(__GNUC__)
    // __builtin_cpu_supports also checks that the OS saves the vector registers (XCR0).
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vl");
    if (avx512) return __builtin_cpu_supports("avx512bf16") ? IsaLevel::Avx512Bf16 : IsaLevel::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return IsaLevel::Avx2;
    if (__builtin_cpu_supports("avx")) return IsaLevel::Avx;
    return IsaLevel::Sse3;
#else
    return IsaLevel::Unknown;
#endif
  }();
  return level;
}

CpuPeak cpu_thread_peak() {
  static const CpuPeak peak = [] {
    CpuPeak p;
    const IsaLevel level = cpu_isa_level();
    p.flops_per_cycle = level >= IsaLevel::Avx512 ? 64 : level >= IsaLevel::Avx2 ? 32 : level >= IsaLevel::Avx ? 16 : 8;
    std::ifstream max_freq("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");  // kHz
    double khz = 0;
    if (max_freq >> khz && khz > 0) {
      p.ghz = khz / 1e6;
      p.clock_source = "cpuinfo_max_freq";
      return p;
    }
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);) {
      if (line.rfind("cpu MHz", 0) != 0) continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const double mhz = std::strtod(line.c_str() + colon + 1, nullptr);  // 0 when malformed
      if (mhz > p.ghz * 1e3) p.ghz = mhz / 1e3, p.clock_source = "/proc/cpuinfo";
    }
    return p;
  }();
  return peak;
}

}  // namespace mg::kernels::cpu
