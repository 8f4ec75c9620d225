// kernels/cpu/conv_onednn.h — float32 conv2d on the CPU through oneDNN's direct convolutions,
// the kernels PyTorch's CPU convolutions run, beside conv.cpp's im2col + GEMM.
//
// Why: at the Fashion-MNIST CNN's second layer (batch 128, 32 -> 64 channels, 14 x 14, 3 x 3)
// forward and both backwards took 56.3 ms on 2 Zen 3 cores through im2col + OpenBLAS against
// 27.4 ms through oneDNN 2.6 (bench_workloads conv2d): im2col, col2im and the layout copies
// around the GEMMs cost a third of the time, and oneDNN's JIT kernels work on blocked layouts
// (nChw8c for AVX2, nChw16c for AVX-512) with none of them (benchmarks/NOTES.md).
//
// Which path runs: oneDNN for Float32 outside deterministic mode; im2col + GEMM for Float64 (oneDNN
// has no f64 convolutions), in deterministic mode (its sums have a fixed order whatever the thread
// count, which oneDNN does not promise: cuDNN's deterministic algorithms play the same part on
// CUDA), for the backwards of a layer with fewer than 8 input channels per group (oneDNN pads
// them to its vector block: the Fashion-MNIST CNN's first layer has 1), for empty tensors, for
// anything oneDNN declines, in a build without oneDNN, and when set_cpu_conv_algorithm(Im2col)
// asks for it (tests compare the two).
//
// How: each call describes the convolution with format `any`, so oneDNN picks its layouts and
// kernels for this CPU; NCHW inputs are reordered into them and results back; the blocked
// buffers and oneDNN's scratchpad are tensors of the device (its memory statistics count them).
// The descriptors are built on every call; the primitives come from oneDNN's primitive cache.
// Its OpenMP threads are the device's budget: omp_set_num_threads on the calling thread,
// restored afterwards.
#pragma once

#include <string>

#include "multigrad/core/tensor.h"
#include "multigrad/kernels/conv.h"

namespace mg::kernels::cpu {

enum class CpuConvAlgorithm { Auto, Im2col };
void set_cpu_conv_algorithm(CpuConvAlgorithm algorithm);  // process-wide; Auto by default
CpuConvAlgorithm cpu_conv_algorithm();

// What runs the float32 convolutions: "oneDNN 2.6.3" and its kernels' instruction set ("AVX2"),
// or why there is no oneDNN; a warning when its kernels are below the CPU's level
// (ONEDNN_MAX_CPU_ISA set low). Asked once; the warning is printed at the first convolution.
struct ConvLibrary {
  std::string name;     // empty without oneDNN
  std::string isa;      // oneDNN's kernels: "AVX2", "AVX-512", ...
  std::string warning;  // empty unless those kernels are below the CPU's level
};
const ConvLibrary& conv_library();

// The three convolutions of kernels/conv.h through oneDNN; false when oneDNN does not take the
// call (see the file comment), and the caller runs im2col + GEMM.
bool onednn_conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& out,
                           const Conv2dParams& p);
bool onednn_conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_input,
                                  const Conv2dParams& p);
bool onednn_conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& grad_weight,
                                   const Conv2dParams& p);

}  // namespace mg::kernels::cpu
