// sim/h100.h — an H100's limits and the cost model's assumptions: every constant the prediction
// of a step's time uses (sim/cost_model.h, docs/cost-model.md), each with where it comes from.
//
// The GPU is the H100 SXM5 80 GB (the one llm.c's published GPT-2 figures ran on). Published
// figures carry their source; what is assumed says so and why. Changing a figure here changes
// every prediction, and the GPU shot (scripts/gpu-check.sh) is what measures them.
#pragma once

namespace mg::sim::h100 {

// ---- published limits: NVIDIA H100 Tensor Core GPU datasheet (SXM5 column) and the NVIDIA H100
// Tensor Core GPU Architecture whitepaper (2022), "H100 SXM5" in its comparison table ----
inline constexpr int kSms = 132;                           // streaming multiprocessors
inline constexpr double kMemoryBytes = 80e9;               // HBM3, 80 GB
inline constexpr double kHbmBytesPerS = 3.35e12;           // HBM3 bandwidth, 3.35 TB/s
inline constexpr double kBf16TensorFlops = 989.4e12;       // dense bf16/fp16 tensor cores (1,979 sparse)
inline constexpr double kTf32TensorFlops = 494.7e12;       // dense tf32 tensor cores (989 sparse)
inline constexpr double kFp32Flops = 66.9e12;              // float32 on CUDA cores (no tensor cores)
inline constexpr double kL2Bytes = 50e6;                   // L2 cache, 50 MB
inline constexpr int kMaxThreadsPerSm = 2048;              // whitepaper, compute capability 9.0 table
inline constexpr int kMaxBlocksPerSm = 32;                 // same table
inline constexpr double kNvlinkBytesPerS = 450e9;          // NVLink 4: 900 GB/s both directions, 450 each way
inline constexpr double kPcieBytesPerS = 64e9;             // PCIe Gen5 x16, one direction

// ---- assumptions (not published figures; each is a round number from common measurements, to be
// replaced by what the GPU shot measures) ----
// The fraction of the peak HBM bandwidth a well-written streaming kernel reaches (copy kernels
// reach about 90% on HBM GPUs; we take a little less for kernels that also compute).
inline constexpr double kHbmEfficiency = 0.85;
// The fraction of the CUDA cores' float32 peak a compute-bound hand-written kernel reaches.
inline constexpr double kFp32Efficiency = 0.6;
// The fraction of the tensor-core peak cuBLAS reaches on a GEMM that fills every SM (bf16 GEMMs of
// GPT-2's shapes are commonly measured at 600-750 TFLOP/s on an H100 SXM).
inline constexpr double kGemmTensorEfficiency = 0.7;
// The same for a float32 GEMM on CUDA cores (SGEMM, without TF32).
inline constexpr double kGemmFp32Efficiency = 0.75;
// cuBLAS's output tile for a wave-quantisation estimate: 128 x 128 (a common CUTLASS tile).
inline constexpr int kGemmTile = 128;
// When a GEMM's output has fewer tiles than SMs, cuBLAS splits its k across blocks (split-K),
// each block taking at least this much of k.
inline constexpr int kGemmSplitKMin = 256;
// Resident threads per SM needed to reach the memory and float32 peaks (Little's law: enough
// loads in flight to cover the memory latency); a launch with fewer threads per SM reaches a
// proportional share. Half of the 2048 an SM holds.
inline constexpr int kSaturatingThreadsPerSm = 1024;
// What each kernel launch adds to the stream's time: the host's launch cost and the gap between
// two dependent kernels on one stream (a few microseconds without CUDA graphs).
inline constexpr double kLaunchSeconds = 3e-6;
// A host synchronisation: the GPU drains its queue, the host wakes and launches again.
inline constexpr double kHostSyncSeconds = 10e-6;
// A cudaMalloc (and a cudaFree, which also waits for the device): tens to hundreds of microseconds.
inline constexpr double kMallocSeconds = 100e-6;
// The fraction of PCIe's bandwidth a copy between host and device reaches.
inline constexpr double kPcieEfficiency = 0.8;
// The fraction of NVLink's bandwidth an NCCL collective's bus reaches (nccl-tests' bus bandwidth).
inline constexpr double kNvlinkEfficiency = 0.8;

}  // namespace mg::sim::h100
