// cli/peak.h — a device's peak FLOP/s at a precision: the denominator of the MFU that `multigrad
// train --model gpt` reports and `multigrad devices` lists (README, "MFU"). Each is an upper
// bound (the widest units busy every cycle at the highest clock), so the MFU is a lower bound.
//   cpu:N, fp32  its thread budget x one thread's peak (kernels/cpu/isa.h: clock x FLOPs per cycle)
//   cpu:N, bf16  the same with the FLOPs per cycle of the bf16 GEMMs' kernels (AMX or AVX-512 BF16,
//                kernels/cpu/matmul_bf16.h); where the CPU has neither, bf16 is multiplied in
//                float32, and the float32 peak is the one
//   cpu:N, fp16  the float32 peak: the CPU's fp16 GEMMs run in float32 (autograd/autocast.h)
//   cuda:N, fp32 SMs x clock x float32 lanes per SM x 2 (an FMA is 2 FLOPs); lanes per SM by
//                compute capability, from the CUDA C++ Programming Guide's throughput table (64 on
//                6.0, 7.x and 8.0; 128 on 5.x, 6.1, 6.2, 8.6 and later). float32 on CUDA cores:
//                multigrad's float32 GEMMs do not use TF32 tensor cores (kernels/cuda/matmul.cu).
//   cuda:N, bf16 and fp16: SMs x clock x dense tensor-core FLOPs per SM per cycle, from NVIDIA's
//                published peaks (V100 125, T4 65, A100 312, A10 125, L4 121, H100 SXM 989 TFLOP/s
//                over their SMs and boost clocks): 1024 on 7.0, 7.5 (fp16 only), 8.6 and 8.9, 2048
//                on 8.0, 4096 on 9.0; unknown elsewhere. cuBLAS's 16-bit GEMMs run there.
#pragma once

#include <string>

#include "multigrad/autograd/autocast.h"
#include "multigrad/core/device.h"

namespace mg::cli {

struct PeakFlops {
  double flops_per_s = 0;  // 0: unknown (no clock rate or rate per cycle known)
  std::string how;         // "2 threads x 2.00 GHz x 128 FLOPs/cycle of AVX-512 BF16"
  std::string of;          // the precision the rate is of: "float32", "bf16" or "fp16"
};

// `threads`: for a CPU device, the threads it can have to itself (0: its thread budget; less when
// processes on one host share its cores).
PeakFlops peak_flops(const Device& device, Precision precision = Precision::Float32, int threads = 0);

}  // namespace mg::cli
