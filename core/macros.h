// core/macros.h — portability macros shared by host code and CUDA kernels.
#pragma once

// MG_HD marks math that is written once and runs on the CPU and in CUDA kernels.
#if defined(__CUDACC__)
#define MG_HD __host__ __device__ __forceinline__
#else
#define MG_HD inline
#endif
