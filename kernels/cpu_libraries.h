// kernels/cpu_libraries.h — what the CPU kernels run on, asked from above the kernels without
// reaching into kernels/cpu/: the libraries chosen when the library loaded (OpenBLAS's GEMM
// kernels, oneDNN's convolutions and bf16 matmuls) and one thread's peak FLOPs per cycle.
// `multigrad devices` prints them; MFU divides by the peak.
#pragma once

#include <string>

namespace mg::kernels {

struct CpuLibraries {
  std::string cpu_isa;  // this CPU's level: "AVX2", "AVX-512", ...
  struct {
    std::string library;  // "OpenBLAS 0.3.21"
    std::string core;     // the kernels in use: "SkylakeX"
    std::string origin;   // how they were chosen, e.g. "OpenBLAS's own choice"
    std::string warning;  // empty unless GEMMs run below the CPU's level
  } gemm;
  struct {
    std::string name;     // the library of float32 convolutions and bf16 matmuls; empty without oneDNN
    std::string isa;      // its kernels: "AVX2", "AVX-512", ...
    std::string warning;  // empty unless those kernels are below the CPU's level
  } onednn;
  bool bf16_matmuls = false;  // oneDNN multiplies bf16 matmuls (else float32 GEMMs on the bf16 values)
};
const CpuLibraries& cpu_libraries();

// One thread's peak, an upper bound: its clock and the FLOPs per cycle of float32 FMAs, and of
// bf16 GEMMs where bf16_matmuls (0 otherwise).
struct CpuThreadPeak {
  double ghz = 0;  // 0 when neither cpufreq nor /proc/cpuinfo has a clock rate
  int float32_flops_per_cycle = 0;
  int bf16_flops_per_cycle = 0;
  std::string bf16_isa;  // "AMX", "AVX-512 BF16", or "none"
};
CpuThreadPeak cpu_thread_peak();

}  // namespace mg::kernels
