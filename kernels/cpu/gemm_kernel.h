// kernels/cpu/gemm_kernel.h — which OpenBLAS kernels run the CPU's GEMMs (matmul, convolution),
// chosen once per process.
//
// OpenBLAS (a DYNAMIC_ARCH build, as Debian's) picks its kernels by CPU model number when it
// loads. A model it does not know gets its generic Prescott (SSE3) kernels: Debian's 0.3.21 on an
// AVX-512 Sapphire Rapids Xeon ran a 1024^3 SGEMM in 32.9 ms instead of 16.0 ms with its SkylakeX
// kernels (issue 16). So multigrad compares OpenBLAS's pick with the instruction sets this CPU and
// its OS support (cpuid and XCR0, through __builtin_cpu_supports): when OPENBLAS_CORETYPE is
// unset and the pick is of a lower level, it asks OpenBLAS to choose again with
// OPENBLAS_CORETYPE naming the kernels of the CPU's level (SkylakeX from AVX-512 up: SGEMM's
// kernels do not change above it). OpenBLAS's own selection code does the switch
// (gotoblas_dynamic_quit / gotoblas_dynamic_init, which a DYNAMIC_ARCH build exports), when the
// library loads, and the environment is restored afterwards. An OPENBLAS_CORETYPE the user set is
// obeyed. Whatever happens, GEMMs below the CPU's level print one warning line to stderr at the
// first GEMM, and `multigrad devices` shows the choice. Loading libmultigrad while other threads
// call OpenBLAS or read the environment is not supported: the switch is atomic for neither.
#pragma once

#include <string>

#include "multigrad/kernels/cpu/isa.h"

namespace mg::kernels::cpu {

// The level of an OpenBLAS x86-64 core name ("Prescott" -> Sse3, "Zen" -> Avx2, case-insensitive);
// Unknown for names it does not list.
IsaLevel openblas_core_level(const std::string& core);
// The OpenBLAS kernels of a level: "Cooperlake", "SkylakeX", "Haswell", "Sandybridge", "Prescott".
const char* openblas_core_for(IsaLevel level);

// What to do about OpenBLAS's pick `detected` on a CPU of level `cpu`, OPENBLAS_CORETYPE being
// `coretype_env` (nullptr when unset). Pure, so that every case is a test.
struct GemmKernelPlan {
  std::string switch_to;  // the core to ask OpenBLAS for; empty: keep `detected`
  std::string warning;    // empty, or why GEMMs will run below the CPU's level
};
GemmKernelPlan plan_gemm_kernel(const std::string& detected, IsaLevel cpu, const char* coretype_env);

// The GEMM kernels in use, chosen once (when the library loads).
struct GemmKernel {
  std::string library;   // "OpenBLAS 0.3.21"
  std::string core;      // the kernels in use: "SkylakeX"
  std::string origin;    // how they were chosen, e.g. "OpenBLAS's own choice"
  std::string warning;   // empty unless GEMMs run below the CPU's level
};
const GemmKernel& gemm_kernel();
// Prints gemm_kernel().warning to stderr, once per process; gemm() in blas.h calls it.
void warn_once_if_slow_gemm_kernel();

// Asks OpenBLAS to select `core` (its OPENBLAS_CORETYPE spelling) now, through its own selection
// code; returns the core then in use. For gemm_kernel() and for tests that switch and restore.
std::string reselect_openblas_core(const std::string& core);

}  // namespace mg::kernels::cpu
