// kernels/cpu/isa.h — the instruction sets this x86 CPU runs (isa.cpp), and loops compiled for
// several of them, the best one picked at run time.
//
// A build for baseline x86-64 (SSE2) runs everywhere, but math-heavy loops (GELU's and
// softmax's exp_poly) run 2.5-4x faster in 16- and 32-lane AVX-512 / AVX2 vectors. So a loop is
// written once as a macro DEFINE(suffix, attributes) and MG_DEFINE_FOR_EACH_ISA(DEFINE) defines
// fn_baseline, fn_avx2 and fn_avx512 from it; MG_CALL_BEST_ISA(fn, args...) returns the call of
// the one the processor runs best. -ffp-contract=off (CMakeLists.txt) keeps the versions'
// results bit-identical when their operations are the same. Elsewhere than x86-64 with GCC or
// Clang there is only fn_baseline.
#pragma once

namespace mg::kernels::cpu {

// x86-64 instruction-set levels, in order, as the libraries' kernels tell them apart (OpenBLAS's
// cores, gemm_kernel.h; oneDNN's ISAs, conv_onednn.h).
enum class IsaLevel { Unknown, Sse3, Avx, Avx2, Avx512, Avx512Bf16 };

const char* isa_level_name(IsaLevel level);  // "AVX-512", ...
// The highest level this CPU and its OS run, asked once (Unknown off x86-64). AVX2 counts with
// FMA; AVX-512 with F, CD, BW, DQ and VL (Skylake-SP's set and every later one).
IsaLevel cpu_isa_level();

// One hardware thread's peak float32 rate, the denominator of a CPU's MFU (README, "MFU"): a
// clock times FLOPs per cycle. The clock is cpufreq's cpuinfo_max_freq where the kernel has it,
// else /proc/cpuinfo's "cpu MHz" (the nominal clock a VM reports), 0 when neither is there.
// FLOPs per cycle assume two FMA pipes of the widest vectors (AVX-512: 2 pipes x 16 lanes x
// 2 FLOPs = 64; AVX2 with FMA: 32; AVX: 16, a multiply and an add pipe; SSE3: 8), as
// Intel's server cores since Skylake-SP have; a core with one pipe, or two hyperthreads on one
// core, reach half, so MFU against this peak is a lower bound.
struct CpuPeak {
  double ghz = 0;
  int flops_per_cycle = 0;
  const char* clock_source = "";  // "cpuinfo_max_freq", "/proc/cpuinfo" or "" (unknown)
  double flops_per_s() const { return ghz * 1e9 * flops_per_cycle; }
};
CpuPeak cpu_thread_peak();

enum class Isa { Baseline, Avx2, Avx512 };

// Which clones of a loop this processor runs best.
inline Isa best_isa() {
  static const Isa isa = cpu_isa_level() >= IsaLevel::Avx512 ? Isa::Avx512
                         : cpu_isa_level() >= IsaLevel::Avx2 ? Isa::Avx2
                                                             : Isa::Baseline;
  return isa;
}

}  // namespace mg::kernels::cpu

#if defined(__x86_64__) && defined(__GNUC__)
#define MG_DEFINE_FOR_EACH_ISA(DEFINE)            \
  DEFINE(_baseline, )                             \
  DEFINE(_avx2, __attribute__((target("avx2")))) \
  DEFINE(_avx512, __attribute__((target("avx512f"))))
#define MG_CALL_BEST_ISA(fn, ...)                                \
  switch (::mg::kernels::cpu::best_isa()) {                      \
    case ::mg::kernels::cpu::Isa::Avx512: return fn##_avx512(__VA_ARGS__); \
    case ::mg::kernels::cpu::Isa::Avx2: return fn##_avx2(__VA_ARGS__);     \
    case ::mg::kernels::cpu::Isa::Baseline: break;               \
  }                                                              \
  return fn##_baseline(__VA_ARGS__)
#else
#define MG_DEFINE_FOR_EACH_ISA(DEFINE) DEFINE(_baseline, )
#define MG_CALL_BEST_ISA(fn, ...) return fn##_baseline(__VA_ARGS__)
#endif
