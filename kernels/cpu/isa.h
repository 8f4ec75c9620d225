// kernels/cpu/isa.h — loops compiled for several x86 instruction sets, the best one picked at
// run time (internal to kernels/cpu/).
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

enum class Isa { Baseline, Avx2, Avx512 };

// What this processor runs, asked once.
inline Isa best_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const Isa isa = __builtin_cpu_supports("avx512f") ? Isa::Avx512
                         : __builtin_cpu_supports("avx2")  ? Isa::Avx2
                                                           : Isa::Baseline;
  return isa;
#else
  return Isa::Baseline;
#endif
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
