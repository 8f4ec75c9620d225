// kernels/cpu_libraries.cpp — cpu_libraries and cpu_thread_peak (cpu_libraries.h), from the CPU
// kernels' own records.
#include "multigrad/kernels/cpu_libraries.h"

#include "multigrad/kernels/cpu/conv_onednn.h"
#include "multigrad/kernels/cpu/gemm_kernel.h"
#include "multigrad/kernels/cpu/isa.h"
#include "multigrad/kernels/cpu/matmul_bf16.h"

namespace mg::kernels {

const CpuLibraries& cpu_libraries() {
  static const CpuLibraries libraries = [] {
    CpuLibraries out;
    out.cpu_isa = cpu::isa_level_name(cpu::cpu_isa_level());
    const cpu::GemmKernel& gemm = cpu::gemm_kernel();
    out.gemm = {gemm.library, gemm.core, gemm.origin, gemm.warning};
    const cpu::ConvLibrary& onednn = cpu::conv_library();
    out.onednn = {onednn.name, onednn.isa, onednn.warning};
    out.bf16_matmuls = cpu::runs_bf16_gemm();
    return out;
  }();
  return libraries;
}

CpuThreadPeak cpu_thread_peak() {
  const cpu::CpuPeak thread = cpu::cpu_thread_peak();
  return {thread.ghz, thread.flops_per_cycle, cpu::bf16_gemm_flops_per_cycle(), cpu::bf16_gemm_isa_name()};
}

}  // namespace mg::kernels
