// cli/peak.h — a device's peak float32 FLOP/s: the denominator of the MFU that `multigrad
// train --model gpt` reports and `multigrad devices` lists (README, "MFU").
//   cpu:N   its thread budget x one thread's peak (kernels/cpu/isa.h: clock x FLOPs per cycle)
//   cuda:N  SMs x clock x float32 lanes per SM x 2 (an FMA is 2 FLOPs); lanes per SM by compute
//           capability, from the CUDA C++ Programming Guide's throughput table (64 on 6.0, 7.x
//           and 8.0; 128 on 5.x, 6.1, 6.2, 8.6 and later). float32 on CUDA cores: multigrad's
//           GEMMs do not use TF32 tensor cores (kernels/cuda/matmul.cu).
#pragma once

#include <string>

#include "core/device.h"

namespace mg::cli {

struct PeakFlops {
  double flops_per_s = 0;  // 0: unknown (no clock rate found)
  std::string how;         // "2 threads x 2.00 GHz x 64 FLOPs/cycle"
};

PeakFlops peak_flops(const Device& device);

}  // namespace mg::cli
